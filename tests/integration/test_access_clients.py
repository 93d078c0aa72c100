"""Governed access through the application's own database and the clients people use:
`archive.orders_all` after `archiver attach` carrying the live table's grants, pgjdbc,
SQLAlchemy and psql as each person of a team, and the console's page of reads."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from archiver.testing.reference import seed_orders
from tests.support import ROOT
from tests.support.access import (
    JDBC,
    PASSWORD,
    ROWS,
    Team,
    allowed,
    connect,
    eventually,
    people,
    refused,
)
from tests.support.console import Console
from tests.support.harness import Harness
from tests.support.serve import attach, serving


def test_attach_keeps_the_live_tables_grants(h: Harness, team: Team) -> None:
    seed_orders(h.url, ROWS)
    h.archive("--table", "orders", "--before", "2024-12-31")
    analyst, support, outsider, auditor = (
        team.role(who, "LOGIN") for who in ("analyst", "support", "outsider", "auditor")
    )
    member = team.role("member", "LOGIN IN ROLE", team.role("readers"))
    h.sql(f"GRANT SELECT ON orders TO {analyst}, {team.name('readers')}")
    h.sql(f"GRANT SELECT (id, customer, status, created_at) ON orders TO {support}")
    with serving(h) as served:
        attach(h, served, "orders", "--grant", auditor)  # archive-only: archive.orders alone

        def as_(who: str) -> psycopg.Connection[Any]:
            return psycopg.connect(h.url, user=who, autocommit=True)

        with as_(member) as conn:
            assert conn.execute("SELECT count(*) FROM archive.orders_all").fetchone() == (ROWS,)
        with as_(auditor) as conn:
            archived = h.value("SELECT sum(row_count) FROM archive_files")
            assert conn.execute("SELECT count(*) FROM archive.orders").fetchone() == (archived,)
            said = refused(conn, "SELECT count(*) FROM archive.orders_all")
            assert said == "permission denied for view orders_all"  # it holds live rows too
            assert (
                refused(conn, "SELECT count(*) FROM orders") == "permission denied for table orders"
            )
        with as_(analyst) as conn:
            assert conn.execute("SELECT count(*) FROM archive.orders_all").fetchone() == (ROWS,)
            assert conn.execute("SELECT count(*) FROM archive.orders").fetchone()[0] > 0  # type: ignore[index]
        with as_(support) as conn:
            got = conn.execute("SELECT count(id), count(status) FROM archive.orders_all").fetchone()
            assert got is not None and got[0] == ROWS
            denied = "permission denied for view orders_all"
            assert refused(conn, "SELECT sum(total) FROM archive.orders_all") == denied
            assert refused(conn, "SELECT * FROM archive.orders_all") == denied
            assert (
                refused(conn, "SELECT note FROM archive.orders")
                == "permission denied for foreign table orders"
            )
        with as_(outsider) as conn:  # nothing granted, not even the schema: PostgreSQL's answer
            said = refused(conn, "SELECT count(*) FROM archive.orders_all")
            assert said == "permission denied for schema archive"
        # a REVOKE on the live table reaches the view by itself
        with as_(analyst) as conn:
            h.sql(f"REVOKE SELECT ON orders FROM {analyst}")
            eventually(
                lambda: not allowed(conn, "SELECT count(*) FROM archive.orders_all"), "the REVOKE"
            )
        # serve's audit knows on whose behalf the application's database read
        eventually(
            lambda: bool(
                h.value("SELECT count(*) FROM archive_reads WHERE on_behalf_of = $1", support)
            ),
            "the reads on behalf of support",
        )


def test_the_console_shows_recent_reads_refusals_first(h: Harness, team: Team) -> None:
    seed_orders(h.url, ROWS)
    h.archive("--table", "orders", "--before", "2024-12-31")
    support = team.role("support", f"LOGIN PASSWORD '{PASSWORD}'")
    h.sql(f"GRANT SELECT (id) ON orders TO {support}")
    with serving(h) as served, connect(served, support) as conn:
        conn.execute("SELECT count(id) FROM orders").fetchone()
        refused(conn, "SELECT total FROM orders")
        eventually(
            lambda: h.value("SELECT count(*) FROM archive_reads WHERE role = $1", support) == 2,
            "two reads",
        )
    console = Console(h, h.tmp)
    try:
        status, page = console.get(f"/reads?role={support}&table=orders")
        assert status == 200
        assert "SELECT count(id) FROM orders" in page, page[page.index("<tbody>") :][:3000]
        refusal, read = (
            page.index("SELECT total FROM orders"),
            page.index("SELECT count(id) FROM orders"),
        )
        assert refusal < read and "42501" in page
        status, page = console.get("/reads?role=nobody")
        assert status == 200 and "no reads recorded" in page
    finally:
        console.stop()


def test_pgjdbc_sqlalchemy_and_psql_read_as_each_person(
    h: Harness, team: Team, tmp_path: Path
) -> None:
    """The team, each through pgjdbc, SQLAlchemy and psql: what PostgreSQL would let them
    read of the live table, refused in PostgreSQL's words otherwise, each in the audit."""
    seed_orders(h.url, ROWS)
    h.archive("--table", "orders", "--before", "2024-12-31")
    archived = h.value("SELECT sum(row_count) FROM archive_files")
    login = f"LOGIN PASSWORD '{PASSWORD}'"
    them = people(team, "id, status")
    analyst, support, outsider, member = them.analyst, them.support, them.outsider, them.member
    locked, expired = them.locked, them.expired
    auditor = team.role("auditor", login)
    granted = h.cli(
        "access",
        "grant",
        "--table",
        "orders",
        "--role",
        auditor,
        "--column",
        "id",
        "--column",
        "status",
    )
    assert granted.returncode == 0, granted.stderr
    asked = ("SELECT id, status FROM orders", "SELECT id, total FROM orders WHERE id > 0")
    denied = "permission denied for table orders"
    reads = [("ok", archived), ("ok", archived)]
    some = [("ok", archived), ("refused", "42501")]
    expected: dict[str, Any] = {
        analyst: reads, member: reads, support: some, auditor: some,
        outsider: [("refused", "42501"), ("refused", "42501")],
        locked: ("28000", f'role "{locked}" is not permitted to log in'),
        expired: ("28P01", f'password authentication failed for user "{expired}"'),
    }  # fmt: skip
    with serving(h) as served:
        assert JDBC.exists(), "make test installs Debian's libpostgresql-jdbc-java"
        program = ROOT / "tests" / "clients" / "AccessClient.java"
        compiled = subprocess.run(["javac", "-cp", str(JDBC), "-d", str(tmp_path), str(program)],
                                  capture_output=True, text=True, timeout=300)  # fmt: skip
        assert compiled.returncode == 0, compiled.stderr
        python = ROOT / "dev" / "clients-venv" / "bin" / "python"
        for who, want in expected.items():
            jdbc = subprocess.run(
                ["java", "-cp", f"{JDBC}:{tmp_path}", "AccessClient",
                 f"jdbc:postgresql://127.0.0.1:{served.port}/archive", who, PASSWORD, *asked],
                capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert jdbc.returncode == 0, jdbc.stderr
            lines = [line.split("\t") for line in jdbc.stdout.splitlines()]
            url = f"postgresql://{who}:{PASSWORD}@127.0.0.1:{served.port}/archive?sslmode=disable"
            done = subprocess.run([str(python), str(ROOT / "tests" / "clients" / "access_sqlalchemy.py"),
                                   url, *asked], capture_output=True, text=True, timeout=300)  # fmt: skip
            assert done.returncode == 0, done.stderr
            said = json.loads(done.stdout)
            psql = [served.psql(q, user=who, password=PASSWORD) for q in asked]
            if isinstance(want, tuple):  # refused at sign-in, in PostgreSQL's words
                assert lines == [["signin", *want]], (who, lines)
                # psycopg's connection errors carry no SQLSTATE (libpq gives it none): the line
                assert want[1] in said["signin"][1], said
                assert all(p.returncode != 0 and want[1] in p.stderr for p in psql), psql
                continue
            assert lines[0] == ["tables", "1"]  # getTables lists it, as PostgreSQL's catalogs do
            got = [(line[0], int(line[1]) if line[0] == "ok" else line[1]) for line in lines[1:]]
            assert got == want, (who, lines)
            assert all(line[2] == denied for line in lines[1:] if line[0] == "refused"), lines
            assert said["tables"] == ["orders"]
            assert [tuple(s[:2]) for s in said["statements"]] == want, (who, said)
            assert all(denied in s[2] for s in said["statements"] if s[0] == "refused"), said
            for p, (outcome, rows) in zip(psql, want, strict=True):
                if outcome == "ok":
                    assert p.returncode == 0 and len(p.stdout.splitlines()) == rows, p.stderr
                else:
                    assert p.returncode != 0 and denied in p.stderr, p.stderr

        # every read and every refusal, of every client, in the audit
        def outcomes(who: str) -> list[str]:
            return [r[0] for r in h.sql("SELECT outcome FROM archive_reads WHERE role = $1", who)]

        def recorded(who: str, outcome: str, count: int) -> Callable[[], bool]:
            return lambda: outcomes(who).count(outcome) >= count

        for who, want in expected.items():
            if isinstance(want, tuple):  # pgjdbc's, SQLAlchemy's and psql's two sign-ins
                eventually(recorded(who, want[0], 4), f"{who}'s refused sign-ins")
            else:  # each client's two statements
                refusals = 3 * sum(1 for outcome, _ in want if outcome == "refused")
                eventually(recorded(who, "ok", 6 - refusals), f"{who}'s reads")
                assert outcomes(who).count("42501") == refusals, (who, outcomes(who))
