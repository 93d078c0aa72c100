"""Bad input: one clear line on stderr naming the problem, a non-zero exit, nothing changed."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pyarrow
import pytest

from archiver.testing.reference import seed_orders
from archiver.testing.services import free_port
from tests.support import assert_refused, run_cli, sql, sql_value
from tests.support.harness import Harness

NOT_A_DRIVER = str(next(Path(pyarrow.get_library_dirs()[0]).glob("libarrow.so.*")))


@pytest.fixture
def orders(database_url: str) -> str:
    seed_orders(database_url, 2_000)
    sql(database_url, "CREATE TABLE no_key (created_at timestamptz)")
    sql(database_url, "CREATE TABLE x (id int PRIMARY KEY, created_at timestamptz)")
    return database_url


def assert_unchanged(url: str) -> None:
    assert sql_value(url, "SELECT count(*) FROM background_jobs") == 0
    assert sql_value(url, "SELECT count(*) FROM orders") == 2_000
    assert sql_value(url, "SELECT count(*) FROM x") == 0  # the injection target is intact


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--table", "nosuch"], ["table nosuch not found"]),
        (["--table", "order"], ["table order not found; there is public.orders"]),
        (["--table", "ordres"], ["table ordres not found; there is public.orders"]),
        (
            ["--table", "orders", "--before", "2052-01-01"],
            ["2052-01-01", "in the future", "--allow-future"],
        ),
        (["--table", "orders", "--before", "2099-01-01", "--dry-run"], ["in the future"]),
        (["--table", "other.orders"], ["table other.orders not found"]),
        (
            ["--table", "orders", "--column", "nosuch"],
            ["column nosuch not found", "public.orders"],
        ),
        (["--table", "orders", "--column", "note"], ["'note'", "text", "not a date, timestamp"]),
        (["--table", "no_key"], ["no primary key"]),
        (["--table", "orders", "--before", "2024-13-45"], ["--before", "'2024-13-45'"]),
        (["--table", "orders", "--before", "yesterday"], ["--before", "'yesterday'"]),
        (["--table", "orders; drop table x"], ["invalid table name", "unexpected ';'"]),
        (["--table", 'orders"; DROP TABLE x; --'], ["invalid table name", "unexpected '\"'"]),
        (["--table", "public."], ["invalid table name"]),
    ],
)
def test_enqueue_refuses(h: Harness, orders: str, args: list[str], needles: list[str]) -> None:
    full = (
        ["enqueue", *args] if "--before" in args else ["enqueue", *args, "--before", "2024-10-01"]
    )
    assert_refused(h.cli(*full), *needles)
    assert_unchanged(orders)


def test_a_cutoff_taking_all_or_most_of_a_table_is_said_in_words(h: Harness, orders: str) -> None:
    """A future cutoff, confirmed, plans the whole table and says so; a past one that
    takes most of it says so too, in the dry run and in enqueue's own output."""
    import json

    every = h.cli(
        "enqueue", "--table", "orders", "--before", "2099-01-01", "--allow-future", "--dry-run"
    )
    assert every.returncode == 0, every.stderr
    assert "warning        every row of public.orders is older than the cutoff" in every.stdout
    assert_unchanged(orders)
    h.sql("ANALYZE orders")  # all 2,000 rows lie in the 34 hours before 2025-01-01
    most = h.cli("enqueue", "--table", "orders", "--before", "2024-12-31T18:00:00Z", "--json")
    assert most.returncode == 0, most.stderr
    said = json.loads(most.stdout)
    assert [w for w in said["warnings"] if "takes most of public.orders" in w], said
    assert (
        "archiver: warning: the cutoff (2024-12-31T18:00:00+00:00) takes most of public.orders"
        in most.stderr
    )
    assert said["group"] is None and [j["created"] for j in said["jobs"]] == [True]
    assert h.value("SELECT id::text FROM background_jobs") == said["jobs"][0]["job_id"]
    few = h.cli("enqueue", "--table", "orders", "--before", "2024-12-30T16:00:00Z")
    assert few.returncode == 0 and "warning" not in few.stderr, few.stderr


