"""What serve answers of PostgreSQL's catalogs, asked as clients ask and as a fuzzer built
from them asks: every relation of pg_catalog and information_schema; the queries psql's
describe commands send (captured from psql itself, `psql -E`); the catalog SQL of
pgjdbc's DatabaseMetaData, SQLAlchemy's dialect, Npgsql's type loader and Grafana
(tests/support/catalog_queries.py); and those mutated -- their conditions dropped, their
relations swapped, the functions clients call over the catalogs applied to their
columns. For each: serve never crashes; no answer shows a relation or a row of the
queue database beyond the archived tables (its state tables, its name, the server's
other databases and roles); and each answer is PostgreSQL's own -- the same columns,
types, rows and SQLSTATE as the definitions database gives its reader directly."""

from __future__ import annotations

import os
import random
import re
import subprocess
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from pglast import parse_sql
from pglast.stream import RawStream

from archiver.serve import statements
from archiver.serve.narrowing import narrowed
from archiver.testing.reference import seed_orders
from archiver.testing.services import with_database
from tests.support import ADMIN_URL, sql
from tests.support.catalog_queries import GRAFANA, NPGSQL_TYPES, PGJDBC, SQLALCHEMY
from tests.support.harness import Harness
from tests.support.serve import definitions_database, serving

PASSWORD = "definitions-reader-password-0123"
TIMEOUT = 2.0  # each side's statement_timeout, as the session's setting
PATIENT = 30.0  # serve's own, and both sides' when one alone ran out of time
TIMED_OUT = ("error", "57014")
PSQL = (
    "\\dt",
    "\\dt+",
    "\\d orders",
    "\\d+ orders",
    "\\dn",
    "\\dn+",
    "\\l",
    "\\l+",
    "\\dT",
    "\\dT+ order_status",
    "\\di",
    "\\dv",
    "\\ds",
    "\\df",
    "\\dx",
    "\\du",
    "\\dp",
    "\\dd",
    '\\d "Sales".*',
    "\\dD",
    "\\dC",
    "\\do",
    "\\dconfig",
)
# where an answer changes by itself (statistics, sessions, clocks): its columns compared
VOLATILE = re.compile(
    r"pg_stat|pg_locks|pg_settings|pg_backend|pg_prepared|pg_cursors|now\(|clock|random|"
    r"pg_shmem|pg_lsn|pg_current|pg_snapshot|txid|pg_xact|pg_file|pg_ls|activity|\\dconfig",
    re.I,
)
FUNCTIONS = (
    "pg_catalog.format_type({oid}, NULL)",
    "pg_catalog.pg_get_userbyid({oid})",
    "pg_catalog.obj_description({oid}, 'pg_class')",
    "pg_catalog.col_description({oid}, 1)",
    "pg_catalog.pg_table_is_visible({oid})",
    "pg_catalog.has_table_privilege({oid}, 'SELECT')",
    "pg_catalog.pg_get_indexdef({oid})",
    "pg_catalog.pg_get_constraintdef({oid})",
    "pg_catalog.pg_get_expr(NULL, {oid})",
    "({oid})::pg_catalog.regclass::text",
    "({oid})::pg_catalog.regtype::text",
    "pg_catalog.pg_relation_size({oid})",
    "pg_catalog.has_schema_privilege({oid}, 'USAGE')",
    "pg_catalog.pg_get_viewdef({oid})",
)
# what a role asks of its own privileges (the answers differ from role to role)
PRIVILEGES = [
    "SELECT has_table_privilege('public.orders', 'SELECT'), has_any_column_privilege('public.orders', 'SELECT')",
    "SELECT attname, has_column_privilege('public.orders', attname, 'SELECT') FROM pg_attribute "
    "WHERE attrelid = 'public.orders'::regclass AND attnum > 0 ORDER BY attnum",
    "SELECT table_name, column_name, privilege_type FROM information_schema.column_privileges ORDER BY 1, 2, 3",
    "SELECT relname, relacl FROM pg_class WHERE relname = 'orders'",
    "SELECT current_user, session_user",
]

