"""Every promised PostgreSQL type survives move and restore exactly; the files hold the
standard Parquet types, read back right by an independent reader (DuckDB)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from pathlib import Path

import duckdb

from archiver.testing.services import Azurite
from tests.support import sql
from tests.support.alltypes import ALLTYPES_ROWS as ROWS
from tests.support.alltypes import difference, seed_alltypes
from tests.support.archive import blob_names
from tests.support.harness import Harness


def download(azurite: Azurite, container: str, names: list[str], into: Path) -> list[str]:
    from azure.storage.blob import BlobServiceClient

    client = BlobServiceClient.from_connection_string(
        azurite.connection_string
    ).get_container_client(container)
    paths = []
    for i, name in enumerate(names):
        local = into / f"{i}.parquet"
        local.write_bytes(client.get_blob_client(name).download_blob().readall())
        paths.append(str(local))
    return paths


def test_every_type_moves_and_restores_exactly(h: Harness) -> None:
    seed_alltypes(h.url)
    total = ROWS + 4
    job = h.cli("enqueue", "--table", "alltypes", "--before", "2025-01-01", "--chunk-rows", "1000")
    assert job.returncode == 0, job.stderr
    h.drain()
    assert h.value("SELECT count(*) FROM alltypes") == 0
    assert h.value("SELECT sum(row_count) FROM archive_files") == total
    # the comparison itself sees a difference, NULLs included
    assert h.value(difference("snapshot", "alltypes")) == total

    # A copy into a new table, created from the archived types: the archive stays.
    into = h.cli("restore", "--job", job.stdout.strip(), "--into", "alltypes_copy")
    assert into.returncode == 0, into.stderr
    assert h.value(difference("alltypes_copy", "snapshot")) == 0
    assert h.value(difference("snapshot", "alltypes_copy")) == 0
    assert (
        h.value(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'alltypes_copy'::regclass AND attname = 'c_num'",
        )
        == "numeric(12,2)"
    )

    # An independent reader sees the standard types with the right values.
    files = download(
        h.azurite, h.container, blob_names(h.azurite.connection_string, h.container), h.tmp
    )
    check_with_duckdb(h.url, files)

    # Then moved back, a range first: the files it cuts are rewritten with the rows they
    # keep, every type as it was (verify re-reads them; the full restore compares them)
    part = h.cli(
        "restore", "--table", "alltypes", "--from", "2020-01-01T10:00Z", "--to", "2020-01-02T10:00Z"
    )
    assert part.returncode == 0, part.stderr
    assert "restored 1440 rows" in part.stdout and "2 files rewritten" in part.stdout
    verified = h.cli("verify", "--table", "alltypes")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    restored = h.cli("restore", "--job", job.stdout.strip())
    assert restored.returncode == 0, restored.stderr
    assert f"restored {total - 1440} rows from 3 files" in restored.stdout
    assert h.value(difference("alltypes", "snapshot")) == 0
    assert h.value(difference("snapshot", "alltypes")) == 0
    assert h.value("SELECT count(*) FROM alltypes WHERE c_int_2d IS NULL") == (
        h.value("SELECT count(*) FROM snapshot WHERE c_int_2d IS NULL")
    )

    assert h.value("SELECT count(*) FROM archive_files") == 0
    assert not blob_names(h.azurite.connection_string, h.container)


def check_with_duckdb(url: str, files: list[str]) -> None:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    types = dict(
        con.execute(
            "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet($1))",
            [files],
        ).fetchall()
    )
    assert types["c_num"] == "DECIMAL(12,2)"
    # Delta Lake has no uuid, json or time type: their text, as Delta's string
    assert types["c_uuid"] == "VARCHAR"
    assert types["c_json"] == "VARCHAR"
    assert types["c_date"] == "DATE"
    assert types["c_ts"] == "TIMESTAMP"
    assert types["c_tstz"] == "TIMESTAMP WITH TIME ZONE"
    assert types["c_time"] == "VARCHAR"
    assert types["c_int_arr"] == "INTEGER[]"
    assert types["c_uuid_arr"] == "VARCHAR[]"
    assert types["c_interval"] == 'STRUCT("months" INTEGER, "days" INTEGER, "microseconds" BIGINT)'

    got = {
        r[0]: r[1:]
        for r in con.execute(
            "SELECT id, c_int8, c_num, c_double, c_text, c_bytea, c_uuid, c_date, "
            "epoch_us(c_tstz), epoch_us(c_ts), c_time, c_int_arr, c_text_arr, c_jsonb, "
            "c_interval.months, c_interval.days, c_interval.microseconds "
            "FROM read_parquet($1) WHERE id <= $2",
            [files, ROWS],
        ).fetchall()
    }
    expected = {
        r[0]: tuple(r[1:])
        for r in sql(
            url,
            "SELECT id, c_int8, c_num, c_double, c_text, c_bytea, c_uuid, c_date, "
            "(extract(epoch FROM c_tstz) * 1000000)::bigint, "
            "(extract(epoch FROM c_ts) * 1000000)::bigint, c_time, c_int_arr, c_text_arr, "
            "c_jsonb::text, extract(year FROM c_interval)::int * 12 "
            "+ extract(month FROM c_interval)::int, extract(day FROM c_interval)::int, "
            "(extract(hour FROM c_interval) * 3600000000 "
            "+ extract(minute FROM c_interval) * 60000000 "
            "+ extract(microseconds FROM c_interval))::bigint FROM snapshot WHERE id <= $1",
            ROWS,
        )
    }
    assert len(got) == len(expected) == ROWS
    for key, row in expected.items():
        row = tuple(normalize(v) for v in row)
        found = tuple(normalize(v) for v in got[key])
        assert found[:12] == row[:12], key
        assert [None if v is None else json.loads(str(v)) for v in (found[12], row[12])] == [
            None if row[12] is None else json.loads(str(row[12]))
        ] * 2, key
        assert found[13:] == row[13:], key


def normalize(value: object) -> object:
    """DuckDB and asyncpg values side by side (bytes as bytes, structs as plain data,
    uuid and time as their text)."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dt.time):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, decimal.Decimal):
        return value
    if isinstance(value, dt.date | int | float | str) or value is None:
        return value
    if isinstance(value, list):
        return [normalize(v) for v in value]
    return json.loads(json.dumps(value))


