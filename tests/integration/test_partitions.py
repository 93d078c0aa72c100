"""Whole old partitions leave by DETACH and DROP, archived and verified first; the partly
old one and the DEFAULT partition by rows; nothing else touched. Crashes on either side
of the commit, a late insert into an old partition, detach and rows modes, and restore
recreating dropped partitions. The table's foreign keys are declared on each partition."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import threading
from collections import Counter
from typing import Any

import asyncpg
import pytest

from archiver.testing.services import Azurite
from tests.support import (
    archiver_cmd,
    assert_refused,
    enqueued,
    fast_env,
    kill_at_failpoint,
    sql,
    start_process,
    start_worker,
    wait_for_text,
)
from tests.support.archive import blob_names, normalize, rows_in_blobs
from tests.support.events_by_month import CUTOFF, seed
from tests.support.harness import Harness


def rows(url: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {
        (r["id"], r["created_at"]): normalize(dict(r)) for r in sql(url, "SELECT * FROM events")
    }


def attached(url: str) -> set[str]:
    return {
        r["relname"]
        for r in sql(
            url,
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'events'::regclass",
        )
    }


def check(
    url: str,
    azurite: Azurite,
    container: str,
    before: dict[tuple[Any, ...], dict[str, Any]],
    stray: frozenset[str] = frozenset(),
) -> None:
    """Every row older than the cutoff is in exactly one catalogued file with its values
    and gone from the table; every other row is still there, unchanged."""
    paths = [r["path"] for r in sql(url, "SELECT path FROM archive_files")]
    assert blob_names(azurite.connection_string, container) == sorted({*paths, *stray})
    archived = rows_in_blobs(azurite.connection_string, container, paths)
    counted = Counter((r["id"], r["created_at"]) for r in archived)
    assert not [k for k, n in counted.items() if n > 1], "rows archived twice"
    old = {k for k, r in before.items() if str(r["created_at"]) < CUTOFF}
    assert set(counted) == old, "archived rows differ"
    assert all(r == before[(r["id"], r["created_at"])] for r in archived)
    assert rows(url) == {k: v for k, v in before.items() if k not in old}
    tables = {r["source_table"] for r in sql(url, "SELECT source_table FROM archive_files")}
    assert tables == {"public.events"}  # catalogued under the partitioned table


def enqueue(env: dict[str, str], *extra: str) -> list[str]:
    return enqueued(env, "--table", "events", "--before", CUTOFF, "--chunk-rows", "15", *extra)


def test_old_partitions_dropped_whole_then_restored(h: Harness) -> None:
    seed(h.url)
    sql(  # a DELETE trigger fires for the rows moved by rows, none of the dropped ones
        h.url,
        """
        CREATE TABLE deleted (id bigint, created_at date);
        CREATE FUNCTION log_delete() RETURNS trigger LANGUAGE plpgsql
            AS $$BEGIN INSERT INTO deleted VALUES (OLD.id, OLD.created_at); RETURN NULL; END$$;
        CREATE TRIGGER log_delete AFTER DELETE ON events
            FOR EACH ROW EXECUTE FUNCTION log_delete();
        """,
    )
    before = rows(h.url)
    plan = h.cli("enqueue", "--table", "events", "--before", CUTOFF, "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.count("whole: archived, then dropped (~") == 12, plan.stdout
    assert "delete trigger public.events: log_delete (AFTER, for each row)" in plan.stdout
    assert "(not for the partitions taken whole)" in plan.stdout
    one = h.cli("enqueue", "--table", "events_2024_01", "--before", CUTOFF, "--dry-run")
    assert "delete trigger public.events_2024_01: log_delete (AFTER" in one.stdout, one.stdout
    assert "public.events_2024_01: by rows" in plan.stdout
    assert "public.events_default: by rows" in plan.stdout
    assert re.search(r"parquet size   ~[\d.]+ k?B ", plan.stdout), plan.stdout  # the leaves'

    jobs = enqueue(h.env)
    assert len(jobs) == 14  # one per whole partition, and per partition with older rows
    workers = [start_worker(h.env, "--burst") for _ in range(2)]
    assert [w.wait(180) for w in workers] == [0, 0]
    unfinished = h.sql("SELECT * FROM background_jobs WHERE status <> 'completed'")
    assert not unfinished, [(r["last_error"], r["attempts"], r["run_at"]) for r in unfinished]
    left = attached(h.url)
    assert not {f"events_2023_{m:02d}" for m in range(1, 13)} & left  # dropped
    assert {"events_2024_01", "events_2024_12", "events_default"} <= left
    assert h.value("SELECT count(*) FROM pg_class WHERE relname LIKE 'events_2023%'") == 0
    check(h.url, h.azurite, h.container, before)
    assert h.cli("verify", "--table", "events").returncode == 0
    by_rows = {k for k in before if k[1].year > 2023 or k[0] > 100000} - set(rows(h.url))
    logged = h.sql("SELECT id, created_at FROM deleted")
    assert by_rows and sorted((r["id"], r["created_at"]) for r in logged) == sorted(by_rows)

    # a range of a dropped month: the partition comes back with its bound, then its rows
    back = h.cli("restore", "--table", "events", "--from", "2023-03-01", "--to", "2023-04-01")
    assert back.returncode == 0, back.stderr
    assert "events_2023_03" in attached(h.url)
    march = {k for k, r in before.items() if str(r["created_at"]).startswith("2023-03")}
    assert march and set(rows(h.url)) & march == march
    everything = h.cli("restore", "--table", "events", "--on-conflict", "skip")
    assert everything.returncode == 0, everything.stderr
    assert rows(h.url) == before
    assert {f"events_2023_{m:02d}" for m in range(1, 13)} <= attached(h.url)


def test_keys_declared_on_each_partition(h: Harness) -> None:
    """No key on the table, the same one on every partition, holding the partitioning
    column: walked by it (unique across partitions), old partitions whole and the rest by
    rows, restored, the dropped partitions with their keys, so the table can be archived
    again. A partitions' key without that column is refused, nothing queued."""
    seed(h.url, per_month=10, key_on_each_partition=True)
    before = rows(h.url)
    keys = "SELECT tablename::text, indexdef FROM pg_indexes WHERE tablename LIKE 'events%'"
    declared = {tuple(r) for r in h.sql(keys)}
    jobs = enqueue(h.env)
    assert len(jobs) == 14
    assert start_worker(h.env, "--burst", "--concurrency", "2").wait(180) == 0
    for job_id in jobs:
        h.wait_for(job_id, "completed", timeout=10)
    assert "events_2023_05" not in attached(h.url)
    check(h.url, h.azurite, h.container, before)
    empty = h.sql(  # September to December held no rows: a file of none each, its bound
        "SELECT min_key, min_cutoff_value::date::text AS lo, max_cutoff_value::date::text AS hi "
        "FROM archive_files WHERE row_count = 0 ORDER BY min_cutoff_value"
    )
    assert [(r["min_key"], r["lo"], r["hi"]) for r in empty] == [
        ([], f"2023-{m:02d}-01", f"{2023 + (m == 12)}-{m % 12 + 1:02d}-01") for m in range(9, 13)
    ]
    back = h.cli("restore", "--table", "events")
    assert back.returncode == 0, back.stderr
    assert rows(h.url) == before

    h.sql(
        "CREATE TABLE loose (id bigint NOT NULL, created_at date NOT NULL) "
        "PARTITION BY RANGE (created_at); "
        "CREATE TABLE loose_2023 PARTITION OF loose FOR VALUES FROM ('2023-01-01') TO "
        "('2024-01-01'); ALTER TABLE loose_2023 ADD PRIMARY KEY (id)",
    )
    refused = h.cli("enqueue", "--table", "loose", "--before", CUTOFF)
    assert_refused(refused, "not unique across partitions")
    assert h.value("SELECT count(*) FROM background_jobs WHERE task_name = 'archive'") == 14

    # every dropped partition came back with its key, the four that were empty too (each
    # left a file of no rows naming it; on a84fc94 they left none, and stayed gone): the
    # table can be archived again
    assert h.value("SELECT count(*) FROM archive_files WHERE row_count = 0") == 0  # restored
    back_again = {f"events_2023_{m:02d}" for m in range(1, 13)}
    assert back_again <= attached(h.url)
    assert {tuple(r) for r in h.sql(keys)} == {k for k in declared if k[0] in attached(h.url)}
    assert len(enqueue(h.env)) == 14  # the 12 back whole, January 2024 and DEFAULT by rows