ALONE = (
    "SELECT pg_catalog.version()",
    "SELECT current_schema()",
    "SELECT current_database()",
    "SELECT current_schemas(true)",
    "SELECT * FROM pg_catalog.pg_get_keywords() LIMIT 5",
    "SELECT information_schema._pg_expandarray(ARRAY[3, 1])",
    "SELECT 'orders'::regclass::oid > 0",
    "SELECT 'public.orders'::pg_catalog.regclass",
    "SELECT 'order_status'::regtype",
    "SELECT 'sum(int4)'::regprocedure",
    "SELECT 'public'::regnamespace",
    "SELECT 'now'::regproc",
    "SELECT 'orders' OPERATOR(pg_catalog.~) '^(ord)' COLLATE pg_catalog.default",
    "SELECT pg_catalog.pg_database_size(current_database()) > 0",
    "SELECT datname FROM pg_database",
    "SELECT rolname FROM pg_roles",
    "SELECT usename FROM pg_catalog.pg_user",
    "SELECT count(*) FROM pg_stat_activity",
    "SELECT * FROM pg_catalog.pg_stat_activity",
    "SELECT d.datname FROM pg_database d JOIN pg_catalog.pg_database e ON e.oid = d.oid",
    "WITH pg_database AS (SELECT 'x' AS datname) SELECT datname FROM pg_database",
    "SELECT has_database_privilege(current_database(), 'CONNECT')",
    "SELECT pg_backend_pid() > 0",
)


def _answer(conn: psycopg.Connection[Any], query: str) -> tuple[Any, ...]:
    try:
        cur = conn.execute(query)
    except psycopg.Error as exc:
        return ("error", exc.sqlstate)
    columns = [(c.name, c.type_code) for c in cur.description or []]
    return ("rows", columns, [tuple(str(v) for v in row) for row in cur.fetchall()])


def _mutations(corpus: list[str], relations: list[str], rng: random.Random) -> list[str]:
    """Each query of `corpus` changed as a fuzzer changes it (pglast's tree, deparsed)."""
    out = []
    for text in corpus:
        for _ in range(1):
            try:
                (statement,) = parse_sql(text)
            except Exception:
                break
            select: Any = statement.stmt
            if not hasattr(select, "targetList") or select.targetList is None:
                break
            change = rng.choice(("where", "relation", "limit", "function"))
            if change == "where":
                select.whereClause = None
            elif change == "limit" and select.limitCount is None:
                (limited,) = parse_sql("SELECT 1 LIMIT 3")
                select.limitCount = limited.stmt.limitCount  # type: ignore[union-attr]
                select.limitOption = limited.stmt.limitOption  # type: ignore[union-attr]
            elif change == "relation":
                for item in select.fromClause or ():
                    if hasattr(item, "relname"):
                        item.relname = rng.choice(relations)
                        item.schemaname = "pg_catalog"
            else:
                function = rng.choice(FUNCTIONS).format(
                    oid=rng.choice(("oid", "1259", "0", "NULL::oid"))
                )
                (called,) = parse_sql(f"SELECT {function}")
                select.targetList = (*select.targetList, *called.stmt.targetList)  # type: ignore[union-attr]
            out.append(RawStream()(statement))
    return out


