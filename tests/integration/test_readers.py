"""The archive's Delta tables as the readers people use read them: delta-rs, DuckDB,
Polars, DataFusion and Daft, each compared value by value with PostgreSQL's rows; and a
table whose column names Spark-family readers refuse, published with Delta column
mapping (archiver.delta.mapping) and checked against the protocol's rules for it, since
no Spark runs here: created mapped, upgraded when such a column arrives, a column renamed
later, and rebuilt."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from archiver.ident import quote_ident
from tests.support.delta import delta, duck, mapping_rules, options, uri
from tests.support.harness import Harness
from tests.support.readers import AWKWARD, EXPECTED, compare, daft_azure


@pytest.fixture
def d(h: Harness) -> Harness:
    """The test's world with Delta Lake publishing on, as it is by default."""
    return h.with_env(ARCHIVER_DELTA="true")


def _bulk(table: pa.Table | pa.RecordBatchReader) -> list[dict[str, Any]]:
    """A reader's rows as Python values, the bulk rows only (the edge rows hold dates
    Python cannot: their own test is test_delta's, through delta-rs and DuckDB)."""
    if isinstance(table, pa.RecordBatchReader):
        table = table.read_all()
    rows: list[dict[str, Any]] = table.filter(pc.field("id") <= 100000).to_pylist()
    return rows


def readers(h: Harness, table: str) -> dict[str, list[dict[str, Any]]]:
    """The table's rows through each reader's own Delta support, as Python values."""
    import daft
    import polars as pl
    from daft.io import IOConfig

    location = uri(h, table)
    found: dict[str, list[dict[str, Any]]] = {}
    found["delta-rs"] = _bulk(delta(h, table).to_pyarrow_table())
    con = duck(h)
    found["duckdb"] = _bulk(con.execute(f"SELECT * FROM delta_scan('{location}')").arrow())
    found["polars"] = _bulk(pl.read_delta(location, storage_options=options(h)).to_arrow())
    found["datafusion"] = _bulk(datafusion_rows(h, table))
    io = IOConfig(azure=daft_azure(h))
    found["daft"] = _bulk(daft.read_deltalake(location, io_config=io).to_arrow())
    return found


def datafusion_rows(h: Harness, table: str) -> pa.Table:
    """DataFusion's read of the Delta table. Its documented way, delta-rs's table
    provider (`ctx.register_table(name, DeltaTable(...))`), reads a local table but not
    one on Azure (datafusion 55, deltalake 1.6.6: "No suitable object store found for
    az://...", with the store registered in the session too): the provider runs in
    delta-rs's own DataFusion across the FFI boundary. So DataFusion scans delta-rs's
    dataset of the table's active files instead, and is asked to fail the other way, so
    that this test says when it starts to work."""
    import datafusion

    ctx = datafusion.SessionContext()
    with pytest.raises(Exception, match="No suitable object store"):
        ctx.register_table("provider", delta(h, table))
        ctx.sql("SELECT max(id) FROM provider").collect()  # count(*): from the stats
    ctx.register_dataset("archive", delta(h, table).to_pyarrow_dataset())
    return ctx.sql("SELECT * FROM archive").to_arrow_table()


def test_every_reader_reads_every_type_as_postgresql_holds_it(d: Harness) -> None:
    from tests.support.alltypes import seed_alltypes

    seed_alltypes(d.url)
    d.archive("--table", "alltypes", "--before", "2025-01-01", "--chunk-rows", "1000")
    expected = [dict(r) for r in d.sql(EXPECTED)]
    for reader, rows in readers(d, "public.alltypes").items():
        compare(reader, rows, expected)