def test_the_cutoff_probe_reads_one_index_entry_whatever_the_table(orders: str) -> None:
    """enqueue's check that a row is at or after the cutoff takes one step down the
    cutoff's index: EXISTS of such a row, the cutoff hidden from the planner, was a scan
    of the table, read whole when every row is older (159 ms at 1M rows)."""
    import asyncio
    import json
    from collections.abc import Iterator
    from typing import Any

    import asyncpg

    from archiver.bulk import open_bulk
    from archiver.model import Mode
    from archiver.source.chunks import describe_archive

    conn = open_bulk(orders)
    try:
        probe = describe_archive(conn, "orders", "created_at", Mode.COPY).newer_rows()
    finally:
        conn.close()

    async def explain() -> Any:
        session = await asyncpg.connect(orders)
        try:
            await session.execute("ANALYZE orders; SET archiver.cutoff = '2099-01-01'")
            return json.loads(await session.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {probe}"))
        finally:
            await session.close()

    def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield node
        for child in node.get("Plans", ()):
            yield from nodes(child)

    read = [(n["Node Type"], n["Actual Rows"], n.get("Rows Removed by Filter", 0))
            for n in nodes(asyncio.run(explain())[0]["Plan"])]  # fmt: skip
    assert all(rows <= 1 and not removed for _, rows, removed in read), read
    assert any("Index" in node for node, _, _ in read), read


def test_an_inverted_or_empty_restore_range_changes_nothing(h: Harness, orders: str) -> None:
    for low, high in (("2024-05-01", "2024-04-01"), ("2024-05-01", "2024-05-01")):
        refused = h.cli("restore", "--table", "orders", "--from", low, "--to", high)
        assert_refused(refused, f"--from {low}T00:00:00+00:00 is not before --to", "nothing done")
    assert h.value("SELECT count(*) FROM archive_ledger") == 0
    assert_unchanged(orders)


def test_query_reads_the_archive_and_local_files_only_when_allowed(
    h: Harness, tmp_path: Path
) -> None:
    """archiver query refuses a statement reading this machine's files, as serve does,
    unless the operator's --allow-local-files lets it."""
    mine = tmp_path / "export.csv"
    mine.write_text("a,b\n1,secret\n")
    statement = f"SELECT b FROM read_csv('{mine}')"
    assert_refused(h.cli("query", statement), "query:", str(mine))
    assert_refused(h.cli("query", "SELECT * FROM read_text('/etc/hostname')"), "query:")
    allowed = h.cli("query", "--allow-local-files", "--format", "csv", statement)
    assert allowed.returncode == 0 and "secret" in allowed.stdout, allowed.stderr
    # DuckDB loads extensions unsigned (archiver.query.engine.connect): no statement may
    # load one, not even the operator's own
    spec = importlib.util.find_spec("duckdb_extension_httpfs")
    assert spec is not None and spec.submodule_search_locations
    extension = next(Path(spec.submodule_search_locations[0]).rglob("*.duckdb_extension"))
    loading = h.cli("query", "--allow-local-files", f"LOAD '{extension}'")
    assert_refused(loading, "query: LOAD refused", "nothing ran")


def test_local_storage_whose_parent_is_missing(h: Harness, orders: str, tmp_path: Path) -> None:
    typo = f"file://{tmp_path}/no-such-dir/archive"
    result = run_cli(
        {**h.env, "ARCHIVER_STORAGE_URL": typo},
        "enqueue",
        "--table",
        "orders",
        "--before",
        "2024-10-01",
    )
    assert_refused(result, f"cannot write to {typo}", f"no directory {tmp_path}/no-such-dir")
    assert not (tmp_path / "no-such-dir").exists()
    assert_unchanged(orders)


def test_unreachable_database(h: Harness, orders: str) -> None:
    port = free_port()
    bad = {**h.env, "ARCHIVER_DATABASE_URL": f"postgresql://app:s3cret@127.0.0.1:{port}/db"}
    for args in (
        ["migrate"],
        ["status"],
        ["enqueue", "--table", "orders", "--before", "2024-10-01"],
    ):
        result = run_cli(bad, *args)
        assert_refused(result, "cannot connect to PostgreSQL", f"127.0.0.1:{port}")
        assert "s3cret" not in result.stderr
    assert_unchanged(orders)


def test_unreachable_storage(h: Harness, orders: str) -> None:
    port = free_port()
    conn = h.env["AZURE_STORAGE_CONNECTION_STRING"].rsplit("BlobEndpoint=", 1)[0]
    bad = {
        **h.env,
        "AZURE_STORAGE_CONNECTION_STRING": f"{conn}BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;",
    }
    result = run_cli(bad, "enqueue", "--table", "orders", "--before", "2024-10-01")
    assert_refused(result, "cannot reach az://")
    assert "AccountKey=Eby8" not in result.stderr
    assert_unchanged(orders)
    # a retry queues work too: refused as well, the job left as it was
    job_id = h.cli("enqueue", "--table", "orders", "--before", "2024-10-01").stdout.strip()
    assert h.cli("cancel", job_id).returncode == 0
    assert_refused(run_cli(bad, "retry", job_id), "cannot reach az://")
    assert h.value("SELECT status::text FROM background_jobs") == "cancelled"


@pytest.mark.parametrize(
    ("var", "value", "needle"),
    [
        ("ARCHIVER_STORAGE_URL", "", "ARCHIVER_STORAGE_URL is not set"),
        ("ARCHIVER_STORAGE_URL", "s3://bucket/x", "ARCHIVER_STORAGE_URL: expected az://"),
        ("ARCHIVER_STORAGE_URL", "az://Bad_Name/x", "not a valid Azure container name"),
        (
            "AZURE_STORAGE_CONNECTION_STRING",
            "",
            "AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT_URL",
        ),
        (
            "ARCHIVER_DATABASE_URL",
            "mysql://x",
            "ARCHIVER_DATABASE_URL: expected a postgresql:// URL",
        ),
        ("ARCHIVER_POLL_INTERVAL", "soon", "ARCHIVER_POLL_INTERVAL: expected a float"),
        (
            "ARCHIVER_ADBC_DRIVER",
            "/nonexistent/libadbc_driver_postgresql.so",
            "ARCHIVER_ADBC_DRIVER: expected the absolute path of a file",
        ),
        ("ARCHIVER_ADBC_DRIVER", __file__, "ARCHIVER_ADBC_DRIVER: cannot load"),
        ("ARCHIVER_ADBC_DRIVER", NOT_A_DRIVER, "is not an ADBC driver (no AdbcDriverInit)"),
    ],
)
def test_bad_settings(h: Harness, orders: str, var: str, value: str, needle: str) -> None:
    result = run_cli(
        {**h.env, var: value}, "enqueue", "--table", "orders", "--before", "2024-10-01"
    )
    assert_refused(result, needle)
    assert_unchanged(orders)


def test_missing_database_setting(h: Harness) -> None:
    bad = {k: v for k, v in h.env.items() if k != "ARCHIVER_DATABASE_URL"}
    assert_refused(run_cli(bad, "status"), "ARCHIVER_DATABASE_URL (or DATABASE_URL) is not set")


def test_database_url_fallback(h: Harness) -> None:
    fallback = {k: v for k, v in h.env.items() if k != "ARCHIVER_DATABASE_URL"}
    fallback["DATABASE_URL"] = h.url
    assert run_cli(fallback, "status").returncode == 0


def test_not_migrated(h: Harness) -> None:
    h.sql("DROP TABLE background_jobs CASCADE")
    assert_refused(h.cli("status"), "archiver migrate")


def test_migrate_twice_at_once(h: Harness) -> None:
    from tests.support import archiver_cmd

    # an empty database, whatever the migrations create (a list of their objects here
    # went stale with each new one)
    h.sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    procs = [
        subprocess.Popen(archiver_cmd("migrate"), env=h.env, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum("applied" in o for o in outputs) == 1
    assert h.cli("migrate").stdout.strip() == "schema is up to date"


def test_local_storage_check_is_safe_for_workers_starting_together(tmp_path: Path) -> None:
    """Workers started at once (supervisor numprocs) all probe the same directory."""
    from concurrent.futures import ThreadPoolExecutor

    from archiver.config import StorageLocation
    from archiver.storage.local import LocalStorage

    storage = LocalStorage(StorageLocation.parse(f"file://{tmp_path}/archive"))

    def probe(_: int) -> None:
        for _ in range(200):
            storage.check()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(probe, range(8)))
    assert list((tmp_path / "archive").iterdir()) == []
