"""Governed access through `archiver serve`: people shaped like a real team sign in as their
own roles of the catalog's server, with their own passwords, and read of the archive what
PostgreSQL's grants on the live table let them read -- PostgreSQL's own check, in their
own session, kept in step with a GRANT or REVOKE on the live table."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import psycopg
import pytest

from archiver.config import Settings
from archiver.context import Context
from archiver.maintenance.duty import Shared
from archiver.maintenance.prune import Pruner
from archiver.store.queue import PgQueue
from archiver.testing.reference import seed_orders
from tests.support.access import (
    PASSWORD,
    ROWS,
    Team,
    allowed,
    connect,
    eventually,
    people,
    refused,
    sign_in_error,
)
from tests.support.harness import Harness
from tests.support.serve import serving


def test_each_person_reads_what_the_live_grants_allow(h: Harness, team: Team) -> None:
    seed_orders(h.url, ROWS)
    h.archive("--table", "orders", "--before", "2024-12-31")
    archived = h.value("SELECT sum(row_count) FROM archive_files")
    assert 0 < archived < ROWS
    them = people(team, "id, customer, status, created_at")
    analyst, support, outsider = them.analyst, them.support, them.outsider
    member, locked, expired = them.member, them.locked, them.expired

    with serving(h) as served:
        # the whole table: its own grant, or its group's
        for who in (analyst, member):
            with connect(served, who) as conn:
                assert conn.execute("SELECT count(*) FROM orders").fetchone() == (archived,)
                key = conn.execute("SELECT id, total FROM orders WHERE id = %s", (ROWS,))
                assert key.fetchone()[0] == ROWS  # type: ignore[index]
                assert conn.execute("SELECT current_user").fetchone() == (who,)

        # four columns: those, and nothing that names another, wherever it is named
        with connect(served, support) as conn:
            rows = conn.execute("SELECT id, status FROM orders ORDER BY id").fetchall()
            assert len(rows) == archived
            denied = "permission denied for table orders"
            assert refused(conn, "SELECT total FROM orders") == denied
            assert refused(conn, "SELECT * FROM orders") == denied
            assert refused(conn, "SELECT id FROM orders WHERE total > %s", 0) == denied
            assert refused(conn, "SELECT id FROM orders ORDER BY note") == denied
            assert refused(conn, "SELECT (SELECT max(total) FROM orders)") == denied
            assert (
                refused(conn, "WITH t AS (SELECT note FROM orders) SELECT count(*) FROM t")
                == denied
            )
            # the catalogs answer as PostgreSQL answers them
            got = conn.execute(
                "SELECT has_column_privilege('orders', 'id', 'SELECT'), "
                "has_column_privilege('orders', 'total', 'SELECT'), "
                "has_table_privilege('orders', 'SELECT')"
            ).fetchone()
            assert got == (True, False, False)

        # nothing granted: the catalogs still read, the table refused
        with connect(served, outsider) as conn:
            assert (
                refused(conn, "SELECT count(*) FROM orders") == "permission denied for table orders"
            )
            listed = conn.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = 'orders'"
            ).fetchone()
            assert listed == (0,)  # information_schema shows what the role may use
        with connect(served, analyst) as conn:
            listed = conn.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = 'orders'"
            ).fetchone()
            assert listed == (1,)

        # refused at sign-in as PostgreSQL refuses: one line, the same whether the role
        # exists or not, expired or not, for a wrong password
        nobody = sign_in_error(served, f"nobody_{team.tag}")
        assert nobody == f'password authentication failed for user "nobody_{team.tag}"'
        assert (
            sign_in_error(served, expired) == f'password authentication failed for user "{expired}"'
        )
        wrong = sign_in_error(served, analyst, "not-the-password")
        assert wrong == f'password authentication failed for user "{analyst}"'
        assert sign_in_error(served, locked) == f'role "{locked}" is not permitted to log in'
        # the configured user reads as before
        with psycopg.connect(served.dsn()) as conn:
            assert conn.execute("SELECT count(*) FROM orders").fetchone() == (archived,)

        # psql, as a person
        done = served.psql("SELECT sum(total) FROM orders", user=support, password=PASSWORD)
        assert done.returncode != 0 and "permission denied for table orders" in done.stderr
        # a count reads no column: PostgreSQL lets a role granted any column count rows
        done = served.psql("SELECT count(*) FROM orders", user=support, password=PASSWORD)
        assert done.returncode == 0 and done.stdout.strip() == str(archived), done.stderr

        # every read and every refusal, in SQL, and a JSON line each in serve's log
        def audited(role: str, outcome: str) -> list[Any]:
            return h.sql(
                "SELECT statement, tables, columns, rows, address, application FROM archive_reads "
                "WHERE role = $1 AND outcome = $2 ORDER BY at",
                role,
                outcome,
            )

        eventually(lambda: bool(audited(locked, "28000")), "the reads in archive_reads")
        count = [
            r for r in audited(analyst, "ok") if r["statement"] == "SELECT count(*) FROM orders"
        ]
        assert count and count[0]["tables"] == ["public.orders"] and count[0]["rows"] == 1
        assert count[0]["address"] == "127.0.0.1"
        lookup = next(r for r in audited(analyst, "ok") if "WHERE id" in r["statement"])
        assert lookup["columns"] == ["public.orders.id", "public.orders.total"]
        assert "3000" not in lookup["statement"]  # parameters left out unless asked for
        eventually(lambda: len(audited(support, "42501")) == 7, "six refusals, and psql's")
        assert [r["statement"] for r in audited(f"nobody_{team.tag}", "28P01")] == [None]
        assert len(audited(expired, "28P01")) == 1 and len(audited(analyst, "28P01")) == 1
        assert audited("archiver", "ok")[0]["tables"] == ["public.orders"]
        assert audited(support, "42501")[-1]["application"] == "psql"
        said = served.log.read_text()
        assert PASSWORD not in said
        assert '"outcome": "42501"' in said and f'"role": "{support}"' in said


def test_the_auth_function_is_printed_for_an_administrator(h: Harness) -> None:
    printed = h.cli("serve", "--auth-sql")
    assert printed.returncode == 0, printed.stderr
    assert "SECURITY DEFINER" in printed.stdout and "pg_authid" in printed.stdout
    h.sql(printed.stdout)  # as an administrator runs it, again and again
    h.sql(printed.stdout)
    assert (
        h.value(
            "SELECT has_function_privilege('public', 'archiver_auth.role_secret(text)', 'EXECUTE')"
        )
        is False
    )


def test_a_grant_or_revoke_on_the_live_table_is_in_force_within_seconds(
    h: Harness, team: Team
) -> None:
    seed_orders(h.url, ROWS)
    h.archive("--table", "orders", "--before", "2024-12-31")
    login = f"LOGIN PASSWORD '{PASSWORD}'"
    analyst = team.role("analyst", login)
    outsider = team.role("outsider", login)
    owner = team.role("owner", login)
    bypass = team.role("bypass", login, "BYPASSRLS")
    h.sql(f"GRANT SELECT ON orders TO {analyst}, {bypass}")
    database = h.url.rsplit("/", 1)[1]
    with serving(h) as served, connect(served, analyst) as conn:
        count = "SELECT count(*) FROM orders"
        assert allowed(conn, count)
        h.sql(f"REVOKE SELECT ON orders FROM {analyst}")
        eventually(lambda: not allowed(conn, count), "the REVOKE in force")
        h.sql(f"GRANT SELECT (id) ON orders TO {analyst}")
        eventually(lambda: allowed(conn, "SELECT count(id) FROM orders"), "a column GRANT")
        assert not allowed(conn, "SELECT count(total) FROM orders")
        h.sql(f"GRANT SELECT ON orders TO {analyst}")
        eventually(lambda: allowed(conn, count), "the GRANT in force")

        # row security on the live table: refused in one line naming it, the owner and
        # BYPASSRLS read
        h.sql(f"ALTER TABLE orders OWNER TO {owner}")
        h.sql("ALTER TABLE orders ENABLE ROW LEVEL SECURITY")

        def row_security_refused() -> bool:
            try:
                conn.execute(count)
                return False
            except psycopg.errors.InsufficientPrivilege as exc:
                assert "row security" in str(exc), exc
                return True

        eventually(row_security_refused, "row security refused")
        for who in (owner, bypass):
            with connect(served, who) as other:
                assert allowed(other, count), who
        h.sql("ALTER TABLE orders FORCE ROW LEVEL SECURITY")
        with connect(served, owner) as other:
            eventually(lambda: not allowed(other, count), "forced row security")

        # CONNECT on the application's database: the definitions database follows it
        h.sql(f'REVOKE CONNECT ON DATABASE "{database}" FROM PUBLIC')
        h.sql(f'GRANT CONNECT ON DATABASE "{database}" TO {analyst}')

        def outsider_refused() -> bool:
            try:
                connect(served, outsider).close()
                return False
            except psycopg.OperationalError as exc:
                return "permission denied for database" in str(exc)

        eventually(outsider_refused, "CONNECT revoked")
        connect(served, analyst).close()


def test_an_auditor_reads_the_archive_alone_and_bad_access_input_changes_nothing(
    h: Harness, team: Team
) -> None:
    seed_orders(h.url, ROWS)
    h.archive("--table", "orders", "--before", "2024-12-31")
    auditor = team.role("auditor", f"LOGIN PASSWORD '{PASSWORD}'")
    database = h.url.rsplit("/", 1)[1]
    h.sql(f'REVOKE CONNECT ON DATABASE "{database}" FROM PUBLIC')  # nor the live database
    for args, said in (
        (("--table", "nope", "--role", auditor), "nope is not one archived or live table"),
        (
            ("--table", "orders", "--role", f"ghost_{team.tag}"),
            f"role ghost_{team.tag} does not exist",
        ),
        (("--table", "orders", "--role", auditor, "--column", "nope"), "has no column nope"),
        (("--table", "orders"), "give --table and --role"),
    ):
        done = h.cli("access", "grant", *args)
        assert (
            done.returncode != 0 and said in done.stderr and len(done.stderr.splitlines()) == 1
        ), done.stderr
    assert h.value("SELECT count(*) FROM archive_access") == 0
    done = h.cli(
        "access",
        "grant",
        "--table",
        "orders",
        "--role",
        auditor,
        "--column",
        "id",
        "--column",
        "total",
    )
    assert done.returncode == 0, done.stderr
    listed = h.cli("access", "list").stdout
    assert f"public.orders\t{auditor}\tid, total" in listed
    with serving(h) as served:
        conn = connect(served, auditor)
        assert conn.execute("SELECT count(id), sum(total) FROM orders").fetchone()[0] > 0  # type: ignore[index]
        assert refused(conn, "SELECT note FROM orders") == "permission denied for table orders"
        h.sql(f"REVOKE ALL ON orders FROM {auditor}")  # the live table's grants: none, still
        time.sleep(3)  # a pass of the mirror or more
        assert allowed(conn, "SELECT count(total) FROM orders")
        assert h.cli("access", "revoke", "--table", "orders", "--role", auditor).returncode == 0
        eventually(lambda: not allowed(conn, "SELECT count(total) FROM orders"), "access revoked")
        conn.close()
    # and the live database was never theirs
    with pytest.raises(psycopg.OperationalError, match="CONNECT privilege"):
        psycopg.connect(h.url, user=auditor, password=PASSWORD)


def test_the_pruner_keeps_reads_for_the_retention(h: Harness) -> None:
    """Reads past ARCHIVER_RETENTION_DAYS go with the pruner's pass, in batches; the
    newer ones stay."""
    h.sql(
        "INSERT INTO archiver_reads (at, door, role, outcome) "
        "SELECT now() - make_interval(days => d), 'serve', 'someone', 'ok' "
        "FROM generate_series(1, 40) d"
    )

    async def prune() -> None:
        pool = await asyncpg.create_pool(h.url, min_size=1, max_size=2)
        try:
            settings = Settings.from_env({**h.env, "ARCHIVER_RETENTION_DAYS": "30"})
            ctx = Context(settings)
            ctx.pool = pool
            await Pruner(Shared(ctx, PgQueue(pool), lambda: None)).run()
        finally:
            await pool.close()

    asyncio.run(prune())
    kept = h.sql("SELECT min(at), max(at), count(*) FROM archive_reads")[0]
    assert kept["count"] == 29  # 1 .. 29 days old; 30 days old and older gone
