"""Delta Lake: every move publishes its files into one Delta table per archived table,
exactly once, read by independent readers (delta-rs, DuckDB's delta extension) against
the catalog and the source rows; schema drift across runs; `archiver query`."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from archiver.testing.plans import files_read
from archiver.testing.reference import seed_orders
from tests.support import (
    archiver_cmd,
    assert_refused,
    fast_env,
    kill_at_failpoint,
    start_process,
    start_worker,
    wait_for_killed_leases,
    wait_for_text,
)
from tests.support.delta import catalogued, delta, duck, uri
from tests.support.harness import Harness

CUTOFF = "2024-12-28"  # of 8,000 seeded orders: 3,680 older


@pytest.fixture
def d(h: Harness) -> Harness:
    """The test's world with Delta Lake publishing on, as it is by default."""
    return h.with_env(ARCHIVER_DELTA="true")


def test_a_move_is_one_delta_table_exactly_once_through_crashes(d: Harness, tmp_path: Any) -> None:
    """Two workers move two key ranges; one worker is killed just before a publication's
    Delta commit and one just after it: the Delta table, read by delta-rs and by DuckDB,
    holds every moved row once, with the source's values and per-file statistics."""
    seed_orders(d.url, 8_000)
    d.sql("CREATE TABLE snapshot AS SELECT * FROM orders")
    old = d.old_ids(CUTOFF)
    fast = fast_env(d.env)
    d.enqueue("--table", "orders", "--before", CUTOFF, "--chunk-rows", "500", "--parallel", "2")
    kill_at_failpoint(fast, "before_delta_commit", tmp_path / "a.log")
    kill_at_failpoint(fast, "after_delta_commit", tmp_path / "b.log")
    wait_for_killed_leases(d.url)
    workers = [start_worker(fast, "--burst") for _ in range(2)]
    assert all(w.wait(120) == 0 for w in workers)
    assert d.value("SELECT count(*) FROM background_jobs WHERE status <> 'completed'") == 0
    d.exactly_once(old)

    table = delta(d)
    actions = table.get_add_actions(flatten=True)
    paths = actions.column("path").to_pylist()
    assert Counter(paths) == Counter(catalogued(d))  # each file once, none missing
    assert table.transaction_version("archiver") == d.value(
        "SELECT published FROM delta_tables WHERE source_table = 'public.orders'"
    )
    assert min(actions.column("num_records").to_pylist()) > 0
    assert None not in actions.column("min.id").to_pylist()
    assert None not in actions.column("max.created_at").to_pylist()
    protocol = table.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 2)
    rows = table.to_pyarrow_table()
    assert not [n for n in rows.schema.names if n.startswith("__") or "pg_text" in n]
    assert sorted(rows.column("id").to_pylist()) == sorted(old)

    con = duck(d)
    found = con.execute(
        "SELECT id, customer, total::text, details, array_to_string(tags, '|'), note "
        f"FROM delta_scan('{uri(d, 'public.orders')}') ORDER BY id"
    ).fetchall()
    expected = d.sql(
        "SELECT id, customer::text, total::text, details::text, array_to_string(tags, '|'), "
        "note FROM snapshot WHERE created_at < $1::text::timestamptz ORDER BY id",
        CUTOFF,
    )
    assert found == [tuple(r) for r in expected]
    verified = d.cli("verify", "--table", "orders")
    assert verified.returncode == 0, verified.stdout + verified.stderr

    # the log is derived: dropped and rebuilt from the catalog, the same files
    rebuilt = d.cli("publish", "--table", "orders", "--rebuild")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert f"{len(paths)} files" in rebuilt.stdout
    assert Counter(delta(d).get_add_actions(flatten=True).column("path").to_pylist()) == Counter(
        catalogued(d)
    )