def test_arrays_of_domains_move_as_lists_and_restore_exactly(h: Harness) -> None:
    """An array of a domain has a type of its own that is not built in (its element is
    the domain), which the driver's own table of types does not know: archiver selects it
    as its base type's array, so the file holds a list, and restore casts it back."""
    h.sql(
        "CREATE DOMAIN positive AS integer CHECK (VALUE > 0); CREATE DOMAIN email AS text;"
        "CREATE TABLE tags (id bigint PRIMARY KEY, created_at timestamptz NOT NULL,"
        " ids positive[], emails email[]);"
        "INSERT INTO tags SELECT g, '2020-01-01'::timestamptz + make_interval(mins => g),"
        " CASE WHEN g % 5 = 0 THEN NULL ELSE ARRAY[g, NULL, g + 1]::positive[] END,"
        " ARRAY['a' || g || '@example.org', NULL, '']::email[] FROM generate_series(1, 500) g;"
        "CREATE TABLE tags_before AS SELECT * FROM tags"
    )
    job = h.cli("enqueue", "--table", "tags", "--before", "2025-01-01")
    assert job.returncode == 0, job.stderr
    h.drain()
    assert h.value("SELECT count(*) FROM tags") == 0
    files = download(
        h.azurite, h.container, blob_names(h.azurite.connection_string, h.container), h.tmp
    )
    con = duckdb.connect()
    described = "SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet($1))"
    types = dict(con.execute(described, [files]).fetchall())
    assert (types["ids"], types["emails"]) == ("INTEGER[]", "VARCHAR[]")
    first = "SELECT ids, emails FROM read_parquet($1) WHERE id = 1"
    assert con.execute(first, [files]).fetchall() == [([1, None, 2], ["a1@example.org", None, ""])]

    restored = h.cli("restore", "--job", job.stdout.strip())
    assert restored.returncode == 0, restored.stderr
    for a, b in (("tags", "tags_before"), ("tags_before", "tags")):
        assert h.value(f"SELECT count(*) FROM (TABLE {a} EXCEPT ALL TABLE {b}) d") == 0
    assert h.value("SELECT count(*) FROM tags") == 500