def test_a_partition_whose_key_is_gone_is_not_restored(h: Harness) -> None:
    """A dropped partition's archived key, renamed in the table since: refused in one
    line before anything is written, the partition not recreated."""
    seed(h.url, per_month=10, key_on_each_partition=True)
    jobs = enqueue(h.env)
    assert start_worker(h.env, "--burst", "--concurrency", "2").wait(180) == 0
    for job_id in jobs:
        h.wait_for(job_id, "completed", timeout=10)
    h.sql("ALTER TABLE events RENAME COLUMN id TO event_id")
    refused = h.cli("restore", "--table", "events", "--from", "2023-03-01", "--to", "2023-04-01")
    assert_refused(refused, "partition public.events_2023_03: its archived key (id, created_at)",
                   "(id missing); nothing restored")  # fmt: skip
    assert "events_2023_03" not in attached(h.url)


@pytest.mark.parametrize("mode", ["detach", "rows"])
def test_detach_and_rows_modes(h: Harness, mode: str) -> None:
    seed(h.url, per_month=10)
    before = rows(h.url)
    jobs = enqueue(h.env, "--partitions", mode)
    assert len(jobs) == (14 if mode == "detach" else 1)
    h.drain()
    for job_id in jobs:
        h.wait_for(job_id, "completed", timeout=10)
    check(h.url, h.azurite, h.container, before)
    left = attached(h.url)
    if mode == "rows":  # every partition still attached, the old ones empty
        assert "events_2023_05" in left
    else:  # kept as standalone tables holding what was archived
        assert "events_2023_05" not in left
        kept = h.value("SELECT count(*) FROM events_2023_05_archived")
        assert kept == sum(1 for r in before.values() if str(r["created_at"]).startswith("2023-05"))


