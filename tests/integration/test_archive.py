"""The core promise, end to end: real PostgreSQL, real Azurite, real worker processes."""

from __future__ import annotations

import itertools

import pyarrow.parquet as pq
import pytest

from archiver.testing.reference import seed_orders
from archiver.testing.services import Azurite
from tests.support import (
    archiver_cmd,
    column_layout,
    run_cli,
    sql,
    sql_value,
    start_worker,
    wait_for_text,
)
from tests.support.archive import (
    blob_names,
    catalog_paths,
    normalize,
    rows_in_blobs,
    rows_in_db,
)
from tests.support.exactly_once import assert_archived_once
from tests.support.harness import Harness

CUTOFF = "2024-10-01"


@pytest.mark.slow
def test_move_200k_rows_with_two_workers(h: Harness) -> None:
    seed_orders(h.url, 200_000)
    old = f"SELECT * FROM orders WHERE created_at < '{CUTOFF}'::timestamptz"
    expected = rows_in_db(h.url, old)
    h.sql(f"CREATE TABLE kept AS SELECT * FROM orders WHERE created_at >= '{CUTOFF}'")
    assert 50_000 < len(expected) < 150_000

    result = h.cli("enqueue", "--table", "orders", "--before", CUTOFF, "--chunk-rows", "25000")
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip()

    log = h.tmp / "workers.log"
    workers = [start_worker(h.env, "--burst", "--concurrency", "2", log=log) for _ in range(2)]
    for w in workers:
        assert w.wait(timeout=240) == 0, log.read_text()

    # Nothing older than the cutoff is left; nothing newer was touched.
    assert (
        h.value(
            "SELECT count(*) FROM orders WHERE created_at < $1::text::timestamptz",
            CUTOFF,
        )
        == 0
    )
    assert (
        h.value(
            "SELECT count(*) FROM (SELECT * FROM orders EXCEPT ALL SELECT * FROM kept) d",
        )
        == 0
    )
    assert (
        h.value(
            "SELECT count(*) FROM (SELECT * FROM kept EXCEPT ALL SELECT * FROM orders) d",
        )
        == 0
    )

    # The files hold exactly the removed rows, once each, with equal values.
    names = blob_names(h.azurite.connection_string, h.container)
    assert names == sorted(catalog_paths(h.url))
    assert all(n.startswith("archive/public.orders/job-") and n.endswith(".parquet") for n in names)
    assert_archived_once(rows_in_blobs(h.azurite.connection_string, h.container, names), expected)

    # The catalog adds up; the job is completed with its progress.
    assert h.value("SELECT sum(row_count) FROM archive_files") == len(expected)
    job = h.sql(
        "SELECT status, progress, attempts FROM background_jobs WHERE id = $1::uuid",
        job_id,
    )[0]
    assert job["status"] == "completed"
    assert job["attempts"] == 1
    assert h.value("SELECT count(*) FROM archive_files WHERE state <> 'committed'") == 0


