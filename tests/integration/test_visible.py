"""Every command that changes the archive returns when readers see the change: with no
worker running (a cron-style deployment, an operator at a terminal), restore's move back,
erase and purge publish their change to the Delta table themselves and delete what they
retired before they print their summary, as delta-rs, DuckDB's delta scan and `archiver
query` read it. `--no-wait` leaves it to the workers, as before; a publisher lock held
longer than ARCHIVER_PUBLISH_WAIT is said, with what finishes it."""

from __future__ import annotations

import asyncio
import re

import asyncpg
import pytest

from archiver.testing.reference import seed_orders
from tests.support.delta import catalogued, delta, duck, uri
from tests.support.harness import Harness

ROWS = 6_000
LO, HI = "2024-12-28T12:00:00+00:00", "2024-12-29T06:00:00+00:00"  # in files 4 to 6


@pytest.fixture
def d(h: Harness) -> Harness:
    """Delta Lake publishing on, as it is by default."""
    return h.with_env(ARCHIVER_DELTA="true")


def archived(h: Harness) -> None:
    """ROWS orders moved in files of 1,000 rows and published (the burst worker runs the
    publish job the move queued); then no worker runs."""
    seed_orders(h.url, ROWS)
    h.archive("--table", "orders", "--before", "2025-01-01", "--chunk-rows", "1000")
    assert seen_by_readers(h) == ROWS


def seen_by_readers(h: Harness) -> int:
    """The archived rows as delta-rs, DuckDB's delta scan and `archiver query` count
    them, which must agree with each other and with the catalog."""
    by_delta_rs = delta(h).to_pyarrow_table(columns=["id"]).num_rows
    by_duckdb = duck(h).sql(f"SELECT count(*) FROM delta_scan('{uri(h, 'public.orders')}')")
    by_query = h.cli("query", "SELECT count(*) AS n FROM orders", "--format", "csv")
    assert by_query.returncode == 0, by_query.stderr
    counts = {by_delta_rs, by_duckdb.fetchone()[0], int(by_query.stdout.split()[-1])}
    catalog = h.value(
        "SELECT coalesce(sum(row_count), 0) FROM archive_files WHERE state = 'committed'"
    )
    assert counts == {catalog}, (counts, catalog)
    return int(catalog)


def blobs_are_the_catalog(h: Harness) -> None:
    """No retired file left in storage: the data blobs are the committed files."""
    folder = "archive/public.orders/"
    data = {b.removeprefix(folder) for b in h.blobs() if "/_delta_log/" not in b}
    assert data == set(catalogued(h)), data


def no_queued_publication(h: Harness) -> None:
    assert not h.value("SELECT count(*) FROM background_jobs WHERE status = 'queued'")


def test_restore_erase_and_purge_are_seen_when_they_return(d: Harness) -> None:
    archived(d)
    done = d.cli("restore", "--table", "orders", "--from", LO, "--to", HI)
    assert done.returncode == 0, done.stderr
    back = d.value("SELECT count(*) FROM orders")
    assert back > 0
    assert "readers see it now" in done.stderr, done.stderr
    assert seen_by_readers(d) == ROWS - back  # no Delta reader sees a restored row
    blobs_are_the_catalog(d)
    no_queued_publication(d)

    # erase the smallest archived key: the end of a file's statistics in the Delta log
    smallest = d.value(
        "SELECT min(min_key[1]::bigint) FROM archive_files WHERE state = 'committed'"
    )
    # a file's statistics, a JSON string inside each add action: \"id\":5001,
    logged = re.compile(rf'\\?"id\\?":{smallest}[,}}]')
    assert any(logged.search(text) for text in delta_log(d)), "the key is in the log before"
    erased = d.cli("erase", "--table", "orders", "--where", f"id = {smallest}")
    assert erased.returncode == 0, erased.stderr
    assert "erased 1 row" in erased.stdout
    assert seen_by_readers(d) == ROWS - back - 1
    assert not any(logged.search(text) for text in delta_log(d)), "no log entry holds it after"
    blobs_are_the_catalog(d)
    no_queued_publication(d)

    purged = d.cli("purge", "--table", "orders", "--older-than", "1 year")
    assert purged.returncode == 0, purged.stderr
    assert seen_by_readers(d) == 0
    blobs_are_the_catalog(d)
    no_queued_publication(d)


