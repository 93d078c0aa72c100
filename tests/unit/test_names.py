from __future__ import annotations

from archiver.archive import names


def test_object_names_carry_job_attempt_and_part() -> None:
    name = names.file_name("public.orders", "j1", 7, 12)
    assert name == "public.orders/job-j1-a007-part-00012.parquet"
    assert name.startswith(names.job_prefix("public.orders", "j1"))
    assert names.job_prefix("public.orders") == "public.orders/"
    assert names.attempt_of("archive/" + name) == 7
    assert names.attempt_of("public.orders/notes.txt") is None
