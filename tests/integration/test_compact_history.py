"""Compaction across a table's history: a column whose type changed (varchar(10), then
varchar(40): one Delta type, two PostgreSQL ones) leaves files of two kinds, each merged
into its own file within one operation, a file alone of its kind left as it is; the
files of a job still at work are not merged. The inputs a merge keeps for readers
go at once when an erasure takes rows of the table out (they hold them too); the
pruner forgets a compaction's ledger row once its inputs are gone, never an erasure's."""

from __future__ import annotations

import datetime as dt

from tests.support.harness import Harness

SCHEMA = """
CREATE TABLE notes (
    id         bigint PRIMARY KEY,
    body       varchar(10) NOT NULL,
    created_at timestamptz NOT NULL);
INSERT INTO notes
    SELECT g, 'n' || g, '2024-01-01'::timestamptz + g * interval '1 hour'
    FROM generate_series(1, 24 * 30) g;
"""


def day(n: int) -> str:
    return (dt.date(2024, 1, 1) + dt.timedelta(days=n)).isoformat()


def committed(h: Harness) -> list[tuple[str, int, int | None]]:
    """(path, rows, the operation that made it) of each committed file, oldest rows first."""
    return [
        (r["path"], r["row_count"], r["made_by"])
        for r in h.sql(
            "SELECT path, row_count, made_by FROM archive_files "
            "WHERE state = 'committed' ORDER BY min_cutoff_value"
        )
    ]


def test_each_kind_merges_apart_and_a_running_jobs_files_wait(h: Harness) -> None:
    h.sql(SCHEMA)
    moved = h.old_ids(day(13), "notes")
    for n in range(1, 9):  # eight days of varchar(10)
        h.enqueue("--table", "notes", "--before", day(n))
    h.drain()
    h.sql("ALTER TABLE notes ALTER body TYPE varchar(40)")
    for n in range(9, 13):  # four of varchar(40)
        h.enqueue("--table", "notes", "--before", day(n))
    h.drain()
    (job,) = h.enqueue("--table", "notes", "--before", day(13))
    h.drain()  # a thirteenth day, its job then taken as running again (a worker's lease)
    h.sql("UPDATE background_jobs SET status = 'running' WHERE id = $1::uuid", job)
    done = h.cli("compact", "--table", "notes", "--period", "none")
    assert done.returncode == 0, done.stderr
    files = committed(h)
    merges = [f for f in files if f[2] is not None]
    assert [rows for _, rows, _ in merges] == [24 * 8 - 1, 24 * 4], files  # the first day: 23
    assert len({op for _, _, op in merges}) == 1  # one operation, two merged files
    assert [f for f in files if f[2] is None] == [files[-1]]  # the running job's, left
    h.sql("UPDATE background_jobs SET status = 'completed' WHERE id = $1::uuid", job)
    back = h.cli("restore", "--table", "notes")  # every row back, each as its type said
    assert back.returncode == 0, back.stderr
    back_ids = h.value("SELECT count(*) FROM notes WHERE id = ANY($1::bigint[])", sorted(moved))
    assert back_ids == len(moved) and h.value("SELECT count(*) FROM notes") == 24 * 30
    assert h.value("SELECT max(length(body)) FROM notes") <= 10


def test_an_erasure_reaps_kept_inputs_and_the_pruner_forgets_old_merges(h: Harness) -> None:
    h = h.with_env(ARCHIVER_READER_RETENTION=str(7 * 86400))  # the default (the harness: 0)
    h.sql(SCHEMA)
    for n in range(1, 11):
        h.enqueue("--table", "notes", "--before", day(n))
    h.drain()
    assert h.cli("erase", "--table", "notes", "--where", "id = 5").returncode == 0
    assert h.cli("compact", "--table", "notes", "--period", "none").returncode == 0
    kept = "SELECT count(*) FROM archive_files WHERE state = 'retired' AND kept_until > now()"
    assert h.value(kept) == 10  # the merge's inputs, kept for readers
    h.sql("UPDATE archive_ledger SET finished_at = now() - interval '40 days'")
    h.drain()  # the pruner: the merge's inputs are still kept
    assert h.value("SELECT count(*) FROM archive_ledger") == 2
    before = len(h.blobs())
    erased = h.cli("erase", "--table", "notes", "--where", "id = 30")
    assert erased.returncode == 0, erased.stderr
    assert h.value(kept) == 0 and len(h.blobs()) == before - 10  # reaped: they held id 30
    h.sql("UPDATE archive_ledger SET finished_at = now() - interval '40 days'")
    h.drain()
    operations = [r["operation"] for r in h.sql("SELECT operation FROM archive_ledger ORDER BY id")]
    assert operations == ["erase", "erase"]