def test_files_carry_types_and_metadata(h: Harness) -> None:
    seed_orders(h.url, 3_000)
    assert h.cli("enqueue", "--table", "public.orders", "--before", "2024-12-31").returncode == 0
    h.drain()
    from azure.storage.blob import BlobServiceClient

    client = BlobServiceClient.from_connection_string(
        h.azurite.connection_string
    ).get_container_client(h.container)
    name = blob_names(h.azurite.connection_string, h.container)[0]
    local = h.tmp / "f.parquet"
    local.write_bytes(client.get_blob_client(name).download_blob().readall())
    meta = pq.read_metadata(local)
    kv = {k.decode(): v.decode() for k, v in meta.metadata.items()}
    assert kv["archiver.source_table"] == "public.orders"
    assert kv["archiver.row_count"] == str(meta.num_rows)
    assert (
        '"numeric(12,2)"' in kv["archiver.columns"] and '"order_status"' in kv["archiver.columns"]
    )
    schema = str(pq.ParquetFile(local).schema)
    for logical in (
        "customer (String)",  # uuid as its text, jsonb as its text: Delta's string
        "details (String)",
        "(Decimal(precision=12, scale=2))",
        "(Timestamp(isAdjustedToUTC=true",
    ):
        assert logical in schema, schema
    assert "(UUID)" not in schema and "(JSON)" not in schema
    # read as unscaled int64, written as DECIMAL: its field says numeric, not int8 (a trial)
    total = pq.read_schema(local).field("total")
    assert total.metadata == {b"POSTGRESQL:type": b"numeric", b"POSTGRESQL:typmod": b"786438"}
    # Dictionary encoding on the enum only (pgtypes.dictionary_encoded).
    group = meta.row_group(0)
    encodings = {group.column(i).path_in_schema: group.column(i).encodings for i in range(8)}
    assert "RLE_DICTIONARY" in encodings["status"]
    assert not any("RLE_DICTIONARY" in e for c, e in encodings.items() if c != "status")
    # keys, times and decimals of up to 18 digits DELTA_BINARY_PACKED (the decimal as INT64)
    layout = column_layout(local.read_bytes())
    for column in ("id", "created_at", "updated_at", "total"):
        physical, encodings_used = layout[column]
        assert physical == "INT64" and "DELTA_BINARY_PACKED" in encodings_used, layout[column]
    assert "DELTA_BINARY_PACKED" not in layout["customer"][1]  # text
    blob = client.get_blob_client(name).get_blob_properties()
    assert blob.content_settings.content_md5 is not None
    row = h.sql("SELECT byte_size, md5 FROM archive_files")[0]
    assert row["byte_size"] == blob.size


def test_copy_mode_keeps_rows(h: Harness) -> None:
    seed_orders(h.url, 20_000)
    cutoff = "2024-12-25"
    expected = rows_in_db(h.url, f"SELECT * FROM orders WHERE created_at < '{cutoff}'")
    before = h.value("SELECT count(*) FROM orders")
    assert (
        h.cli(
            "enqueue",
            "--table",
            "orders",
            "--before",
            cutoff,
            "--mode",
            "copy",
            "--chunk-rows",
            "3000",
        ).returncode
        == 0
    )
    h.drain()
    assert h.value("SELECT count(*) FROM orders") == before
    names = blob_names(h.azurite.connection_string, h.container)
    assert len(names) == -(-len(expected) // 3000)
    assert_archived_once(rows_in_blobs(h.azurite.connection_string, h.container, names), expected)


def test_copy_reads_two_chunks_at_once_from_one_snapshot(h: Harness) -> None:
    """A copy job's two connections read the same snapshot: rows changed, deleted or added
    while it runs are archived as they were when it started, each once, in files whose
    key ranges follow each other."""
    seed_orders(h.url, 20_000)
    cutoff = "2024-12-25"
    expected = rows_in_db(h.url, f"SELECT * FROM orders WHERE created_at < '{cutoff}'")
    enqueue = ("enqueue", "--table", "orders", "--before", cutoff, "--mode", "copy")
    assert h.cli(*enqueue, "--chunk-rows", "2000").returncode == 0
    log = h.tmp / "worker.log"
    worker = start_worker(
        {**h.env, "ARCHIVER_FAILPOINTS": "after_commit=sleep:2", "ARCHIVER_COPY_CONNECTIONS": "2"},
        "--burst",
        log=log,
    )
    wait_for_text(log, "failpoint after_commit reached")  # the first two chunks are in
    holders = h.sql(
        "SELECT backend_xmin FROM pg_stat_activity WHERE application_name = 'archiver' "
        "AND datname = current_database() AND state = 'idle in transaction'",
    )
    assert len(holders) == 2 and holders[0][0] == holders[1][0], holders
    assert h.value("SELECT count(*) FROM archive_files") == 2
    last = max(expected)
    h.sql(
        f"DELETE FROM orders WHERE id > {last - 100}; "
        f"UPDATE orders SET note = 'changed' WHERE id BETWEEN {last - 1000} AND {last - 900}; "
        "INSERT INTO orders SELECT id + 100000, customer, status, total, currency, created_at, "
        f"updated_at, details, tags, note FROM orders WHERE id BETWEEN {last - 500} AND {last - 400}",
    )
    assert worker.wait(timeout=120) == 0, log.read_text()
    names = blob_names(h.azurite.connection_string, h.container)
    # two chunks of 2,000 rows twice, then the last 1,920 rows shared evenly
    assert len(expected) == 9920 and len(names) == 6
    assert_archived_once(rows_in_blobs(h.azurite.connection_string, h.container, names), expected)
    ranges = h.sql(
        "SELECT min_key[1]::bigint, max_key[1]::bigint FROM archive_files ORDER BY part",
    )
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges)), ranges


