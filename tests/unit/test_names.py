from __future__ import annotations

from archiver.files import names


def test_object_names_carry_job_attempt_and_part() -> None:
    name = names.file_name("public.orders", "j1", 7, 12)
    assert name == "public.orders/job-j1-a007-part-00012.parquet"
    assert name.startswith(names.job_prefix("public.orders", "j1"))
    assert names.job_prefix("public.orders") == "public.orders/"
    assert names.attempt_of("archive/" + name) == 7
    assert names.attempt_of("public.orders/notes.txt") is None


def test_a_rewrite_gets_a_new_name_beside_its_original() -> None:
    original = "archive/" + names.file_name("public.orders", "j1", 1, 3)
    once = names.rewritten_name(original, 12)
    assert once == "archive/public.orders/rewrite-12-job-j1-a001-part-00003.parquet"
    assert once.startswith("archive/" + names.rewrite_prefix("public.orders", 12))
    # a rewrite of a rewrite: the operation's prefix replaces the earlier one's
    twice = names.rewritten_name(once, 40)
    assert twice == "archive/public.orders/rewrite-40-job-j1-a001-part-00003.parquet"
    # never under the job's prefix, whose uncatalogued uploads a retry deletes
    assert not once.startswith("archive/" + names.job_prefix("public.orders", "j1"))