def test_every_type_reads_from_the_delta_table_and_restores_exactly(d: Harness) -> None:
    from tests.support.alltypes import ALLTYPES_ROWS as ROWS
    from tests.support.alltypes import difference, seed_alltypes

    seed_alltypes(d.url)
    job = d.archive("--table", "alltypes", "--before", "2025-01-01", "--chunk-rows", "1000")
    table = delta(d, "public.alltypes")
    columns = [f.name for f in table.schema().fields]
    assert columns == [
        r[0]
        for r in d.sql(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'snapshot'::regclass "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
        )
    ]  # the table's own columns, no companion
    types = {f.name: str(f.type) for f in table.schema().fields}
    assert 'PrimitiveType("string")' in types["c_uuid"] and "string" in types["c_json"]
    assert "timestamp_ntz" in types["c_ts"] and "string" in types["c_time"]
    assert table.protocol().min_reader_version == 3  # timestamp without time zone
    con = duck(d)
    found = dict(
        con.execute(
            "SELECT id, c_uuid || '|' || coalesce(c_jsonb, '') || '|' || coalesce(c_time, '') "
            f"FROM delta_scan('{uri(d, 'public.alltypes')}') WHERE c_uuid IS NOT NULL"
        ).fetchall()
    )
    expected = dict(
        (r[0], r[1])
        for r in d.sql(
            "SELECT id, c_uuid::text || '|' || coalesce(c_jsonb::text, '') || '|' "
            "|| coalesce(c_time::text, '') FROM snapshot WHERE c_uuid IS NOT NULL"
        )
    )
    assert found == expected and len(found) > ROWS // 2
    restored = d.cli("restore", "--job", job)
    assert restored.returncode == 0, restored.stderr
    assert d.value(difference("alltypes", "snapshot")) == 0


EVENTS = """
CREATE TABLE events (id bigint PRIMARY KEY, at timestamptz NOT NULL, a integer, b text);
CREATE INDEX ON events (at);
INSERT INTO events SELECT g, timestamptz '2020-01-01' + g * interval '1 hour', g, 'b' || g
FROM generate_series(1, 400) g;
"""