def test_enqueue_twice_gives_the_same_job(h: Harness) -> None:
    seed_orders(h.url, 100)
    first = h.cli("enqueue", "--table", "orders", "--before", CUTOFF)
    second = h.cli("enqueue", "--table", "orders", "--before", CUTOFF)
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout
    assert "already queued" in second.stderr
    assert h.value("SELECT count(*) FROM background_jobs") == 1


def test_locked_rows_are_skipped_not_waited_for(h: Harness) -> None:
    import asyncio

    import asyncpg

    seed_orders(h.url, 5_000)
    cutoff = "2024-12-30"
    total_old = h.value(f"SELECT count(*) FROM orders WHERE created_at < '{cutoff}'")

    async def scenario() -> int:
        app = await asyncpg.connect(h.url)
        tx = app.transaction()
        await tx.start()
        locked = await app.fetchval(
            f"SELECT id FROM orders WHERE created_at < '{cutoff}' ORDER BY id LIMIT 1 FOR UPDATE"
        )
        assert h.cli("enqueue", "--table", "orders", "--before", cutoff).returncode == 0
        proc = await asyncio.create_subprocess_exec(*archiver_cmd("worker", "--burst"), env=h.env)
        code = await asyncio.wait_for(proc.wait(), 120)
        assert code == 0
        await tx.rollback()
        await app.close()
        return int(locked)

    locked_id = asyncio.run(scenario())
    left = [r["id"] for r in h.sql(f"SELECT id FROM orders WHERE created_at < '{cutoff}'")]
    assert left == [locked_id]
    assert h.value("SELECT sum(row_count) FROM archive_files") == total_old - 1


def test_move_partitioned_table(h: Harness) -> None:
    """Partitions repeat ctids, so a partitioned table is moved by key: rows with equal
    ctids in different partitions must not be taken for one another."""
    h.sql(
        """CREATE TABLE events (id bigint, at timestamptz NOT NULL, body text,
                                PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
           CREATE TABLE events_2023 PARTITION OF events FOR VALUES FROM ('2023-01-01') TO ('2024-01-01');
           CREATE TABLE events_2024 PARTITION OF events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
           INSERT INTO events SELECT g, timestamptz '2023-01-01' + make_interval(hours => g::int), 'e' || g
           FROM generate_series(1, 12000) g;""",
    )
    expected = rows_in_db(h.url, "SELECT * FROM events WHERE at < '2023-12-01'")
    kept = h.value("SELECT count(*) FROM events WHERE at >= '2023-12-01'")
    result = h.cli(
        "enqueue",
        "--table",
        "events",
        "--column",
        "at",
        "--before",
        "2023-12-01",
        "--chunk-rows",
        "1500",
    )
    assert result.returncode == 0, result.stderr
    h.drain()
    assert h.value("SELECT count(*) FROM events WHERE at < '2023-12-01'") == 0
    assert h.value("SELECT count(*) FROM events") == kept
    names = blob_names(h.azurite.connection_string, h.container)
    assert_archived_once(rows_in_blobs(h.azurite.connection_string, h.container, names), expected)


