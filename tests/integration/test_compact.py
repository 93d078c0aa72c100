"""Compaction (`archiver compact`, the workers' duty): a table archived by one job a day
is merged into files of the target size, as a ledger operation -- through a crash at each
step, beside the commands that take its files out (which make it yield, and never fail),
and while readers read it (delta-rs, DuckDB, `archiver query`, `--with-live`): every
row once, at every moment, and the blobs exactly what the catalog names."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    Process,
    archiver_cmd,
    assert_refused,
    column_layout,
    start_process,
    wait_for_text,
)
from tests.support.delta import delta, duck, uri
from tests.support.harness import Harness, Worlds, cloned

DAYS = 16  # from 2024-01-01: 15 daily jobs, each a file of 144 rows
SCHEMA = """
CREATE TABLE events (
    id         bigint PRIMARY KEY,
    customer   int NOT NULL,
    created_at timestamptz NOT NULL);
CREATE INDEX ON events (created_at);
INSERT INTO events
    SELECT g, g % 50, '2024-01-01'::timestamptz + g * interval '10 minutes'
    FROM generate_series(1, 144 * 60) g;
"""


def day(n: int) -> str:
    return (dt.date(2024, 1, 1) + dt.timedelta(days=n)).isoformat()


def daily(h: Harness, table: str = "events", days: int = DAYS, *args: str) -> set[int]:
    """One archive job a day from 2024-01-02 (oldest first, one worker): the ids moved."""
    moved = h.old_ids(day(days - 1), table)
    for n in range(1, days):
        h.enqueue("--table", table, "--before", day(n), *args)
    h.drain(timeout=300)
    assert not h.value("SELECT count(*) FROM background_jobs WHERE status <> 'completed'")
    return moved


def archived_daily(world: Harness) -> set[int]:
    world.sql(SCHEMA)
    moved = daily(world)
    assert world.value("SELECT count(*) FROM archive_files WHERE state = 'committed'") == DAYS - 1
    return moved


@pytest.fixture
def events(h: Harness, worlds: Worlds) -> Iterator[tuple[Harness, set[int]]]:
    """A copy of the events table archived a day at a time, built once (Worlds)."""
    world, moved = worlds.get(archived_daily)
    with cloned(world, h) as mine:  # the merges' inputs kept for readers, as by default
        yield mine.with_env(ARCHIVER_READER_RETENTION=str(7 * 86400)), moved


def committed(h: Harness, table: str = "public.events") -> list[dict[str, Any]]:
    return [
        dict(r)
        for r in h.sql(
            "SELECT path, row_count, made_by, job_id::text AS job, part FROM archive_files "
            "WHERE state = 'committed' AND source_table = $1 ORDER BY path",
            table,
        )
    ]


def every_reader_counts(h: Harness, moved: set[int], live: int) -> None:
    """delta-rs, DuckDB's delta scan, `archiver query` and `--with-live`: each archived
    row once (and, with the live rows, every row once)."""
    ids = delta(h, "public.events").to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == sorted(moved), "delta-rs"
    con = duck(h)
    [(n, distinct)] = con.execute(
        f"SELECT count(*), count(DISTINCT id) FROM delta_scan('{uri(h, 'public.events')}')"
    ).fetchall()
    assert n == distinct == len(moved), "DuckDB"
    for args, want in ((["query"], len(moved)), (["query", "--with-live"], len(moved) + live)):
        done = h.cli(
            *args, "--format", "json", "SELECT count(*) AS n, count(DISTINCT id) AS d FROM events"
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"n": want, "d": want}, (args, done.stdout)


def test_daily_files_merge_into_one_read_once_by_every_reader(
    events: tuple[Harness, set[int]],
) -> None:
    h, moved = events
    live = h.value("SELECT count(*) FROM events")
    plan = h.cli("compact", "--table", "events", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.splitlines()
    assert lines[0].startswith(f"group 1: {DAYS - 1} chunks, {DAYS - 1} files, {len(moved):,} rows")
    assert sum(ln.startswith("  archive/public.events/job-") for ln in lines) == DAYS - 1
    assert lines[-1].startswith(f"would merge {DAYS - 1} files ({len(moved):,} rows")
    assert lines[-1].endswith("into 1 file; 0 already of a good size, 0 left"), lines[-1]
    assert len(committed(h)) == DAYS - 1  # a dry run changes nothing

    done = h.cli("compact", "--table", "events")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"merged {DAYS - 1} files"), done.stdout
    [merged] = committed(h)
    operation = h.value("SELECT id FROM archive_ledger WHERE operation = 'compact'")
    assert merged["path"] == f"archive/public.events/compact-{operation}-00000.parquet"
    assert (merged["row_count"], merged["made_by"], merged["part"]) == (len(moved), operation, 0)
    assert f"the {DAYS - 1} files it took out stay 7 days" in done.stderr, done.stderr
    every_reader_counts(h, moved, live)
    layout = column_layout(h.blob(merged["path"]))  # a merge writes as a chunk does
    assert {c: "DELTA_BINARY_PACKED" in e for c, (_, e) in layout.items()} == {
        "id": True, "customer": True, "created_at": True, "created_at__pg_text": False
    }, layout  # fmt: skip
    # one Delta commit: the small files out, the merge in, no data change (OPTIMIZE)
    table = delta(h, "public.events")
    assert [a.split("/")[-1] for a in table.file_uris()] == [merged["path"].split("/")[-1]]
    last = table.history(1)[0]
    assert last["operation"] == "OPTIMIZE", last
    actions = [
        json.loads(line)
        for line in h.blob(f"archive/public.events/_delta_log/{table.version():020d}.json")
        .decode()
        .splitlines()
    ]
    changes = {k: a[k]["dataChange"] for a in actions for k in ("add", "remove") if k in a}
    assert changes == {"add": False, "remove": False}, actions
    assert h.cli("verify", "--table", "events").returncode == 0
    h.exactly_once(moved, "events")
    again = h.cli("compact", "--table", "events")
    assert again.stdout.startswith("merged 0 files"), again.stdout  # nothing small left beside it


def compacting(h: Harness, log: Path, failpoints: str, *args: str) -> Process:
    return start_process(
        archiver_cmd("compact", "--table", "events", *args),
        {**h.env, "ARCHIVER_FAILPOINTS": failpoints},
        log,
    )


@pytest.mark.parametrize(
    "point", ["compact_merged", "compact_uploaded", "compact_before_commit", "compact_committed"]
)
def test_sigkill_at_each_step(events: tuple[Harness, set[int]], tmp_path: Path, point: str) -> None:
    """Killed before its commit, the merge is abandoned by the next sweep (its upload
    deleted); after, it stands and the next publication shows it. Either way every row
    is once in the catalogued files, and the blobs are what the catalog names."""
    h, moved = events
    log = tmp_path / "compact.log"
    proc = compacting(h, log, f"{point}=pause")
    wait_for_text(log, f"failpoint {point} reached")
    proc.kill()
    proc.wait(10)
    h.drain()  # the sweep (a publish job of the table): abandons, or publishes
    status = h.value("SELECT status FROM archive_ledger")
    assert status == ("done" if point == "compact_committed" else "abandoned")
    files = committed(h)
    assert len(files) == (1 if status == "done" else DAYS - 1)
    h.exactly_once(moved, "events")  # each row in one committed file; no stray blob
    assert h.cli("verify", "--table", "events").returncode == 0
    every_reader_counts(h, moved, h.value("SELECT count(*) FROM events"))
    again = h.cli("compact", "--table", "events")
    assert again.returncode == 0, again.stderr
    assert len(committed(h)) == 1
    h.exactly_once(moved, "events")


def erase(h: Harness, log: Path, failpoints: str = "", where: str = "customer = 7") -> Process:
    return start_process(
        archiver_cmd("erase", "--table", "events", "--where", where),
        {**h.env, "ARCHIVER_FAILPOINTS": failpoints},
        log,
    )


def test_an_erasure_holding_the_table_makes_compaction_yield_and_both_succeed(
    events: tuple[Harness, set[int]], tmp_path: Path
) -> None:
    """An erasure mid-way holds the table: a compaction asked meanwhile yields before it
    writes anything, and the erasure completes. (Without the hold, the compaction
    commits under it and the erasure fails: "some of these files left the archive
    meanwhile".)"""
    h, moved = events
    log = tmp_path / "erase.log"
    proc = erase(h, log, "erase_rewritten=sleep:8", "id = 5")  # one file, rewritten
    wait_for_text(log, "failpoint erase_rewritten reached")
    done = h.cli("compact", "--table", "events")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("merged 0 files"), done.stdout
    assert "stopped early: yielded to a command on public.events" in done.stderr, done.stderr
    # it yielded before it began: no ledger operation, nothing written
    assert h.value("SELECT count(*) FROM archive_ledger WHERE operation = 'compact'") == 0
    assert proc.wait(60) == 0, log.read_text()
    h.exactly_once(moved - {5}, "events")
    assert not [b for b in h.blobs() if "/compact-" in b]


def test_a_command_asking_while_a_merge_commits_waits_for_it(
    events: tuple[Harness, set[int]], tmp_path: Path
) -> None:
    """A merge paused inside its commit (its inputs locked, the table taken): an
    erasure asked meanwhile waits, then erases from the merged file; both succeed."""
    h, moved = events
    erased = {i for i in moved if i % 50 == 7}
    log = tmp_path / "compact.log"
    proc = compacting(h, log, "compact_before_commit=sleep:6")
    wait_for_text(log, "failpoint compact_before_commit reached")
    started = time.monotonic()
    waited = erase(h, tmp_path / "erase.log")
    assert waited.wait(120) == 0, (tmp_path / "erase.log").read_text()
    assert time.monotonic() - started > 2  # it waited for the merge's commit
    assert proc.wait(60) == 0, log.read_text()
    assert f"merged {DAYS - 1} files" in log.read_text(), log.read_text()
    [merged] = committed(h)
    assert merged["path"].rsplit("/", 1)[1].startswith("rewrite-")  # erased after the merge
    h.exactly_once(moved - erased, "events")


@pytest.mark.parametrize("command", ["restore", "purge"])
def test_a_command_committing_while_a_merge_is_written_makes_it_yield(
    events: tuple[Harness, set[int]], tmp_path: Path, command: str
) -> None:
    """A merge written while a restore of two days (or a purge of the oldest week) takes
    some of its inputs out: at its commit the merge finds them gone and yields; the
    command succeeds, every row it left once (a purged row nowhere)."""
    h, moved = events
    log = tmp_path / "compact.log"
    proc = compacting(h, log, "compact_merged=sleep:6")
    wait_for_text(log, "failpoint compact_merged reached")
    if command == "restore":
        done = h.cli("restore", "--table", "events", "--from", day(3), "--to", day(5))
        gone = {i for i in moved if day(3) <= _when(i) < day(5)}
    else:  # the files wholly older than ~day 8 as the purge counts, from now: day 8's
        # too (its last row at 23:50) in a run after 23:50 (it failed at 23:54)
        days = (dt.date.today() - dt.date.fromisoformat(day(8))).days
        limit = dt.datetime.now(dt.UTC) - dt.timedelta(days=days)
        done = h.cli("purge", "--table", "events", "--older-than", f"{days} days")
        gone = {i for i in moved if dt.datetime.fromisoformat(f"{_when(i)}T23:50Z") < limit}
    assert done.returncode == 0, done.stderr
    assert proc.wait(60) == 0, log.read_text()
    assert "stopped early: " in log.read_text() and "merged 0 files" in log.read_text()
    live = h.value("SELECT count(*) FROM events") - 144 * 60 + len(moved)
    assert live == (len(gone) if command == "restore" else 0) and 0 < len(gone) < len(moved)
    h.exactly_once(moved - gone, "events")
    assert not [b for b in h.blobs() if "/compact-" in b]


def _when(event_id: int) -> str:
    return (dt.datetime(2024, 1, 1) + dt.timedelta(minutes=10 * event_id)).date().isoformat()


def test_readers_see_every_row_once_through_the_merge(
    events: tuple[Harness, set[int]], tmp_path: Path
) -> None:
    """Read at each moment of a merge -- before it, between its catalog commit and its
    Delta commit, after both -- by delta-rs, DuckDB, `archiver query` and `--with-live`;
    and a reader that opened the Delta table before the merge still reads it whole
    after it (the small files stay for the readers' retention; deleted at once, that
    reader would fail)."""
    h, moved = events
    live = h.value("SELECT count(*) FROM events")
    before = delta(h, "public.events")  # opened now, read after the merge
    every_reader_counts(h, moved, live)
    log = tmp_path / "compact.log"
    proc = compacting(h, log, "compact_committed=sleep:8")
    wait_for_text(log, "failpoint compact_committed reached")
    assert len(committed(h)) == 1  # the catalog has the merge; the Delta log not yet
    assert len(delta(h, "public.events").file_uris()) == DAYS - 1
    every_reader_counts(h, moved, live)
    assert proc.wait(60) == 0, log.read_text()
    assert len(delta(h, "public.events").file_uris()) == 1
    every_reader_counts(h, moved, live)
    ids = before.to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == sorted(moved)
    # the retention over, the sweep deletes them
    h.sql(
        "UPDATE archive_files SET kept_until = now() - interval '1 second' WHERE state = 'retired'"
    )
    h.drain()
    assert h.value("SELECT count(*) FROM archive_files WHERE state = 'retired'") == 0
    assert len(h.blobs()) == 1
    h.exactly_once(moved, "events")


AGGREGATE = """
CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, created_at timestamptz NOT NULL);
CREATE INDEX ON orders (created_at);
CREATE TABLE order_lines (
    order_id bigint NOT NULL REFERENCES orders ON DELETE CASCADE,
    line int NOT NULL,
    sku text NOT NULL,
    PRIMARY KEY (order_id, line));
INSERT INTO orders SELECT g, g % 20, '2024-01-01'::timestamptz + g * interval '1 hour'
    FROM generate_series(1, 24 * 20) g;
INSERT INTO order_lines SELECT o, l, 'sku-' || o || '-' || l
    FROM generate_series(1, 24 * 20) o, generate_series(1, 1 + o % 3) l;
"""


def test_an_aggregate_merges_chunk_by_chunk_and_restores_and_purges_whole(h: Harness) -> None:
    """orders archived with their lines, a job a day: a merge of orders' chunks merges
    their lines too (the lines' files before the orders', one new job), so a restore
    of a range brings orders back with their lines, and a purge drops both."""
    h.sql(AGGREGATE)
    lines = h.value("SELECT count(*) FROM order_lines")
    daily(h, "orders", 15, "--with-children")
    files = h.value("SELECT count(*) FROM archive_files WHERE state = 'committed'")
    assert files == 2 * 14
    refused = h.cli("compact", "--table", "order_lines")
    assert_refused(refused, "order_lines is archived with its parents", "compact the table")
    done = h.cli("compact", "--table", "orders")
    assert done.returncode == 0, done.stderr
    merged = committed(h, "public.orders") + committed(h, "public.order_lines")
    assert [(m["path"].split("/")[1], m["part"]) for m in merged] == [
        ("public.orders", 1), ("public.order_lines", 0)
    ]  # fmt: skip
    assert len({m["job"] for m in merged}) == 1
    archived_lines = lines - h.value("SELECT count(*) FROM order_lines")
    assert sum(m["row_count"] for m in merged if "order_lines" in m["path"]) == archived_lines
    back = h.cli("restore", "--table", "orders", "--from", day(3), "--to", day(4))
    assert back.returncode == 0, back.stderr
    restored = h.value(
        "SELECT count(*) FROM orders WHERE created_at >= $1::text::timestamptz "
        "AND created_at < $2::text::timestamptz",
        day(3),
        day(4),
    )
    assert restored == 24
    assert (
        h.value(  # every restored order has its lines again
            "SELECT count(*) FROM orders o WHERE created_at < $1::text::timestamptz "
            "AND NOT EXISTS (SELECT FROM order_lines l WHERE l.order_id = o.id)",
            day(4),
        )
        == 0
    )
    purged = h.cli("purge", "--table", "orders", "--older-than", "1 day")
    assert purged.returncode == 0, purged.stderr
    assert committed(h, "public.order_lines") == []  # the lines went with their orders


def test_the_workers_compact_by_themselves_unless_a_policy_says_not(
    events: tuple[Harness, set[int]], tmp_path: Path
) -> None:
    """The workers' duty: once ARCHIVER_COMPACT_EVERY per storage, a compaction job of
    each table with small files; `compact = false` in its policy leaves it."""
    h, moved = events
    config = tmp_path / "archiver.toml"
    config.write_text(
        '[[policy]]\nname = "events"\ntable = "events"\nolder_than = "30 days"\n'
        'schedule = "0 3 * * *"\ncompact = false\n'
    )
    aged = "UPDATE archiver_maintenance SET last_queued = now() - interval '2 hours' WHERE duty = 'compact'"
    h.drain("--config", str(config))  # the first look starts the clock
    h.sql(aged)
    h.drain("--config", str(config))
    assert h.value("SELECT count(*) FROM background_jobs WHERE task_name = 'compact'") == 0
    h.sql(aged)
    h.drain()
    job = h.sql("SELECT status, progress FROM background_jobs WHERE task_name = 'compact'")
    assert [r["status"] for r in job] == ["completed"], job
    assert json.loads(job[0]["progress"])["merged_files"] == DAYS - 1
    assert len(committed(h)) == 1
    h.drain()  # its publication
    every_reader_counts(h, moved, h.value("SELECT count(*) FROM events"))


def test_bad_input_is_one_line_and_changes_nothing(events: tuple[Harness, set[int]]) -> None:
    h, _ = events
    for args, needle in (
        (["--table", "nope"], "no archived files of table 'nope'"),
        (["--table", "events", "--target", "big"], "--target: 'big' is not a size"),
        (["--table", "events", "--period", "week"], "invalid choice"),
    ):
        done = h.cli("compact", *args)
        assert done.returncode != 0 and needle in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
    assert len(committed(h)) == DAYS - 1


def test_an_archive_job_committing_beside_a_merge(
    events: tuple[Harness, set[int]], tmp_path: Path
) -> None:
    """The next day's job commits its file while a merge is written: both stand, the new
    file beside the merge, every row once."""
    h, moved = events
    log = tmp_path / "compact.log"
    proc = compacting(h, log, "compact_merged=sleep:6")
    wait_for_text(log, "failpoint compact_merged reached")
    more = h.old_ids(day(DAYS), "events") - moved
    h.archive("--table", "events", "--before", day(DAYS))
    assert proc.wait(60) == 0, log.read_text()
    assert f"merged {DAYS - 1} files" in log.read_text(), log.read_text()
    assert [m["made_by"] is None for m in committed(h)].count(True) == 1  # the new file
    h.drain()
    every_reader_counts(h, moved | more, h.value("SELECT count(*) FROM events"))
    h.exactly_once(moved | more, "events")