def test_a_publisher_that_lost_its_lock_commits_nothing(d: Harness, tmp_path: Any) -> None:
    """Publisher A numbers a publication (a restore's: a file out, its rewrite in) and
    stops just before its Delta commit; its session dies, its lock with it. B publishes
    the same publication, then a second restore takes the rewrite out again (its removal
    published, its blob deleted). When A wakes, its commit must not land: the Delta
    table would list the rewrite again, a file that is gone."""
    seed_orders(d.url, 8_000)
    d.archive("--table", "orders", "--before", CUTOFF)
    day = ("2024-12-27 00:00", "2024-12-27 06:00")
    out = d.cli("restore", "--table", "orders", "--from", *day[:1], "--to", day[1], "--no-wait")
    assert out.returncode == 0, out.stderr
    log = tmp_path / "a.log"
    a = start_process(
        archiver_cmd("publish", "--table", "orders"),
        {**d.env, "ARCHIVER_FAILPOINTS": "before_delta_commit=sleep:8"},
        log,
    )
    wait_for_text(log, "failpoint before_delta_commit reached")
    ended = d.value(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_locks "
        "WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid() "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    assert ended == 1  # A's session, and its publisher lock
    b = d.cli("publish", "--table", "orders")
    assert b.returncode == 0, b.stderr
    rest = d.cli("restore", "--table", "orders", "--from", "2000-01-01", "--to", CUTOFF)
    assert rest.returncode == 0, rest.stderr
    assert a.wait(60) != 0  # its session is gone: it cannot record a publication
    table = delta(d)
    assert table.get_add_actions(flatten=True).column("path").to_pylist() == []
    assert table.to_pyarrow_table().num_rows == 0
    assert d.value("SELECT count(*) FROM archive_files") == 0
    assert "was committed meanwhile" in log.read_text(), log.read_text()


def test_schema_drift_is_published_and_a_change_delta_cannot_hold_is_refused(
    d: Harness,
) -> None:
    d.sql(EVENTS)
    run = ["--table", "events", "--column", "at", "--before"]
    d.archive(*run, "2020-01-05")  # ids 1-95
    d.sql("ALTER TABLE events ADD COLUMN c text; UPDATE events SET c = 'c' || id")
    d.archive(*run, "2020-01-09")  # 96-191
    d.sql("ALTER TABLE events DROP COLUMN b; ALTER TABLE events ALTER a TYPE bigint")
    d.archive(*run, "2020-01-13")  # 192-287
    rows = {r["id"]: r for r in delta(d, "public.events").to_pyarrow_table().to_pylist()}
    assert sorted(rows) == list(range(1, 288))
    assert rows[1] == {"id": 1, "at": rows[1]["at"], "a": 1, "b": "b1", "c": None}
    assert rows[100]["c"] == "c100" and rows[100]["b"] == "b100"
    assert rows[200]["b"] is None and rows[200]["c"] == "c200" and rows[200]["a"] == 200
    types = {f.name: str(f.type) for f in delta(d, "public.events").schema().fields}
    assert '"long"' in types["a"]  # integer widened to bigint
    con = duck(d)
    assert con.execute(
        f"SELECT count(*), count(b), count(c), sum(a) FROM delta_scan('{uri(d, 'public.events')}')"
    ).fetchall() == [(287, 191, 192, 287 * 288 // 2)]

    # archiver query: a key lookup and a range count, reading only the files that match
    looked = d.cli("query", "SELECT id, a, c FROM events WHERE id = 150", "--format", "json")
    assert looked.returncode == 0, looked.stderr
    assert looked.stdout.strip() == '{"id": 150, "a": 150, "c": "c150"}'
    # (`at` is a keyword in DuckDB's SQL: quoted)
    counted = d.cli("query", "SELECT count(*) FROM public.events WHERE \"at\" < '2020-01-03'")
    assert "47" in counted.stdout, counted.stdout
    explained = d.cli("query", "--explain", "SELECT * FROM events WHERE id = 150")
    assert files_read(explained.stdout) == 1, explained.stdout  # 1 file of 3
    bad = d.cli("query", "SELECT nope FROM events")
    assert_refused(bad, "nope", code=1)

    # a type Delta cannot read as the old one: the file stays archived, left out, said so
    d.sql("ALTER TABLE events ALTER a TYPE text USING 'x' || a")
    job = d.archive(*run, "2020-01-15")
    refused = d.value("SELECT delta_refused FROM archive_files WHERE job_id = $1::uuid", job)
    assert refused == (
        "table public.events, column 'a': the Delta table holds long, a file holds string, "
        "which Delta readers cannot read as one type"
    )
    again = d.cli("publish", "--table", "events", "--rebuild")
    assert again.returncode == 1
    assert "left out: table public.events, column 'a'" in again.stdout
    assert (
        again.stderr.splitlines()[-1] == "archiver: error: publish: 1 file left out (listed above)"
    )
    assert len(delta(d, "public.events").to_pyarrow_table()) == 287
    # a query never answers silently over less than the archive: the table's Delta
    # table lacks a file, so its archive is read from its files, types unified (text)
    every_file = d.cli(
        "query", "--format", "csv",
        "SELECT count(*) AS n, count(a) AS a, max(a) FILTER (WHERE id = 300) AS x FROM events",
    )  # fmt: skip
    assert every_file.returncode == 0, every_file.stderr
    assert every_file.stdout.split()[-1] == f'{287 + 48},{287 + 48},"x300"', every_file.stdout
    every = d.cli(
        "query", "--with-live", "--format", "csv",
        "SELECT count(*) AS n FROM events WHERE _archiver_source = 'archive'",
    )  # fmt: skip
    assert every.returncode == 0, every.stderr
    assert every.stdout.split()[-1] == str(287 + 48)
    restored = d.cli("restore", "--job", job, "--into", "events_back")
    assert restored.returncode == 0, restored.stderr
    assert d.value("SELECT count(*) FROM events_back") == 48


def test_copies_and_no_delta_moves_stay_plain_files(d: Harness) -> None:
    d.sql(EVENTS)
    run = ["--table", "events", "--column", "at", "--before"]
    d.archive(*run, "2020-01-05", "--mode", "copy")
    d.archive(*run, "2020-01-05", "--no-delta")
    assert d.value("SELECT count(*) FROM archive_files WHERE delta") == 0
    assert d.value("SELECT count(*) FROM delta_tables") == 0
    assert d.blobs(delta_log=True) == []
    d.archive(*run, "2020-01-09")
    assert len(delta(d, "public.events").to_pyarrow_table()) == 96
    # a publish job's progress does not count its rows again (archiver status's rows)
    summary = "SELECT sum(rows_archived) FROM archiver_job_summary WHERE source_table = $1"
    assert d.value(summary, "public.events") == 95 + 95 + 96