def test_catalog_answers_are_postgresqls_and_show_nothing_else(h: Harness) -> None:
    seed_orders(h.url, 3000)
    h.sql(
        'CREATE SCHEMA "Sales"; CREATE TYPE "Sales".pair AS (a integer, b text); '
        'CREATE TABLE "Sales"."Lines" (id bigint PRIMARY KEY, p "Sales".pair, at timestamptz NOT NULL); '
        'INSERT INTO "Sales"."Lines" SELECT g, ROW(g, \'x\'::text)::"Sales".pair, \'2020-01-01\'::timestamptz + make_interval(days => g) FROM generate_series(1, 50) g'
    )
    h.archive("--table", "orders", "--before", "2024-12-30")
    h.archive("--table", '"Sales"."Lines"', "--column", "at", "--before", "2025-01-01")
    name = definitions_database(h)
    # a fuzzed query can join catalogs without a condition: both sides stop it alike
    with serving(
        h,
        ARCHIVER_SERVE_DEFINITIONS_PASSWORD=PASSWORD,
        ARCHIVER_SERVE_STATEMENT_TIMEOUT=str(PATIENT),
    ) as served:
        admin = psycopg.conninfo.conninfo_to_dict(ADMIN_URL)
        direct = psycopg.connect(
            host=admin.get("host", "127.0.0.1"),
            port=admin.get("port", 5432),
            dbname=name,
            user=name,
            password=PASSWORD,
            autocommit=True,
            options=f"-c statement_timeout={int(TIMEOUT * 1000)}",
        )
        mine = psycopg.connect(served.dsn(), autocommit=True)
        mine.execute(f"SET statement_timeout = {int(TIMEOUT * 1000)}")
        with direct, mine:
            relations = [
                r[0]
                for r in direct.execute(
                    "SELECT relname FROM pg_class WHERE relnamespace = 'pg_catalog'::regnamespace "
                    "AND relkind IN ('r', 'v') ORDER BY 1"
                )
            ]
            views = [
                r[0]
                for r in direct.execute(
                    "SELECT table_name FROM information_schema.views WHERE table_schema = 'information_schema' ORDER BY 1"
                )
            ]
            corpus = [f"SELECT * FROM pg_catalog.{r}" for r in relations]
            corpus += [f"SELECT * FROM information_schema.{v}" for v in views]
            corpus += _psql_queries(served.dsn())
            corpus += statements.split(NPGSQL_TYPES)
            corpus += [GRAFANA[k] for k in ("version", "timescaledb", "schemas", "tables")]
            corpus += [GRAFANA["columns"].replace("%s", "'orders'")]
            corpus += list(PGJDBC) + list(SQLALCHEMY) + list(ALONE)
            asked = corpus + _mutations(corpus, relations, random.Random(68))
            assert len(asked) > 500, len(asked)
            forbidden = _forbidden(h, name)
            (version,) = mine.execute("SELECT version()").fetchone() or ("",)
            assert not (mismatched := _compared(mine, direct, asked, forbidden, name, version)), (
                mismatched[:3]
            )
            # and as a person signed in as their own role, granted two columns of orders:
            # information_schema, psql's describe commands and the drivers' catalog reads
            # answer what PostgreSQL answers that role
            person = f"catalog_reader_{name[-12:]}"
            h.sql(f"CREATE ROLE {person} LOGIN PASSWORD '{PASSWORD}'")
            try:
                h.sql(f"GRANT SELECT (id, status) ON orders TO {person}")
                mirrored = (
                    f"SELECT has_column_privilege('{person}', 'public.orders', 'id', 'SELECT')"
                )
                deadline = time.monotonic() + 10
                while not direct.execute(mirrored).fetchone()[0]:  # type: ignore[index]
                    assert time.monotonic() < deadline, "the grant mirrored"
                    time.sleep(0.2)
                theirs = psycopg.connect(
                    host=admin.get("host", "127.0.0.1"), port=admin.get("port", 5432), dbname=name,
                    user=person, password=PASSWORD, autocommit=True,
                    options=f"-c statement_timeout={int(TIMEOUT * 1000)}",
                )  # fmt: skip
                ours = psycopg.connect(served.dsn(user=person, password=PASSWORD), autocommit=True)
                ours.execute(f"SET statement_timeout = {int(TIMEOUT * 1000)}")
                with theirs, ours:
                    as_person = [f"SELECT * FROM information_schema.{v}" for v in views]
                    as_person += (
                        _psql_queries(served.dsn(user=person, password=PASSWORD))
                        + list(PGJDBC)
                        + list(SQLALCHEMY)
                    )
                    as_person += PRIVILEGES
                    assert not (
                        mismatched := _compared(ours, theirs, as_person, forbidden, name, version)
                    ), mismatched[:3]
            finally:
                h.sql(f"DROP OWNED BY {person}")
                sql(with_database(ADMIN_URL, name), f"DROP OWNED BY {person}")
                h.sql(f"DROP ROLE {person}")
        still = served.psql("SELECT count(*) FROM orders")
        assert still.returncode == 0 and int(still.stdout) > 0, still.stderr
    assert "Traceback" not in served.log.read_text()