@pytest.mark.slow
@pytest.mark.parametrize("point", ["before_detach", "after_commit"])
def test_sigkill_around_the_drop(h: Harness, point: str) -> None:
    seed(h.url, per_month=10)
    before = rows(h.url)
    jobs = enqueue(h.env)
    fast = fast_env(h.env)
    log_a = h.tmp / "a.log"
    kill_at_failpoint(fast, point, log_a)
    taken = [line for line in log_a.read_text().splitlines() if "claimed" in line]
    dropped = 12 - len({f"events_2023_{m:02d}" for m in range(1, 13)} & attached(h.url))
    # killed before the commit: attached and whole; right after it: gone and catalogued
    assert dropped == (1 if point == "after_commit" else 0), taken
    b = start_worker(fast, log=h.tmp / "b.log")
    for job_id in jobs:
        h.wait_for(job_id, "completed", timeout=120)
    b.terminate()
    assert b.wait(30) == 0
    catalogued = {r["path"] for r in h.sql("SELECT path FROM archive_files")}
    stray = frozenset(blob_names(h.azurite.connection_string, h.container)) - catalogued
    assert not stray  # the next attempt swept the uncatalogued uploads
    check(h.url, h.azurite, h.container, before)


def test_a_late_insert_into_an_old_partition_is_never_lost(h: Harness) -> None:
    seed(h.url, per_month=10)
    before = rows(h.url)
    jobs = enqueue(h.env)
    log = h.tmp / "worker.log"
    worker = start_worker({**h.env, "ARCHIVER_FAILPOINTS": "before_detach=sleep:1"}, log=log)
    wait_for_text(log, "failpoint before_detach reached")
    outcome: dict[str, Any] = {}

    def late_insert() -> None:  # the application, writing into a month being archived
        async def run() -> None:
            conn = await asyncpg.connect(h.url)
            try:
                await conn.execute(
                    "INSERT INTO events SELECT 999999, min(created_at), 1, 'late' FROM events "
                    "WHERE created_at < '2024-01-01' AND tableoid = (SELECT tableoid FROM "
                    "events WHERE created_at < '2024-01-01' ORDER BY created_at LIMIT 1)"
                )
                outcome["inserted"] = True
            except asyncpg.PostgresError as exc:
                outcome["error"] = str(exc)
            finally:
                await conn.close()

        asyncio.run(run())

    writer = threading.Thread(target=late_insert)
    writer.start()
    writer.join(60)
    for job_id in jobs:
        h.wait_for(job_id, "completed", timeout=120)
    worker.terminate()
    assert worker.wait(30) == 0
    late = [k for k in rows(h.url) if k[0] == 999999]
    paths = [r["path"] for r in h.sql("SELECT path FROM archive_files")]
    archived_late = [
        r
        for r in rows_in_blobs(h.azurite.connection_string, h.container, paths)
        if r["id"] == 999999
    ]
    if "inserted" in outcome:  # it went in before the partition was taken: archived once
        assert len(archived_late) == 1 and not late
        key = (999999, archived_late[0]["created_at"])
        before[key] = normalize(archived_late[0])
    else:  # it waited for the partition's lock and failed once it was gone: nowhere
        assert outcome["error"] and not archived_late and not late
    check(h.url, h.azurite, h.container, before)


def test_a_policy_takes_old_partitions_whole(h: Harness) -> None:
    seed(h.url, per_month=5)
    config = h.tmp / "archiver.toml"
    config.write_text(  # every second, archiving what is older than 2024-01-01 or so
        '[[policy]]\nname = "events"\ntable = "events"\nolder_than = "1000 days"\n'
        'schedule = "* * * * * *"\npartitions = "detach"\n'
    )
    log = h.tmp / "scheduler.log"
    scheduler = start_process(archiver_cmd("--config", str(config), "scheduler"), h.env, log)
    try:
        wait_for_text(log, "more, one per old partition")
    finally:
        scheduler.send_signal(signal.SIGTERM)
        assert scheduler.wait(30) == 0, log.read_text()
    jobs = h.sql("SELECT payload::text, policy_name FROM background_jobs")
    payloads = [json.loads(r["payload"]) for r in jobs]
    whole = [p for p in payloads if p.get("partitions") == "detach"]
    assert whole and all(p["partition"].startswith("public.events_20") for p in whole)
    assert sum(1 for r in jobs if r["policy_name"] == "events") >= 1
