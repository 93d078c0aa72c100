"""The archive as an Iceberg table beside each Delta table (ARCHIVER_ICEBERG): found in
the queue database by pyiceberg's SqlCatalog as a JDBC catalog finds it, read exactly
by the engines that run here, every change of the archive a snapshot of it, an erasure
leaving no retained snapshot that reads an erased row, and a publication killed at each
step healed exactly once."""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from archiver.testing.reference import seed_orders
from tests.support import fast_env, kill_at_failpoint, start_worker, wait_for_killed_leases
from tests.support.harness import Harness
from tests.support.iceberg import catalog, duck, load_extensions, namespaces, rows, table


@pytest.fixture
def i(h: Harness) -> Harness:
    return h.with_env(ARCHIVER_DELTA="true", ARCHIVER_ICEBERG="true")


def archived_ids(h: Harness, name: str = "public.orders") -> list[int]:
    """The ids of the table's committed files' rows, as the catalog has them (each file
    read from storage): what every reader of the archive must find, each once."""
    return sorted(r["id"] for r in h.archived(name))


def ids(read: pa.Table) -> list[int]:
    return sorted(read.column("id").to_pylist())


def test_the_iceberg_table_holds_the_delta_logs_files_exactly(i: Harness) -> None:
    seed_orders(i.url, 6_000)
    for cutoff in ("2024-12-28", "2024-12-29", "2024-12-30"):
        i.archive("--table", "orders", "--before", cutoff, "--chunk-rows", "1000")
    expected = archived_ids(i)
    assert len(expected) == len(set(expected)) > 3000
    assert ids(rows(i)) == expected
    tbl = table(i)
    files = [t.file.file_path for t in tbl.scan().plan_files()]
    assert (
        len(files)
        == len(set(files))
        == i.value("SELECT count(*) FROM archive_files WHERE state = 'committed'")
    )
    assert tbl.location().endswith("/archive/public.orders")
    snapshot = tbl.current_snapshot()
    published = i.value("SELECT published FROM delta_tables")
    assert snapshot.summary["archiver.publication"] == str(published)
    assert i.value("SELECT iceberg_published FROM delta_tables") == published
    assert i.value("SELECT iceberg_snapshot FROM delta_tables") == snapshot.snapshot_id
    assert namespaces(i) == ["public"]


def _bulk(read: pa.Table) -> list[dict[str, Any]]:
    return read.filter(pc.field("id") <= 100000).to_pylist()  # type: ignore[no-any-return]


def test_every_iceberg_reader_reads_every_type_as_postgresql_holds_it(
    i: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    import polars as pl

    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")  # its plugin is not installed

    from tests.support.alltypes import seed_alltypes
    from tests.support.readers import EXPECTED, compare, daft_azure

    seed_alltypes(i.url)
    i.archive("--table", "alltypes", "--before", "2025-01-01", "--chunk-rows", "1000")
    expected = [dict(r) for r in i.sql(EXPECTED)]
    tbl = table(i, "public.alltypes")
    compare("pyiceberg", _bulk(tbl.scan().to_arrow()), expected)
    polars = pl.scan_iceberg(tbl, storage_options=i.azurite.delta_options)
    compare("polars", _bulk(polars.collect().to_arrow()), expected)
    # DuckDB 1.5.5's azure extension sends an abfss:// path of an account to
    # <account>.blob.core.windows.net whatever endpoint its secret's connection string
    # names, so it cannot read from Azurite (its reads on file storage: below); asked to
    # fail the way it does, this says when it starts to work
    with pytest.raises(duckdb.IOException, match=r"blob\.core\.windows\.net"):
        duck(i).execute("SELECT count(*) FROM iceberg_scan(?)", [tbl.metadata_location])
    import daft
    from daft.io import IOConfig

    # Daft 0.7.26 reads files without field ids only through them, and archiver's carry
    # none (the table is made after them): it refuses them, rather than read nulls; asked
    # to fail so, this says when it applies the name mapping every other reader applies
    io = IOConfig(azure=daft_azure(i))
    with pytest.raises(daft.exceptions.DaftCoreException, match="name-mapping"):
        daft.read_iceberg(tbl, io_config=io).to_arrow()


def test_duckdb_reads_the_iceberg_table_on_file_storage(i: Harness) -> None:
    """DuckDB's iceberg scan of its metadata file, the table's files on a local folder
    (on Azure it reads nothing here: the test above)."""
    from tests.support.alltypes import seed_alltypes
    from tests.support.readers import EXPECTED, compare

    f = i.with_env(ARCHIVER_STORAGE_URL=f"file://{i.tmp}/archive")
    seed_alltypes(f.url)
    f.archive("--table", "alltypes", "--before", "2025-01-01", "--chunk-rows", "1000")
    expected = [dict(r) for r in f.sql(EXPECTED)]
    location = f.value("SELECT metadata_location FROM iceberg_tables")
    assert location.startswith(f"{i.tmp}/archive/public.alltypes/metadata/")
    con = duckdb.connect(
        config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}
    )
    load_extensions(con, "avro", "iceberg")
    read = con.execute("SELECT * FROM iceberg_scan(?)", [location]).arrow().read_all()
    compare("duckdb", _bulk(read), expected)