AMOUNTS = """
CREATE TABLE amounts (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, amount numeric);
INSERT INTO amounts VALUES
  (1, '2023-01-01', 12.5), (2, '2023-01-01', 12.50), (3, '2023-01-01', 0.0),
  (4, '2023-01-01', 100), (5, '2023-01-01', -0.000000000000000001),
  (6, '2023-01-01', 99999999999999999999.999999999999999999),
  (7, '2023-01-01', 100000000000000000000), (8, '2023-01-01', 1.1234567890123456789),
  (9, '2023-01-01', 'NaN'), (10, '2023-01-01', 'Infinity'), (11, '2023-01-01', '-Infinity'),
  (12, '2023-01-01', NULL), (13, '2023-01-01', 1e-30), (14, '2023-01-01', -5),
  (15, '2023-01-01', 0), (16, '2023-01-01', 1.000);
INSERT INTO amounts SELECT g, '2023-01-02', g * 1.25 FROM generate_series(100, 1099) g;
CREATE TABLE amounts_then AS SELECT * FROM amounts;
"""
# what a reader should see: the value where decimal(38,18) holds it exactly, else NULL
AMOUNTS_SEEN = """
SELECT id, CASE WHEN amount = trunc(amount, 18) AND abs(amount) < 1e20 THEN amount END AS amount
FROM amounts_then ORDER BY id
"""


def test_unconstrained_numeric_is_a_decimal_to_readers_and_restores_exactly(d: Harness) -> None:
    d.sql(AMOUNTS)
    d.archive("--table", "amounts", "--before", "2024-01-01", "--chunk-rows", "400")
    fields = {
        f["name"]: f["type"]
        for f in json.loads(delta(d, "public.amounts").schema().to_json())["fields"]
    }
    assert fields["amount"] == "decimal(38,18)"
    expected = [dict(r) for r in d.sql(AMOUNTS_SEEN)]
    assert [r["id"] for r in expected if r["amount"] is None] == list(range(7, 14))
    for reader, rows in readers(d, "public.amounts").items():
        compare(reader, [{k: r[k] for k in ("id", "amount")} for r in rows], expected)
    # in the files: the decimal, and the exact text where the decimal is not all of it
    path = d.value(
        "SELECT path FROM archive_files WHERE source_table = 'public.amounts' ORDER BY id LIMIT 1"
    )
    written = pq.read_table(pa.BufferReader(d.blob(path))).to_pylist()
    text = {r["id"]: r["amount__pg_text"] for r in written}
    assert {k: text[k] for k in (1, 2, 3, 4, 9, 16)} == {
        1: None,
        2: "12.50",
        3: "0.0",
        4: None,
        9: "NaN",
        16: "1.000",
    }
    # restored: every value as its text was, scale and all
    back = d.cli("restore", "--table", "amounts")
    assert back.returncode == 0, back.stderr
    assert not d.missing(
        "SELECT id, amount::text FROM amounts", "SELECT id, amount::text FROM amounts_then"
    )
    assert d.value("SELECT count(*) FROM amounts") == 1016


def _expected_awkward(h: Harness) -> list[dict[str, Any]]:
    return [dict(r) for r in h.sql("SELECT * FROM snapshot ORDER BY id")]


def test_names_spark_refuses_are_column_mapped_and_every_reader_that_can_reads_them(
    d: Harness,
) -> None:
    d.sql(
        AWKWARD + "CREATE TABLE snapshot AS SELECT * FROM awkward WHERE created_at < '2023-01-08'"
    )
    d.archive("--table", "awkward", "--before", "2023-01-08", "--chunk-rows", "60")
    files = [
        r["path"]
        for r in d.sql("SELECT path FROM archive_files WHERE source_table = 'public.awkward'")
    ]
    fields = mapping_rules(d, "public.awkward", files)
    assert (
        fields["Customer Name"]["metadata"]["delta.columnMapping.physicalName"] == "Customer Name"
    )
    expected = _expected_awkward(d)
    # delta-rs's SQL engine and DuckDB resolve physical names (PROTOCOL.md, name mode);
    # see readers_mapped for the others
    found = readers_mapped(d, "public.awkward")
    for reader, rows in found.items():
        compare(reader, rows, expected)


