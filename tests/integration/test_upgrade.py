"""An archive an older release wrote, then the upgrade: every archived row stays readable
by every reader. Commit 7257763 (before Delta publishing) wrote uuid and json columns
as Parquet's UUID and JSON, time as TIME and a numeric(50,2) as a 256-bit decimal:
types Delta Lake has none for, so its files were left out of their Delta table and a
query over it answered over less than the archive. Its code is exported from this
repository's history and run as the release was (archiver.testing.releases: its own
migrations), on the test's database and Azurite container; then this checkout migrates
the same database and archives on, publishing."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from archiver.testing.releases import export_commit
from tests.support import archiver_cmd, fresh_database
from tests.support.delta import delta
from tests.support.harness import Harness

OLD = "7257763"  # "Each row in one place", the last release before Delta publishing
THINGS = """
CREATE TABLE things (
    id bigint PRIMARY KEY, u uuid, j jsonb, js json, tm time, big numeric(50,2),
    created_at timestamptz NOT NULL
);
INSERT INTO things
SELECT g, md5(g::text)::uuid, jsonb_build_object('g', g, 'tags', jsonb_build_array('a', g)),
       json_build_object('x', g), time '00:00:00.25' + g * interval '37.5 seconds',
       g * 1.5 + 1e40, '2020-01-01'::timestamptz + g * interval '1 hour'
FROM generate_series(1, 600) g;
UPDATE things SET tm = '24:00:00' WHERE id = 7;       -- kept beside the column, as text
UPDATE things SET big = 'NaN' WHERE id = 8;           -- likewise
UPDATE things SET u = NULL, j = NULL WHERE id = 9;
CREATE TABLE things_then AS SELECT * FROM things;     -- the rows as they were
"""
AS_TEXT = "SELECT id, u::text, j::text, js::text, tm::text, big::text FROM things_then"


@pytest.fixture
def upgraded_world(h: Harness) -> Iterator[Harness]:
    """The test's world on a database no migration has touched yet."""
    with fresh_database("archiver_up") as url:
        yield dataclasses.replace(h, url=url, env={**h.env, "ARCHIVER_DATABASE_URL": url})


