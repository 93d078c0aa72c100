"""Least privilege, really used: a worker logged in as a role given exactly what
`archiver grants` prints moves rows, and that role can touch nothing else."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from archiver.testing.reference import seed_orders
from tests.support import assert_refused, run_cli, sql, sql_value, start_worker


def as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))


@pytest.fixture
def role(database_url: str) -> Iterator[str]:
    name = f"archiver_worker_{uuid.uuid4().hex[:8]}"
    sql(database_url, f'CREATE ROLE "{name}" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE')
    yield name
    sql(database_url, f'DROP OWNED BY "{name}"')
    sql(database_url, f'DROP ROLE "{name}"')


def test_a_worker_runs_with_only_the_printed_grants(
    env: dict[str, str], database_url: str, role: str
) -> None:
    seed_orders(database_url, 3_000)
    sql(database_url, "CREATE TABLE secrets (id int PRIMARY KEY, created_at date)")
    printed = run_cli(env, "grants", "--role", role, "--table", "orders")
    assert printed.returncode == 0, printed.stderr
    script = printed.stdout
    assert '"public"."orders"' in script and "secrets" not in script
    assert "SUPERUSER" not in script.upper() and "ALL PRIVILEGES" not in script.upper()
    sql(database_url, script)  # as the owner, the way an operator applies it

    worker_env = {**env, "ARCHIVER_DATABASE_URL": as_role(database_url, role)}
    job = run_cli(worker_env, "enqueue", "--table", "orders", "--before", "2024-12-31")
    assert job.returncode == 0, job.stderr
    assert start_worker(worker_env, "--burst").wait(60) == 0
    row = sql(database_url, "SELECT status, last_error FROM background_jobs")[0]
    assert row["status"] == "completed", row["last_error"]
    assert (
        sql_value(database_url, "SELECT count(*) FROM orders WHERE created_at < '2024-12-31'") == 0
    )
    for command in (
        ["status"],
        ["jobs"],
        ["pause", "--table", "orders"],
        ["resume", "--table", "orders"],
    ):
        result = run_cli(worker_env, *command)
        assert result.returncode == 0, (command, result.stderr)

    async def denied() -> list[str]:
        conn = await asyncpg.connect(as_role(database_url, role))
        refused = []
        try:
            for statement in (
                "SELECT * FROM secrets",
                "UPDATE orders SET status = 'paid'",
                "CREATE TABLE public.mine (i int)",
                "DROP TABLE background_jobs",
            ):
                try:
                    await conn.execute(statement)
                except asyncpg.InsufficientPrivilegeError:
                    refused.append(statement)
        finally:
            await conn.close()
        return refused

    assert len(asyncio.run(denied())) == 4


def test_grants_refuses_bad_input(env: dict[str, str], database_url: str) -> None:
    for args, needle in (
        (["grants", "--role", "w", "--table", "nope"], "table nope not found"),
        (["grants", "--role", " "], "--role"),
    ):
        result = run_cli(env, *args)
        assert_refused(result, needle, code=1)


def test_a_role_that_does_not_own_a_partitioned_table_moves_its_rows(
    env: dict[str, str], database_url: str, role: str
) -> None:
    from tests.support.events_by_month import CUTOFF, seed

    seed(database_url, per_month=5)
    printed = run_cli(env, "grants", "--role", role, "--table", "events")
    assert printed.returncode == 0, printed.stderr
    assert "the table's owner" in printed.stdout
    worker_env = {**env, "ARCHIVER_DATABASE_URL": as_role(database_url, role)}
    enqueue = ["enqueue", "--table", "events", "--before", CUTOFF]
    ungranted = run_cli(worker_env, *enqueue, "--dry-run")  # found in a trial: a traceback
    assert_refused(ungranted, "database error:", "permission denied for table events", code=1)
    sql(database_url, printed.stdout)
    refused = run_cli(worker_env, *enqueue, "--partitions", "drop")
    assert refused.returncode == 1 and "only the owner of public.events" in refused.stderr
    job = run_cli(worker_env, *enqueue)  # auto: by rows, since it cannot drop
    assert job.returncode == 0 and len(job.stdout.split()) == 1, job.stderr
    assert start_worker(worker_env, "--burst").wait(60) == 0
    row = sql(database_url, "SELECT status, last_error FROM background_jobs")[0]
    assert row["status"] == "completed", row["last_error"]
    assert (
        sql_value(database_url, f"SELECT count(*) FROM events WHERE created_at < '{CUTOFF}'") == 0
    )
    assert sql_value(database_url, "SELECT count(*) FROM pg_class WHERE relname = 'events_2023_01'")


def test_children_and_their_triggers_are_granted(
    env: dict[str, str], database_url: str, role: str, tmp_path: Path
) -> None:
    """A table referenced by foreign keys moves with its children or not at all: its
    grants cover the children, doctor checks them for a --with-children policy, and the
    DELETE triggers that run as the role are named (a SECURITY DEFINER one is not)."""
    sql(
        database_url,
        """
        CREATE TABLE orders (id bigint PRIMARY KEY, created_at date NOT NULL);
        CREATE TABLE items (order_id bigint REFERENCES orders ON DELETE CASCADE, n int,
            PRIMARY KEY (order_id, n));
        CREATE TABLE item_notes (order_id bigint, n int, note text, PRIMARY KEY (order_id, n),
            FOREIGN KEY (order_id, n) REFERENCES items ON DELETE CASCADE);
        CREATE TABLE item_log (order_id bigint, n int);
        CREATE FUNCTION log_item() RETURNS trigger LANGUAGE plpgsql
            AS $$BEGIN INSERT INTO item_log VALUES (OLD.order_id, OLD.n); RETURN NULL; END$$;
        CREATE TRIGGER logged AFTER DELETE ON items FOR EACH ROW EXECUTE FUNCTION log_item();
        CREATE FUNCTION as_owner() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
            AS $$BEGIN RETURN NULL; END$$;
        CREATE TRIGGER owned AFTER DELETE ON orders FOR EACH ROW EXECUTE FUNCTION as_owner();
        INSERT INTO orders SELECT i, DATE '2023-01-01' + i FROM generate_series(1, 400) i;
        INSERT INTO items SELECT i, k FROM generate_series(1, 400) i, generate_series(1, 3) k;
        """,
    )
    policy = '[[policy]]\nname = "orders"\ntable = "orders"\nolder_than = "30 days"\n'
    policy += 'schedule = "0 2 * * *"\n'
    copy = tmp_path / "copy.toml"
    copy.write_text(policy + 'mode = "copy"\n')
    printed = run_cli(env, "grants", "--role", role, "--config", str(copy))
    assert printed.returncode == 0, printed.stderr
    assert "items" not in printed.stdout and "logged" not in printed.stdout  # no children

    config = tmp_path / "archiver.toml"
    config.write_text(policy + "with_children = true\n")
    printed = run_cli(env, "grants", "--role", role, "--config", str(config))
    assert printed.returncode == 0, printed.stderr
    script = printed.stdout
    assert "-- public.items: moved with public.orders (--with-children)" in script
    assert "-- public.item_notes: moved with public.orders (--with-children)" in script
    assert f'GRANT SELECT, DELETE ON "public"."items" TO "{role}"' in script
    assert f'GRANT UPDATE ("order_id", "n") ON "public"."items" TO "{role}"' in script
    assert "--   public.items: logged runs log_item()" in script
    assert ": owned runs" not in script and "item_log" not in script

    worker_env = {**env, "ARCHIVER_DATABASE_URL": as_role(database_url, role)}
    parent_only = "\n".join(line for line in script.splitlines() if '"items"' not in line)
    sql(database_url, parent_only)
    doctor = run_cli(worker_env, "doctor", "--config", str(config))
    assert doctor.returncode == 1
    failed = [line for line in doctor.stdout.splitlines() if line.startswith("FAIL")]
    assert failed == [
        "FAIL  privileges on public.items: missing SELECT, DELETE, UPDATE on its key (row locks)"
        " for move (see `archiver grants`)"
    ], doctor.stdout

    sql(database_url, script)  # as the owner
    enqueue = ["enqueue", "--table", "orders", "--before", "2024-01-01", "--with-children"]
    assert run_cli(worker_env, *enqueue, "--max-attempts", "1").returncode == 0
    assert start_worker(worker_env, "--burst").wait(60) == 0
    failed_job = sql(database_url, "SELECT status, last_error FROM background_jobs")[0]
    assert failed_job["status"] == "failed", failed_job["last_error"]
    assert "permission denied for table item_log" in failed_job["last_error"]
    assert failed_job["last_error"].endswith(  # the trigger's, not archiver's own statement
        "(raised in PL/pgSQL function log_item() line 1 at SQL statement)"
    ), failed_job["last_error"]

    sql(database_url, f'GRANT INSERT ON item_log TO "{role}"')  # what the comment asks for
    assert run_cli(worker_env, "doctor", "--config", str(config)).returncode == 0
    job = run_cli(worker_env, *enqueue)
    assert job.returncode == 0, job.stderr
    assert start_worker(worker_env, "--burst").wait(60) == 0
    row = sql(database_url, "SELECT status, last_error, attempts FROM background_jobs "
                            "WHERE id = $1::uuid", job.stdout.strip())[0]  # fmt: skip
    assert (row["status"], row["attempts"]) == ("completed", 1), row["last_error"]
    assert sql_value(database_url, "SELECT count(*) FROM items") == 3 * (400 - 364)
    assert sql_value(database_url, "SELECT count(*) FROM item_log") == 3 * 364


def test_a_citext_key_off_the_search_path_gets_usage_on_its_schema(
    env: dict[str, str], database_url: str, role: str, tmp_path: Path
) -> None:
    """archiver casts to citext and compares with its operators by schema, which needs
    USAGE on that schema: the script grants it, doctor names it when it is missing, and
    the role moves a citext-keyed table with children that reference it in another case."""
    sql(
        database_url,
        """
        CREATE SCHEMA ext; CREATE EXTENSION citext SCHEMA ext;
        CREATE TABLE users (email ext.citext PRIMARY KEY, created_at date NOT NULL);
        CREATE TABLE logins (id int PRIMARY KEY,
            email ext.citext NOT NULL REFERENCES users ON DELETE CASCADE);
        INSERT INTO users SELECT 'User' || i || '@Example.com', DATE '2023-01-01' + i
            FROM generate_series(1, 400) i;
        INSERT INTO logins SELECT row_number() OVER (), lower(email::text) FROM users;
        """,
    )
    config = tmp_path / "archiver.toml"
    config.write_text(
        '[[policy]]\nname = "users"\ntable = "users"\nolder_than = "30 days"\n'
        'schedule = "0 2 * * *"\nwith_children = true\n'
    )
    printed = run_cli(env, "grants", "--role", role, "--config", str(config))
    assert printed.returncode == 0, printed.stderr
    usage = f'GRANT USAGE ON SCHEMA "ext" TO "{role}";'
    assert printed.stdout.count(usage) == 1, printed.stdout
    sql(database_url, "\n".join(x for x in printed.stdout.splitlines() if usage not in x))
    worker_env = {**env, "ARCHIVER_DATABASE_URL": as_role(database_url, role)}
    doctor = run_cli(worker_env, "doctor", "--config", str(config))
    failed = [line for line in doctor.stdout.splitlines() if line.startswith("FAIL")]
    assert doctor.returncode == 1 and len(failed) == 2, doctor.stdout  # users and logins
    assert all("USAGE on schema ext" in line for line in failed), failed

    sql(database_url, printed.stdout)
    assert run_cli(worker_env, "doctor", "--config", str(config)).returncode == 0
    enqueue = ["enqueue", "--table", "users", "--before", "2024-01-01", "--with-children"]
    assert run_cli(worker_env, *enqueue, "--chunk-rows", "100").returncode == 0
    assert start_worker(worker_env, "--burst").wait(60) == 0
    row = sql(database_url, "SELECT status, last_error FROM background_jobs")[0]
    assert row["status"] == "completed", row["last_error"]
    archived = "SELECT sum(row_count) FROM archive_files WHERE source_table = $1"
    assert sql_value(database_url, archived, "public.users") == 364
    assert sql_value(database_url, archived, "public.logins") == 364  # every child, not 0