def exact(h: Harness) -> pa.Table:
    """The Iceberg table's current rows, each catalogued row once (and nothing else)."""
    read = rows(h)
    assert ids(read) == archived_ids(h)
    return read


def committed_files(h: Harness) -> int:
    return int(h.value("SELECT count(*) FROM archive_files WHERE state = 'committed'"))


def ok(done: Any) -> None:
    assert done.returncode == 0, done.stderr


def test_every_change_is_a_snapshot_and_no_snapshot_reads_an_erased_row(i: Harness) -> None:
    i = i.with_env(ARCHIVER_READER_RETENTION=str(7 * 86400))  # snapshots kept, as by default
    seed_orders(i.url, 6_000)
    for cutoff in ("2024-12-28", "2024-12-29", "2024-12-30", "2024-12-31"):
        i.archive("--table", "orders", "--before", cutoff, "--chunk-rows", "250")
    archived = exact(i).num_rows
    ok(i.cli("restore", "--table", "orders", "--from", "2024-12-30", "--to", "2024-12-31"))
    kept = exact(i).num_rows  # a day moved back: out of the archive
    assert 0 < kept < archived
    small = committed_files(i)
    ok(i.cli("compact", "--table", "orders"))
    tbl = table(i)
    assert len(list(tbl.scan().plan_files())) == committed_files(i) < small
    merged = tbl.snapshot_by_id(tbl.current_snapshot().parent_snapshot_id)
    assert merged.summary.operation.value == "overwrite"  # then its manifests merged
    assert len(tbl.current_snapshot().manifests(tbl.io)) == 1
    assert exact(i).num_rows == kept
    ok(i.cli("verify", "--table", "orders"))
    ok(i.cli("tier", "--table", "orders", "--tier", "Archive"))
    assert rows(i).num_rows == 0  # offline: out of the Delta table, out of this one
    assert i.value("SELECT bool_and(offline) FROM archive_files WHERE state = 'committed'")
    ok(i.cli("rehydrate", "--table", "orders", "--tier", "Hot"))
    ok(i.cli("publish", "--table", "orders"))
    assert exact(i).num_rows == kept
    erased = ids(rows(i))[kept // 2]
    before = [s.snapshot_id for s in table(i).snapshots()]
    assert len(before) > 1
    ok(i.cli("erase", "--table", "orders", "--where", f"id = {erased}"))
    assert exact(i).num_rows == kept - 1
    tbl = table(i)
    assert [s.snapshot_id for s in tbl.snapshots()] == [tbl.current_snapshot().snapshot_id]
    for snapshot in before:  # expired, and their manifests gone with them
        with pytest.raises(ValueError, match="Snapshot not found"):
            tbl.scan(snapshot_id=snapshot).to_arrow()
    metadata = [n for n in i.blobs(delta_log=True) if "/metadata/" in n]
    assert sum(n.endswith(".metadata.json") for n in metadata) == 1
    assert i.value("SELECT iceberg_forgotten_through FROM delta_tables") == i.value(
        "SELECT id FROM archive_ledger WHERE operation = 'erase'"
    )
    over = i.with_env(ARCHIVER_READER_RETENTION="0")  # no reader kept: the files go at once
    ok(over.cli("purge", "--table", "orders", "--older-than", "1 day"))
    assert exact(i).num_rows == 0
    assert i.value("SELECT count(*) FROM archive_files") == 0  # every blob went


def test_a_publication_killed_at_each_step_heals_exactly_once(i: Harness, tmp_path: Any) -> None:
    """Workers SIGKILLed just before a publication's Delta commit, just after it, and just
    after its Iceberg commit (before archiver's record of it): the next workers leave the
    Iceberg table holding every moved row once, each file once, its record in step."""
    seed_orders(i.url, 8_000)
    old = sorted(i.old_ids("2024-12-28"))
    fast = fast_env(i.env)
    i.enqueue(
        "--table", "orders", "--before", "2024-12-28", "--chunk-rows", "500", "--parallel", "2"
    )
    for point in ("before_delta_commit", "after_delta_commit", "after_iceberg_commit"):
        kill_at_failpoint(fast, point, tmp_path / f"{point}.log")
    assert i.value("SELECT iceberg_published IS DISTINCT FROM published FROM delta_tables")
    wait_for_killed_leases(i.url)
    workers = [start_worker(fast, "--burst") for _ in range(2)]
    assert all(w.wait(120) == 0 for w in workers)
    assert i.value("SELECT count(*) FROM background_jobs WHERE status <> 'completed'") == 0
    i.exactly_once(set(old))
    assert ids(rows(i)) == old
    files = [t.file.file_path for t in table(i).scan().plan_files()]
    assert len(files) == len(set(files)) == committed_files(i)
    assert i.value("SELECT iceberg_published = published FROM delta_tables")


def test_a_changed_schema_and_awkward_names_read_by_name(
    i: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files archived before a column was added and a column widened, and after: the
    Iceberg table's schema grows by name (its name mapping with it), and readers read
    every file's columns by their names, old files' missing column as NULL."""
    import polars as pl

    from tests.support.readers import AWKWARD, compare

    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")
    i.sql(
        AWKWARD + "CREATE TABLE snapshot AS SELECT * FROM awkward WHERE created_at < '2023-01-10'"
    )
    i.archive("--table", "awkward", "--before", "2023-01-05", "--chunk-rows", "40")
    for name in ("awkward", "snapshot"):  # the rows archived by then keep their values
        i.sql(
            f'ALTER TABLE {name} ADD COLUMN "Region, EU" text, '
            'ALTER COLUMN "CamelCase" TYPE bigint;'
            f'UPDATE {name} SET "Region, EU" = \'r\' || id, "CamelCase" = id * 10000000000 '
            "WHERE created_at >= '2023-01-05'"
        )
    i.archive("--table", "awkward", "--before", "2023-01-10", "--chunk-rows", "40")
    expected = [dict(r) for r in i.sql("SELECT * FROM snapshot ORDER BY id")]
    tbl = table(i, "public.awkward")
    fields = {f.name: str(f.field_type) for f in tbl.schema().fields}
    assert (fields["Region, EU"], fields["CamelCase"]) == ("string", "long")
    mapped = {f.names[0] for f in tbl.name_mapping()}
    assert {"Customer Name", "Region, EU", 'quote"d'} <= mapped
    compare("pyiceberg", tbl.scan().to_arrow().to_pylist(), expected)
    polars = pl.scan_iceberg(tbl, storage_options=i.azurite.delta_options).collect()
    compare("polars", polars.to_arrow().to_pylist(), expected)


def test_verify_finds_an_iceberg_table_out_of_step_and_a_publication_mends_it(
    i: Harness, tmp_path: Any
) -> None:
    from tests.support.console import Console

    seed_orders(i.url, 3_000)
    i.archive("--table", "orders", "--before", "2024-12-31", "--chunk-rows", "500")
    doctor = i.cli("doctor")
    assert "catalog archive: 1 table, each at its Delta log" in doctor.stdout, doctor.stdout
    console = Console(i, tmp_path)
    try:
        status, page = console.get("/archive/public.orders")
    finally:
        console.stop()
    snapshot = table(i).current_snapshot().snapshot_id
    assert (
        status == 200 and f"<dt>Iceberg table</dt><dd>snapshot {snapshot}, at publication" in page
    )
    ok(i.cli("verify", "--table", "orders"))
    writer = catalog(i)  # another writer takes a file out
    try:
        tbl = writer.load_table(("public", "orders"))
        [gone, *_] = [task.file for task in tbl.scan().plan_files()]
        with tbl.transaction() as tx, tx.update_snapshot().overwrite() as snapshot:
            snapshot.delete_data_file(gone)
    finally:
        writer.engine.dispose()
    checked = i.cli("verify", "--table", "orders")
    assert checked.returncode == 1
    assert "in its publication, not in the Iceberg table" in checked.stdout + checked.stderr
    ok(i.cli("publish", "--table", "orders"))  # reconciled: the file back, once
    ok(i.cli("verify", "--table", "orders"))
    assert ids(rows(i)) == archived_ids(i)
    ok(i.cli("publish", "--table", "orders", "--rebuild"))  # the log numbered anew
    ok(i.cli("verify", "--table", "orders"))
    assert ids(rows(i)) == archived_ids(i)
    assert i.value("SELECT iceberg_published = published AND published > 0 FROM delta_tables")


PARTITIONED = """
CREATE TABLE events (id bigint NOT NULL, created_at date NOT NULL, note text,
                     PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at);
CREATE TABLE events_2023_01 PARTITION OF events FOR VALUES FROM ('2023-01-01') TO ('2023-02-01');
CREATE TABLE events_2023_02 PARTITION OF events FOR VALUES FROM ('2023-02-01') TO ('2023-03-01');
CREATE TABLE events_2024 PARTITION OF events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
INSERT INTO events SELECT g, date '2023-01-01' + g % 28, 'n' || g FROM generate_series(1, 500) g;
INSERT INTO events SELECT g, date '2024-06-01', 'live' FROM generate_series(501, 600) g;
"""


def test_an_empty_partitions_file_is_held_once(i: Harness) -> None:
    """A partition archived whole while empty leaves a file of no rows (restore recreates
    the partition from it): the Iceberg table holds it once, publication after
    publication (a scan's plan lists no such file: the table's manifests are read)."""
    from archiver.iceberg.catalog import live_files

    i.sql(PARTITIONED)
    i.enqueue("--table", "events", "--before", "2024-01-01", "--partitions", "detach")
    i.drain()
    assert i.value("SELECT count(*) FROM archive_files WHERE row_count = 0") == 1
    for _ in range(2):
        ok(i.cli("publish", "--table", "events"))
        ok(i.cli("verify", "--table", "events"))
        files = live_files(table(i, "public.events"))
        assert len(files) == committed_files(i) == 2
    assert sorted(rows(i, "public.events").column("id").to_pylist()) == list(range(1, 501))