def delta_log(h: Harness) -> list[str]:
    from azure.storage.blob import ContainerClient

    client = ContainerClient.from_connection_string(h.azurite.connection_string, h.container)
    return [
        client.download_blob(b.name).readall().decode(errors="replace")
        for b in client.list_blobs(name_starts_with="archive/public.orders/_delta_log/")
        if b.name.endswith(".json")
    ]


def test_no_wait_leaves_the_publication_to_the_workers(d: Harness) -> None:
    archived(d)
    done = d.cli("restore", "--table", "orders", "--from", LO, "--to", HI, "--no-wait")
    assert done.returncode == 0, done.stderr
    assert "--no-wait" in done.stderr
    back = d.value("SELECT count(*) FROM orders")
    # the Delta table still lists the restored rows' files until a worker publishes
    assert delta(d).to_pyarrow_table(columns=["id"]).num_rows == ROWS
    assert d.value("SELECT count(*) FROM background_jobs WHERE status = 'queued'") >= 1
    # archiver query is exact meanwhile: the Delta table lags its catalog, so the
    # table's archive is read from its committed files
    lagging = d.cli("query", "SELECT count(*) AS n FROM orders", "--format", "csv")
    assert lagging.returncode == 0, lagging.stderr
    assert int(lagging.stdout.split()[-1]) == ROWS - back
    d.drain()
    assert seen_by_readers(d) == ROWS - back
    blobs_are_the_catalog(d)


def test_a_publisher_holding_the_table_too_long_is_said(d: Harness) -> None:
    archived(d)
    here = d.value("SELECT storage_url FROM archive_files LIMIT 1")

    async def hold_then_restore() -> tuple[int, str]:
        conn = await asyncpg.connect(d.url)
        try:  # the publisher lock a worker takes while it publishes the table
            await conn.execute(
                "SELECT pg_advisory_lock(hashtextextended('archiver.delta ' || $1 || ' ' "
                "|| $2, 0))",
                here,
                "public.orders",
            )
            done = await asyncio.to_thread(
                d.with_env(ARCHIVER_PUBLISH_WAIT="1").cli,
                "restore", "--table", "orders", "--from", LO, "--to", HI,
            )  # fmt: skip
            return done.returncode, done.stderr
        finally:
            await conn.close()

    code, said = asyncio.run(hold_then_restore())
    assert code == 0, said
    assert "public.orders: not published yet" in said and "archiver publish" in said, said
    back = d.value("SELECT count(*) FROM orders")
    assert d.value("SELECT count(*) FROM background_jobs WHERE status = 'queued'") >= 1
    d.drain()  # the lock is free: a worker's publication finishes it
    assert seen_by_readers(d) == ROWS - back
    blobs_are_the_catalog(d)


def test_a_publication_failing_after_the_commit_says_the_change_stands(d: Harness) -> None:
    """Found by the soak: an erasure whose publication met Azurite restarting printed
    delta-rs's traceback, and before that a `database error` line, as if nothing had
    been erased. The change is committed; the command says so, exits 0, and the
    workers' publication finishes what it could not."""
    archived(d)
    smallest = d.value(
        "SELECT min(min_key[1]::bigint) FROM archive_files WHERE state = 'committed'"
    )
    failing = d.with_env(ARCHIVER_FAILPOINTS="before_delta_commit=raise")
    erased = failing.cli("erase", "--table", "orders", "--where", f"id = {smallest}")
    assert erased.returncode == 0, erased.stderr
    assert "erased 1 row" in erased.stdout and "Traceback" not in erased.stderr
    said = [line for line in erased.stderr.splitlines() if "committed" in line]
    assert said == [
        "public.orders: the change is committed, not published yet: publishing it failed "
        "(FailpointError: failpoint before_delta_commit); the workers' next publication "
        "finishes it, or `archiver publish --table public.orders`"
    ], erased.stderr
    assert d.value("SELECT count(*) FROM archive_ledger WHERE status = 'done'") == 1
    assert (
        d.value(
            "SELECT count(*) FROM background_jobs WHERE status = 'queued' AND task_name = 'publish'"
        )
        == 1
    )  # queued for the workers
    d.drain()
    assert seen_by_readers(d) == ROWS - 1  # readers see it once a worker published it
    blobs_are_the_catalog(d)