def _compared(
    mine: psycopg.Connection[Any],
    direct: psycopg.Connection[Any],
    asked: list[str],
    forbidden: Forbidden,
    name: str,
    version: str,
) -> list[tuple[str, Any, Any]]:
    """The queries whose answer through serve (`mine`) differs from the definitions
    database's own (`direct`), as the same role."""
    mismatched = []
    for query in asked:
        ours = _answer(mine, query)
        _no_leak(ours, forbidden, name, query)
        first = _answer(direct, narrowed(query, version))
        if (ours == TIMED_OUT) != (first == TIMED_OUT):
            # near the timeout on a busy machine: both asked again, more patiently
            for conn in (mine, direct):
                conn.execute(f"SET statement_timeout = {int(PATIENT * 1000)}")
            ours = _answer(mine, query)
            _no_leak(ours, forbidden, name, query)
            first = _answer(direct, narrowed(query, version))
            for conn in (mine, direct):
                conn.execute(f"SET statement_timeout = {int(TIMEOUT * 1000)}")
        if ours == first:
            continue
        again = _answer(direct, narrowed(query, version))  # does its answer move by itself?
        if first != again or VOLATILE.search(query):  # compare what does not move
            ours, first = ours[:2], first[:2]
        if ours != first:
            mismatched.append((query, ours, first))
    return mismatched


def _psql_queries(dsn: str) -> list[str]:
    """The queries psql sends for its describe commands (its own echo of them)."""
    args = ["psql", "-X", "-E", "--pset", "pager=off", dsn]
    for command in PSQL:
        args += ["-c", command]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    found = re.findall(r"\*{9} QUERY \*{10}\n(.*?)\n\*{26}", done.stdout, re.S)
    assert len(found) >= len(PSQL), done.stdout[:3000]
    return [q.strip().rstrip(";") for q in found]


@dataclass(frozen=True)
class Forbidden:
    """What no answer may hold: these names as a value, and those of more than 8
    characters anywhere in one (one pattern: the cluster holds every test's roles, and
    asking each name of each value apart was most of this test's own CPU)."""

    names: frozenset[str]
    inside: re.Pattern[str]

    @classmethod
    def of(cls, names: set[str]) -> Forbidden:
        long = sorted((n for n in names if len(n) > 8), key=len, reverse=True)
        pattern = "|".join(map(re.escape, long)) or "(?!)"  # (?!): never found
        return cls(frozenset(names), re.compile(pattern))


def _forbidden(h: Harness, definitions: str) -> Forbidden:
    """What no answer may hold: the queue database's relations that are not archived
    tables (nor their keys), its name, the server's other databases and roles."""
    theirs = {
        str(r[0])
        for r in sql(
            h.url, "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace"
        )
    }
    served = {"orders", "orders_pkey", "Lines", "Lines_pkey"}
    databases = {str(r[0]) for r in sql(ADMIN_URL, "SELECT datname FROM pg_database")}
    roles = {str(r[0]) for r in sql(ADMIN_URL, "SELECT rolname FROM pg_roles WHERE oid >= 16384")}
    # the server's own owner of its catalogs (often also a database's name) is PostgreSQL's to show
    system = {str(r[0]) for r in sql(ADMIN_URL, "SELECT rolname FROM pg_roles WHERE oid = 10")}
    return Forbidden.of(((theirs - served) | databases | roles) - system - {definitions})


def _no_leak(answer: tuple[Any, ...], forbidden: Forbidden, definitions: str, query: str) -> None:
    if answer[0] != "rows":
        return
    for row in answer[2]:
        for value in row:
            assert value not in forbidden.names, (query, value)
            text = value.replace(definitions, "")  # which holds the queue database's name
            if found := forbidden.inside.search(text):
                raise AssertionError((query, found.group(), value[:200]))