def test_move_table_with_uuid_key(h: Harness) -> None:
    """uuid keys resume in byte order, which is PostgreSQL's uuid order."""
    h.sql(
        """CREATE TABLE sessions (id uuid PRIMARY KEY, started timestamptz NOT NULL, who text);
           INSERT INTO sessions SELECT md5(g::text)::uuid, timestamptz '2024-01-01' + make_interval(mins => g::int), 'u' || g
           FROM generate_series(1, 9000) g;""",
    )
    expected = {  # the files hold a uuid as its text (Delta's string)
        str(r["id"]): normalize(dict(r))
        for r in h.sql("SELECT * FROM sessions WHERE started < '2024-01-05'")
    }
    result = h.cli(
        "enqueue",
        "--table",
        "sessions",
        "--column",
        "started",
        "--before",
        "2024-01-05",
        "--chunk-rows",
        "700",
    )
    assert result.returncode == 0, result.stderr
    h.drain()
    assert h.value("SELECT count(*) FROM sessions WHERE started < '2024-01-05'") == 0
    names = blob_names(h.azurite.connection_string, h.container)
    assert len(names) == -(-len(expected) // 700)
    archived = rows_in_blobs(h.azurite.connection_string, h.container, names)
    assert sorted(str(r["id"]) for r in archived) == sorted(expected)
    assert all(r == expected[str(r["id"])] for r in archived)
    ranges = h.sql(
        "SELECT min_key[1]::uuid AS lo, max_key[1]::uuid AS hi FROM archive_files ORDER BY part",
    )
    assert all(a["hi"] < b["lo"] for a, b in itertools.pairwise(ranges))  # parts in key order


def test_infinite_key_is_refused_not_corrupted(
    env: dict[str, str], database_url: str, azurite: Azurite, container: str
) -> None:
    """A date key of 'infinity' has no exact Arrow value: the job fails naming the column
    and every row stays in the table (found by review: it used to commit a garbage date)."""
    sql(
        database_url,
        """CREATE TABLE k2 (t int, d date, created_at timestamptz NOT NULL, PRIMARY KEY (t, d));
           INSERT INTO k2 VALUES (0, '2020-01-01', '2020-01-01'), (1, '2020-01-01', '2020-01-01'),
                                 (1, 'infinity', '2020-01-01'), (2, '2020-01-03', '2020-01-01');""",
    )
    job = run_cli(
        env, "enqueue", "--table", "k2", "--before", "2021-01-01", "--max-attempts", "1"
    ).stdout.strip()
    assert start_worker(env, "--burst").wait(timeout=60) == 0
    row = sql(
        database_url, "SELECT status, last_error FROM background_jobs WHERE id = $1::uuid", job
    )[0]
    assert row["status"] == "failed"
    assert "primary key column 'd'" in row["last_error"] and "infinity" in row["last_error"]
    assert sql_value(database_url, "SELECT count(*) FROM k2") == 4
    assert sql_value(database_url, "SELECT count(*) FROM archive_files") == 0


def test_minus_infinity_cutoff_value_is_catalogued_unbounded(h: Harness) -> None:
    """'-infinity' is older than any cutoff, so it is archived; the file's catalogued
    range then starts at -infinity, so a restore by range finds it."""
    h.sql(
        """CREATE TABLE ev (id bigint PRIMARY KEY, created_at timestamptz NOT NULL);
           INSERT INTO ev VALUES (1, '-infinity'), (2, '2020-01-01'), (3, '2030-01-01');""",
    )
    assert h.cli("enqueue", "--table", "ev", "--before", "2021-01-01").returncode == 0
    h.drain()
    assert [r["id"] for r in h.sql("SELECT id FROM ev")] == [3]
    file = h.sql(
        "SELECT row_count, min_cutoff_value::text AS lo, max_cutoff_value FROM archive_files",
    )[0]
    assert file["row_count"] == 2 and file["lo"] == "-infinity"
    restored = h.cli("restore", "--table", "ev", "--to", "1900-01-01")
    assert restored.returncode == 0, restored.stderr
    assert h.value("SELECT created_at::text FROM ev WHERE id = 1") == "-infinity"