def readers_mapped(h: Harness, table: str) -> dict[str, list[dict[str, Any]]]:
    """A column-mapped table's rows: through the Delta support of the readers that
    resolve physical names (delta-rs's SQL engine, DuckDB), and through the others' own
    Parquet readers over the files its log lists (`DeltaTable.file_uris()`), which works
    because each column's physical name is its name. Their Delta support is asked to
    refuse it as it does today, so that this test says when one starts to read it."""
    import functools

    import daft
    import datafusion
    import polars as pl
    from daft.io import IOConfig
    from deltalake import QueryBuilder

    location = uri(h, table)
    table_ = delta(h, table)
    found: dict[str, list[dict[str, Any]]] = {}
    answer = QueryBuilder().register("archive", table_).execute("SELECT * FROM archive")
    found["delta-rs"] = pa.table(answer).to_pylist()
    found["duckdb"] = (
        duck(h).execute(f"SELECT * FROM delta_scan('{location}')").arrow().read_all().to_pylist()
    )
    files, columns = table_.file_uris(), [f.name for f in table_.schema().fields]
    found["polars"] = (
        pl.scan_parquet(files, storage_options=options(h)).select(columns).collect().to_dicts()
    )
    io = IOConfig(azure=daft_azure(h))
    found["daft"] = daft.read_parquet(files, io_config=io).select(*columns).to_arrow().to_pylist()
    ctx = datafusion.SessionContext()
    ctx.register_object_store("az://", _datafusion_azure(h), h.container)
    frames = [ctx.read_parquet(f).select(*map(quote_ident, columns)) for f in files]
    union = functools.reduce(lambda a, b: a.union(b), frames)
    found["datafusion"] = union.to_arrow_table().to_pylist()
    refusals: dict[str, tuple[Callable[[], Any], str]] = {
        "delta-rs's pyarrow dataset": (lambda: table_.to_pyarrow_dataset(), "columnMapping"),
        "polars": (
            lambda: pl.read_delta(location, storage_options=options(h)),
            "which polars does not support",
        ),
        "daft": (
            lambda: daft.read_deltalake(location, io_config=io).to_arrow(),
            "carries no parquet field IDs",
        ),
    }
    for read, says in refusals.values():
        with pytest.raises(Exception, match=says):
            read()
    ctx.register_table("provider", table_)
    with pytest.raises(Exception, match="No suitable object store"):
        ctx.sql("SELECT max(id) FROM provider").collect()
    return found


def _datafusion_azure(h: Harness) -> Any:
    """DataFusion's object store for the test's container (AZURITE_BLOB_STORAGE_URL,
    set by duck, names the emulator's address)."""
    from datafusion.object_store import MicrosoftAzure

    return MicrosoftAzure(
        h.container,
        account="devstoreaccount1",
        access_key=options(h)["azure_storage_account_key"],
        use_emulator=True,
        allow_http=True,
    )


