"""`archiver serve` as every client people point at a PostgreSQL endpoint sees it: psql's
describe commands, postgres_fdw's IMPORT FOREIGN SCHEMA (and ANALYZE), pgjdbc's
DatabaseMetaData (DBeaver, Metabase, Tableau, DataGrip), SQLAlchemy's inspector and
pandas over it (Superset), node-postgres and porsager's postgres, and the catalog SQL of
Npgsql (Power BI) and Grafana, replayed. Each answer is compared with what PostgreSQL
itself says of the source table (the same psql lines, the same column types and NOT
NULL, the same values), on a schema shaped like users' own: the reference orders, every
type of the types tests, and a mixed-case schema's table with a space in its name, a
composite text key, an identity and a generated column, an enum and a domain of its own,
and comments."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.alltypes import difference
from tests.support.catalog_queries import GRAFANA, NPGSQL_TYPES
from tests.support.harness import Harness
from tests.support.serve import BEFORE, Served, archive_three_tables, psql_lines, serving

ROOT = Path(__file__).resolve().parents[2]
JDBC = Path("/usr/share/java/postgresql.jar")  # Debian's libpostgresql-jdbc-java
STATE_TABLES = (
    "background_jobs",
    "archive_files",
    "delta_tables",
    "archive_ledger",
    "archiver_maintenance",
    "schema_migrations",
)


@pytest.fixture
def archived(h: Harness) -> Harness:
    return archive_three_tables(h)


def _columns(described: str) -> dict[str, list[str]]:
    """The column lines of psql's `\\d`: name -> [type, collation, nullable]."""
    out = {}
    for line in described.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 4 and parts[0] and parts[0] != "Column":
            out[parts[0]] = parts[1:4]
    return out


def _no_state_table(text: str) -> None:
    for name in STATE_TABLES:
        assert name not in text, (name, text[:2000])


def test_psql_and_postgres_fdw_see_the_archive_as_postgresql_describes_it(
    archived: Harness,
) -> None:
    h = archived
    with serving(h) as served:
        url = served.dsn()
        listed = psql_lines(url, "\\dt", "\\dt+", "\\dn", "\\l")
        _no_state_table(listed)
        assert re.search(r"public \| alltypes \| table", listed), listed
        assert re.search(r"public \| orders\s+\| table", listed), listed
        assert re.search(r"Sales\s+\|", listed), listed
        assert listed.count("(1 row)") == 1  # \l: this database alone
        lines = psql_lines(url, '\\dt "Sales".*')
        assert re.search(r"Sales\s+\| Order Lines \| table", lines), lines
        assert re.search(r"\| one line of an order", psql_lines(url, '\\dt+ "Sales".*'))

        # \d and \d+: the source's own columns, each as its own \d says it (name,
        # type, collation, nullability), in its order, and nothing else
        for table in ("orders", "alltypes", '"Sales"."Order Lines"'):
            theirs = _columns(psql_lines(h.url, f"\\d {table}"))
            ours_text = psql_lines(url, f"\\d {table}", f"\\d+ {table}")
            _no_state_table(ours_text)
            ours = _columns(ours_text.split("\n\n")[0])
            assert list(ours.items()) == list(theirs.items()), (table, ours, theirs)
            assert "PRIMARY KEY" in ours_text, ours_text
        assert "how many" in psql_lines(url, '\\d+ "Sales"."Order Lines"')
        types = psql_lines(url, '\\dT "Sales".*', "\\dT+ order_status")
        assert "sku" in types and "tier" in types and "paid" in types, types

        # postgres_fdw: the archive imported whole, read back exactly for every type
        h.sql("CREATE EXTENSION IF NOT EXISTS postgres_fdw")
        h.sql(
            f"CREATE SERVER serve_s FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '127.0.0.1', "
            f"port '{served.port}', dbname 'archive', sslmode 'disable')"
        )
        h.sql(
            "CREATE USER MAPPING FOR CURRENT_USER SERVER serve_s OPTIONS "
            f"(user 'archiver', password '{served.password}')"
        )
        h.sql("CREATE SCHEMA imported; CREATE SCHEMA imported_sales; CREATE SCHEMA imported_all")
        h.sql("IMPORT FOREIGN SCHEMA public LIMIT TO (alltypes) FROM SERVER serve_s INTO imported")
        h.sql('IMPORT FOREIGN SCHEMA "Sales" FROM SERVER serve_s INTO imported_sales')
        h.sql("IMPORT FOREIGN SCHEMA public FROM SERVER serve_s INTO imported_all")
        assert {
            r[0]
            for r in h.sql(
                "SELECT relname FROM pg_class WHERE relnamespace = 'imported_all'::regnamespace"
            )
        } == {"alltypes", "orders"}
        assert h.value(difference("snapshot", "imported.alltypes")) == 0
        assert h.value(difference("imported.alltypes", "snapshot")) == 0
        h.sql("ANALYZE imported.alltypes")
        h.sql('ANALYZE imported_sales."Order Lines"')
        assert (
            h.value(
                "SELECT count(*) FROM (SELECT * FROM lines_copy EXCEPT ALL SELECT region, line_no, "
                'sku, tier, qty, amount, "Placed At" FROM imported_sales."Order Lines") d'
            )
            == 0
        )
        declared = h.sql(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull FROM pg_attribute a "
            "WHERE a.attrelid = $1::regclass AND a.attnum > 0 ORDER BY a.attnum",
            'imported_sales."Order Lines"',
        )
        source = h.sql(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull FROM pg_attribute a "
            "WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            '"Sales"."Order Lines"',
        )
        assert [tuple(r) for r in declared] == [tuple(r) for r in source]
        # the same orders, key by key, through an imported table as through the source
        mine = h.sql("SELECT id, status::text, total, tags FROM imported_all.orders ORDER BY id")
        want = h.sql(
            "SELECT id, status::text, total, tags FROM untouched WHERE created_at < $1::text::timestamptz ORDER BY id",
            BEFORE,
        )
        assert [tuple(r) for r in mine] == [tuple(r) for r in want]