def old_release(h: Harness, *args: str) -> None:
    import subprocess

    root = h.tmp / "old"
    if not root.exists():
        export_commit(OLD, root)
    done = subprocess.run(
        archiver_cmd(*args), env=h.env, cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_files_an_older_release_wrote_join_the_delta_table(upgraded_world: Harness) -> None:
    h = upgraded_world
    h.sql(THINGS)
    old_release(h, "migrate")
    old_release(h, "enqueue", "--table", "things", "--before", "2020-01-10")  # ids 1-215
    old_release(h, "worker", "--burst")
    (old_path,) = [r["path"] for r in h.sql("SELECT path FROM archive_files")]
    assert len(h.archived("public.things")) == 215
    written = _parquet_schema(h, old_path, h.tmp / "old.parquet")
    assert "(UUID)" in written and "(JSON)" in written and "Time(" in written, written

    # the upgrade: this release migrates the same database and archives on, publishing
    d = h.with_env(ARCHIVER_DELTA="true")
    migrated = d.cli("migrate")
    assert migrated.returncode == 0, migrated.stderr
    d.archive("--table", "things", "--before", "2020-01-20")  # ids 216-455

    # the old file was rewritten with Delta's types, through the ledger, and published
    (ledger,) = d.sql("SELECT operation, status, rows, detail FROM archive_ledger")
    assert (ledger["operation"], ledger["status"], ledger["rows"]) == ("convert", "done", 0)
    assert '"columns": ["u", "j", "js", "tm", "big"]' in ledger["detail"]
    assert not d.value("SELECT count(*) FROM archive_files WHERE delta_refused IS NOT NULL")
    assert not [b for b in d.blobs() if b.endswith(old_path)], "the original is deleted"
    assert d.value("SELECT sum(row_count) FROM archive_files WHERE state = 'committed'") == 455

    # every archived row, to delta-rs, as PostgreSQL's text of the values it had
    table = delta(d, "public.things").to_pyarrow_table(columns=["id", "u", "j", "js", "tm", "big"])
    got = {r["id"]: tuple(r.values())[1:] for r in table.to_pylist()}
    want = {r["id"]: tuple(r.values())[1:] for r in map(dict, d.sql(AS_TEXT + " WHERE id <= 455"))}
    assert got == want
    assert got[7][3] == "24:00:00" and got[8][4] == "NaN" and got[9][:2] == (None, None)

    counted = d.cli("query", "--format", "csv", "SELECT count(*) AS n FROM things")
    assert counted.returncode == 0, counted.stderr
    assert counted.stdout.split()[-1] == "455"
    verified = d.cli("verify", "--table", "things")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "0 problems" in verified.stdout + verified.stderr

    # a restore out of the rewrite gives the rows back as they were
    back = d.cli("restore", "--table", "things", "--from", "2019-01-01", "--to", "2020-01-05")
    assert back.returncode == 0, back.stderr
    assert d.value("SELECT count(*) FROM things WHERE id <= 215") == 95
    cols = "id, u, j, js::text, tm, big, created_at"  # (json has no equality)
    differ = d.value(
        f"SELECT count(*) FROM ((SELECT {cols} FROM things WHERE id <= 95 EXCEPT "
        f"SELECT {cols} FROM things_then) UNION ALL (SELECT {cols} FROM things_then "
        f"WHERE id <= 95 EXCEPT SELECT {cols} FROM things)) x"
    )
    assert differ == 0


def _parquet_schema(h: Harness, path: str, local: Path) -> str:
    """The stored file's Parquet schema, as text."""
    from azure.storage.blob import ContainerClient

    client = ContainerClient.from_connection_string(h.azurite.connection_string, h.container)
    (name,) = [b for b in h.blobs() if b.endswith(path)]
    local.write_bytes(client.download_blob(name).readall())
    return str(pq.ParquetFile(local).schema)


TEXT_NUMERIC = "800d8d4"  # the last release that archived an unconstrained numeric as text


def test_a_numeric_an_earlier_release_archived_as_text_stays_text(
    upgraded_world: Harness,
) -> None:
    """A table whose unconstrained numeric column an earlier release archived as text
    (its Delta column a string) keeps it text: a decimal file could not join that Delta
    table (pgtypes.sql.OPEN_NUMERIC, archive.context.text_numeric)."""
    h = upgraded_world.with_env(ARCHIVER_DELTA="true")
    h.sql(
        "CREATE TABLE amounts (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, "
        "amount numeric);"
        "INSERT INTO amounts SELECT g, '2023-01-01'::timestamptz + g * interval '1 hour', "
        "g * 1.25 FROM generate_series(1, 300) g;"
        "CREATE TABLE amounts_then AS SELECT * FROM amounts"
    )
    root = h.tmp / "text-numeric"
    export_commit(TEXT_NUMERIC, root)
    for args in (("migrate",), ("enqueue", "--table", "amounts", "--before", "2023-01-04"),
                 ("worker", "--burst")):  # fmt: skip
        done = subprocess.run(
            archiver_cmd(*args), env=h.env, cwd=root, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
    assert h.value("SELECT sum(row_count) FROM archive_files") == 71  # hours 1-71

    migrated = h.cli("migrate")
    assert migrated.returncode == 0, migrated.stderr
    # a column this release archives first: a decimal
    h.sql("ALTER TABLE amounts ADD COLUMN fresh numeric; UPDATE amounts SET fresh = amount")
    h.archive("--table", "amounts", "--before", "2023-01-10")
    assert not h.value("SELECT count(*) FROM archive_files WHERE delta_refused IS NOT NULL")
    fields = {
        f["name"]: f["type"]
        for f in json.loads(delta(h, "public.amounts").schema().to_json())["fields"]
    }
    assert (fields["amount"], fields["fresh"]) == ("string", "decimal(38,18)")
    rows = delta(h, "public.amounts").to_pyarrow_table(columns=["id", "amount"]).to_pylist()
    assert len(rows) == 215 and {r["id"]: r["amount"] for r in rows}[2] == "2.50"
    back = h.cli("restore", "--table", "amounts")
    assert back.returncode == 0, back.stderr
    then = "SELECT id, amount::text, CASE WHEN id > 71 THEN amount::text END FROM amounts_then"
    # rows 1-71 were archived before `fresh` existed: NULL there
    assert not h.missing("SELECT id, amount::text, fresh::text FROM amounts", then)