def test_a_table_upgrades_to_column_mapping_keeps_renames_and_rebuilds(d: Harness) -> None:
    from deltalake import QueryBuilder

    d.sql(AWKWARD)
    d.sql('ALTER TABLE awkward DROP COLUMN "Customer Name", DROP COLUMN "total, eur", '
          'DROP COLUMN "a;b{c}(d)=e", DROP COLUMN "tab\there", DROP COLUMN "new\nline"')  # fmt: skip
    d.archive("--table", "awkward", "--before", "2023-01-03")
    before = delta(d, "public.awkward")
    assert "delta.columnMapping.mode" not in before.metadata().configuration  # plain names
    assert before.protocol().min_reader_version == 3  # timestamp_ntz, as delta-rs made it
    # a column Spark refuses arrives: the table upgrades, its older rows read on
    d.sql('ALTER TABLE awkward ADD COLUMN "Customer Name" text')
    d.sql("""UPDATE awkward SET "Customer Name" = 'c ' || id""")
    d.archive("--table", "awkward", "--before", "2023-01-05")
    # renamed in PostgreSQL: a column of the new name joins, the old one stays (older rows)
    d.sql('ALTER TABLE awkward RENAME COLUMN "Customer Name" TO "Client Name"')
    d.archive("--table", "awkward", "--before", "2023-01-07")
    files = [
        r["path"]
        for r in d.sql("SELECT path FROM archive_files WHERE source_table = 'public.awkward'")
    ]
    fields = mapping_rules(d, "public.awkward", files)
    assert list(fields)[-2:] == ["Customer Name", "Client Name"]
    table = delta(d, "public.awkward")
    protocol = table.protocol()
    assert sorted(protocol.reader_features or []) == ["columnMapping", "timestampNtz"]
    answer = QueryBuilder().register("archive", table).execute("SELECT * FROM archive")
    rows = sorted(pa.table(answer).to_pylist(), key=lambda r: r["id"])
    assert len(rows) == 6 * 24 - 1  # hours 1..143 before 2023-01-07
    assert rows[0]["Customer Name"] is None and rows[0]["Client Name"] is None
    assert rows[60]["Customer Name"] == "c 61" and rows[60]["Client Name"] is None
    assert rows[-1]["Client Name"] == "c 143" and rows[-1]["Customer Name"] is None
    con = duck(d)
    location = uri(d, "public.awkward")
    assert con.execute(
        f'SELECT count(*), count("Customer Name"), count("Client Name") FROM delta_scan(\'{location}\')'
    ).fetchone() == (143, 48, 48)
    # Polars over the log's files, which differ in their columns (docs/delta.md)
    import polars as pl

    uris, columns = table.file_uris(), [f.name for f in table.schema().fields]
    schema = pl.DataFrame(pa.schema(table.schema().to_arrow()).empty_table()).schema
    scan = pl.scan_parquet(uris, storage_options=options(d), schema=schema,
                           missing_columns="insert", extra_columns="ignore")  # fmt: skip
    counted = scan.select(columns).select(
        pl.len(), pl.col("Customer Name").count(), pl.col("Client Name").count()
    )
    assert counted.collect().row(0) == (143, 48, 48)
    rebuilt = d.cli("publish", "--table", "awkward", "--rebuild")
    assert rebuilt.returncode == 0, rebuilt.stderr
    fields = mapping_rules(d, "public.awkward", files)
    assert delta(d, "public.awkward").protocol().min_reader_version == 3
    assert con.execute(
        f'SELECT count(*), count("Customer Name"), count("Client Name") FROM delta_scan(\'{location}\')'
    ).fetchone() == (143, 48, 48)
    # the files were never rewritten: the catalog's paths stand
    assert sorted(
        r["path"]
        for r in d.sql("SELECT path FROM archive_files WHERE source_table = 'public.awkward'")
    ) == sorted(files)


def test_a_mapped_table_takes_the_feature_a_new_column_needs(d: Harness) -> None:
    """Mapped at reader 2 / writer 5 (no timestamp without time zone), then such a column
    arrives: the table moves to reader 3 / writer 7 with both features, as the protocol
    requires of a timestamp_ntz column, and its readers read on."""
    d.sql(AWKWARD + "ALTER TABLE awkward DROP COLUMN c_ts")
    d.archive("--table", "awkward", "--before", "2023-01-03")
    assert delta(d, "public.awkward").protocol().min_reader_version == 2
    d.sql("ALTER TABLE awkward ADD COLUMN c_ts timestamp DEFAULT '2023-01-01 12:00'")
    d.archive("--table", "awkward", "--before", "2023-01-05")
    files = [r["path"] for r in d.sql("SELECT path FROM archive_files")]
    fields = mapping_rules(d, "public.awkward", files)
    protocol = delta(d, "public.awkward").protocol()
    assert sorted(protocol.reader_features or []) == ["columnMapping", "timestampNtz"]
    assert fields["c_ts"]["type"] == "timestamp_ntz"
    location = uri(d, "public.awkward")
    counted = duck(d).execute(f"SELECT count(*), count(c_ts) FROM delta_scan('{location}')")
    assert counted.fetchone() == (95, 48)  # hours 1-95; 48-95 archived with c_ts