def _ids(h: Harness, n: int = 4) -> list[int]:
    rows = h.sql(
        "SELECT id FROM untouched WHERE created_at < $1::text::timestamptz ORDER BY id LIMIT $2",
        BEFORE,
        n,
    )
    return [int(r[0]) for r in rows]


def test_drivers_and_bi_tools_read_the_archive_and_its_catalog(
    archived: Harness, tmp_path: Path
) -> None:
    h = archived
    ids = _ids(h)
    rows = int(
        h.value("SELECT count(*) FROM untouched WHERE created_at < $1::text::timestamptz", BEFORE)
    )
    with serving(h) as served:
        _pgjdbc(h, served, tmp_path, ids, rows)
        _sqlalchemy_and_pandas(h, served, ids)
        _node(h, served, ids, rows)
        _npgsql_and_grafana(h, served)
        still = served.psql("SELECT count(*) FROM orders")
        assert still.returncode == 0 and still.stdout.strip() == str(rows), still.stderr


def _pgjdbc(h: Harness, served: Served, tmp_path: Path, ids: list[int], rows: int) -> None:
    assert JDBC.exists(), "make test installs Debian's libpostgresql-jdbc-java"
    program = ROOT / "tests" / "clients" / "ArchiveClient.java"
    compiled = subprocess.run(
        ["javac", "-cp", str(JDBC), "-d", str(tmp_path), str(program)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert compiled.returncode == 0, compiled.stderr
    done = subprocess.run(
        [
            "java",
            "-cp",
            f"{JDBC}:{tmp_path}",
            "ArchiveClient",
            f"jdbc:postgresql://127.0.0.1:{served.port}/archive",
            served.user,
            served.password,
            *map(str, ids),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    said: dict[str, list[list[str]]] = {}
    for line in done.stdout.splitlines():
        kind, *rest = line.split("\t")
        said.setdefault(kind, []).append(rest)
    assert said["product"][0][0] == "PostgreSQL" and said["product"][0][1].startswith("15.")
    assert {"public", "Sales"} <= {s[0] for s in said["schema"]}
    tables = {(t[0], t[1], t[2]) for t in said["table"]}
    assert {
        ("public", "orders", "TABLE"),
        ("public", "alltypes", "TABLE"),
        ("Sales", "Order Lines", "TABLE"),
    } <= tables
    assert not {t for t in tables if t[1] in STATE_TABLES}
    source = {
        r["attname"]: r
        for r in h.sql(
            "SELECT a.attname, t.typname, a.attnotnull FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
            "WHERE a.attrelid = 'orders'::regclass AND a.attnum > 0 AND NOT a.attisdropped"
        )
    }
    columns = {c[0]: c for c in said["column"]}
    assert set(columns) == set(source), columns  # the table's own, nothing else
    for name, original in source.items():
        assert columns[name][1] == original["typname"], (name, columns[name])
        assert columns[name][5] == ("NO" if original["attnotnull"] else "YES"), columns[name]
    assert said["key"] == [["id", "1"]]
    assert ["orders_pkey", "id"] in said["index"]
    # past the server-prepare threshold (binary transfer) the same rows as the source's
    want = {
        r["id"]: r
        for r in h.sql(
            "SELECT id, status::text, total, created_at FROM untouched WHERE id = ANY($1::bigint[])",
            ids,
        )
    }
    assert len(said["row"]) == 3 * len(ids)
    for _, key, status, total, created, _tags in said["row"]:
        original = want[int(key)]
        assert status == str(original["status"]).replace("None", "null")
        assert total == str(original["total"]).replace("None", "null")
        assert created.replace("Z", "+00:00") == original["created_at"].isoformat(), created
    result = {r[0]: r for r in said["result"]}
    assert result["total"][1:5] == ["numeric", "2", "12", "2"], result["total"]
    assert result["status"][1] == "order_status" and result["created_at"][1] == "timestamptz"
    assert result["id"][5] == "0", result["id"]  # columnNoNulls: pgjdbc found the column
    assert said["bad"] == [["42703"]] and said["count"] == [[str(rows)]]


def _sqlalchemy_and_pandas(h: Harness, served: Served, ids: list[int]) -> None:
    """SQLAlchemy's inspector and pandas.read_sql over an engine, in their own venv
    (tests/clients/requirements.txt), against serve and the source alike."""
    python = ROOT / "dev" / "clients-venv" / "bin" / "python"
    assert python.exists(), "make test builds dev/clients-venv"
    serve_url = f"postgresql://{served.user}:{served.password}@127.0.0.1:{served.port}/archive"
    done = subprocess.run(
        [
            str(python),
            str(ROOT / "tests" / "clients" / "sqlalchemy_client.py"),
            serve_url,
            h.url,
            *map(str, ids),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    mine, theirs = said["serve"], said["source"]
    assert {"public", "Sales"} <= set(mine["schemas"])
    assert mine["tables"] == ["alltypes", "orders"] and mine["sales"] == ["Order Lines"]
    for table, columns in theirs["columns"].items():
        ours = {c[0]: c for c in mine["columns"][table]}
        assert list(ours) == [c[0] for c in columns], (table, list(ours))
        for name, kind, nullable in columns:
            assert ours[name] == [name, kind, nullable], (table, ours[name], kind, nullable)
        assert mine["keys"][table] == theirs["keys"][table]
        assert mine["foreign"][table] == [] and mine["indexes"][table] == []
    assert mine["comment"] == "one line of an order"
    assert said["frame"] == "same" and said["rows"] == len(ids), said


def _node(h: Harness, served: Served, ids: list[int], rows: int) -> None:
    done = subprocess.run(
        [
            "node",
            str(ROOT / "tests" / "clients" / "node_clients.js"),
            str(served.port),
            served.password,
            *map(str, ids),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NODE_PATH": str(ROOT / "dev" / "node_modules")},
    )
    assert done.returncode == 0, done.stderr
    said: dict[str, list[Any]] = {}
    for line in done.stdout.splitlines():
        answer = json.loads(line)
        said.setdefault(answer["what"], []).append(answer["value"])
    want = {
        str(r["id"]): r
        for r in h.sql(
            "SELECT id, status::text, total FROM untouched WHERE id = ANY($1::bigint[])", ids
        )
    }
    for driver in ("pg", "postgres"):
        assert said[f"{driver} count"] == [str(rows)]
        for row in said[f"{driver} row"]:
            original = want[str(row["id"])]
            assert row["status"] == original["status"]
            assert (row["total"] is None) == (original["total"] is None)
            assert row["total"] is None or row["total"] == str(original["total"])
        (inflight,) = said[f"{driver} inflight"]
        assert [str(r["id"]) for r in inflight] == [str(i) for i in ids]
        assert said[f"{driver} bad"] == ["42703"] and said[f"{driver} after"] == [1]


def _npgsql_and_grafana(h: Harness, served: Served) -> None:
    """Npgsql's type loading (Power BI's driver) and Grafana's metadata queries, as their
    sources send them (no .NET or Grafana runs here): the answers' shapes they rely on."""
    with psycopg.connect(served.dsn(), autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute(NPGSQL_TYPES)  # one simple query of four statements, as Npgsql sends it
        version = cur.fetchall()
        assert "PostgreSQL 15." in version[0][0] and "archiver" in version[0][0]
        assert cur.nextset()
        loaded = cur.fetchall()
        by_oid = {int(r[1]): r for r in loaded}
        assert all(
            r[0] and r[1] and r[2] and r[3] and r[4] is not None for r in loaded
        )  # NULLs crash its loader
        assert cur.nextset()
        fields = cur.fetchall()
        assert cur.nextset()
        labels = cur.fetchall()
        assert not cur.nextset()
        # every type a result of the archive is announced as, Npgsql finds
        described = conn.execute("SELECT * FROM alltypes LIMIT 0").description or []
        for column in described:
            assert column.type_code in by_oid, (column.name, column.type_code)
        mood = next(int(r[1]) for r in loaded if r[2] == "mood")
        assert [r[1] for r in labels if int(r[0]) == mood] == ["sad", "ok", "happy"]
        pair = next(int(r[1]) for r in loaded if r[2] == "pair")
        assert [r[1] for r in fields if int(r[0]) == pair] == ["a", "b"]
        conn.execute("DISCARD ALL")
        # Grafana's metadata queries
        (version_number,) = conn.execute(GRAFANA["version"]).fetchone() or (0,)
        assert version_number // 100 == 15
        assert conn.execute(GRAFANA["timescaledb"]).fetchall() == []
        schemas = [r[0] for r in conn.execute(GRAFANA["schemas"])]
        assert "public" in schemas and "Sales" in schemas
        tables = [r[0] for r in conn.execute(GRAFANA["tables"])]
        assert "orders" in tables and "alltypes" in tables and '"Sales"."Order Lines"' in tables
        columns: dict[str, str] = dict(conn.execute(GRAFANA["columns"], ["orders"] * 4).fetchall())
        assert columns["total"] == "numeric" and columns["created_at"] == "timestamp with time zone"
