"""Keys users have: text in a collation whose order is not the bytes' (ICU), composite
keys, numeric keys, and a unique index standing in for a missing primary key. Each chunk's
key range and the resume point come from PostgreSQL's order: checked against PostgreSQL
itself, through a SIGKILL and resume, with every row archived exactly once."""

from __future__ import annotations

import signal
from collections import Counter
from typing import Any

import pytest

from archiver.testing.services import Azurite
from tests.support import (
    assert_refused,
    enqueued,
    fast_env,
    kill_at_failpoint,
    run_cli,
    sql,
    start_worker,
)
from tests.support.archive import rows_in_blobs
from tests.support.harness import Harness

CUTOFF = "2024-01-01"
# Prefixes whose ICU order (a < A < ä < b < B < z < Z) differs from their bytes' order
# (A < B < Z < a < b < z < ä): an Arrow min/max would pick other ends than PostgreSQL.
PREFIXES = "ARRAY['a', 'B', 'b', 'A', 'ä', 'Z', 'z', 'Ab', 'aB']"


def make_table(url: str, name: str, key: str, key_sql: str, rows: int = 3_000) -> None:
    """`rows` rows, two thirds older than CUTOFF; `key_sql` computes the key from i."""
    sql(
        url,
        f"CREATE TABLE {name} ({key}, created_at date NOT NULL, note text);"
        f"INSERT INTO {name} SELECT {key_sql}, "
        f"CASE WHEN i % 3 = 0 THEN DATE '2024-06-01' ELSE DATE '2023-01-01' END, 'n' || i "
        f"FROM generate_series(1, {rows}) i;",
    )


def keys_of(rows: list[dict[str, Any]], names: list[str]) -> list[tuple[str, ...]]:
    """Keys as text, as PostgreSQL writes them (numeric travels as text or DECIMAL)."""
    return [tuple(str(r[n]) for n in names) for r in rows]


def check_archive(
    url: str,
    azurite: Azurite,
    container: str,
    table: str,
    names: list[str],
    expected: list[tuple[Any, ...]],
) -> None:
    """Every row of `expected` is in exactly one file; each file's catalogued key range
    is its first and last key in PostgreSQL's order, and the files follow each other in
    that order without overlapping (so no resume point skipped or repeated a row)."""
    files = sql(
        url,
        "SELECT job_id::text, path, min_key, max_key FROM archive_files "
        "WHERE source_table = $1 ORDER BY job_id, part",
        f"public.{table}",
    )
    archived: Counter[tuple[Any, ...]] = Counter()
    ends: dict[str, list[list[str]]] = {}
    for f in files:
        keys = keys_of(rows_in_blobs(azurite.connection_string, container, [f["path"]]), names)
        archived.update(keys)
        ordered = pg_order(url, table, names, keys)
        assert [f["min_key"], f["max_key"]] == [ordered[0], ordered[-1]], f["path"]
        ends.setdefault(f["job_id"], []).extend([ordered[0], ordered[-1]])
    for job_ends in ends.values():  # a job's files follow each other in key order
        assert pg_order(url, table, names, [tuple(e) for e in job_ends]) == job_ends
    twice = [k for k, n in archived.items() if n > 1]
    assert not twice, f"{len(twice)} rows archived twice, e.g. {twice[:3]}"
    lost = set(expected) - archived.keys()
    assert not lost, f"{len(lost)} rows lost, e.g. {sorted(lost, key=str)[:3]}"
    assert archived.keys() <= set(expected), "archived rows newer than the cutoff"


def pg_order(
    url: str, table: str, names: list[str], keys: list[tuple[Any, ...]]
) -> list[list[str]]:
    """`keys` sorted by PostgreSQL in the table's key types and collations, each as the
    text of its output function (as the catalog holds keys)."""
    columns = sql(
        url,
        "SELECT format_type(a.atttypid, a.atttypmod) AS type, "
        "CASE WHEN a.attcollation IN (0, 100) THEN '' "
        "ELSE ' COLLATE ' || quote_ident(c.collname) END AS coll "
        "FROM unnest($2::text[]) WITH ORDINALITY n(name, i) "
        "JOIN pg_attribute a ON a.attrelid = $1::regclass AND a.attname = n.name "
        "LEFT JOIN pg_collation c ON c.oid = a.attcollation ORDER BY n.i",
        table,
        names,
    )
    n = len(names)
    typed = ", ".join(f"c{j}::{c['type']}{c['coll']} AS k{j}" for j, c in enumerate(columns))
    texts = ", ".join(f"format('%s', k{j})" for j in range(n))
    arrays = ", ".join(f"${j + 1}::text[]" for j in range(n))
    rows = sql(
        url,
        f"SELECT ARRAY[{texts}] AS k FROM (SELECT {typed} FROM unnest({arrays}) "
        f"v({', '.join(f'c{j}' for j in range(n))})) s ORDER BY "
        + ", ".join(f"k{j}" for j in range(n)),
        *[[str(key[j]) for key in keys] for j in range(n)],
    )
    return [list(r["k"]) for r in rows]


def old_keys(url: str, table: str, names: list[str]) -> list[tuple[Any, ...]]:
    cols = ", ".join(f"format('%s', {n}) AS {n}" for n in names)
    return keys_of(
        [dict(r) for r in sql(url, f"SELECT {cols} FROM {table} WHERE created_at < '{CUTOFF}'")],
        names,
    )


def archive(env: dict[str, str], table: str, *extra: str) -> list[str]:
    return enqueued(env, "--table", table, "--before", CUTOFF, "--chunk-rows", "250", *extra)


def verified(env: dict[str, str], table: str) -> None:
    result = run_cli(env, "verify", "--table", table)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_a_text_key_in_an_icu_collation_moved_and_resumed_after_sigkill(h: Harness) -> None:
    make_table(
        h.url,
        "tickets",
        'code text COLLATE "en-x-icu" PRIMARY KEY',
        f"({PREFIXES})[1 + i % 9] || substr(md5(i::text), 1, 6)",
    )
    expected = old_keys(h.url, "tickets", ["code"])
    (job_id,) = archive(h.env, "tickets")
    fast = fast_env(h.env)
    log_a = h.tmp / "a.log"
    kill_at_failpoint(fast, "after_commit", log_a)
    b = start_worker(fast)
    row = h.wait_for(job_id, "completed")
    b.send_signal(signal.SIGTERM)
    assert b.wait(30) == 0
    assert row["attempts"] == 2
    check_archive(h.url, h.azurite, h.container, "tickets", ["code"], expected)
    assert not h.sql(f"SELECT 1 FROM tickets WHERE created_at < '{CUTOFF}'")
    verified(h.env, "tickets")


def test_composite_and_numeric_keys_copied_and_moved(h: Harness) -> None:
    # (region text in ICU order, seq int): a copy reads in key order from one snapshot
    make_table(
        h.url,
        "readings",
        'region text COLLATE "en-x-icu", seq int, PRIMARY KEY (region, seq)',
        f"({PREFIXES})[1 + i % 9], i",
    )
    # numeric(12,2) travels as DECIMAL, plain numeric as text
    make_table(h.url, "ledger", "amount numeric(12,2) PRIMARY KEY", "i * 1.25 - 900")
    make_table(h.url, "rates", "rate numeric PRIMARY KEY", "(i * 7 % 3001) / 8.0")
    cases = {
        "readings": (["region", "seq"], "copy"),
        "ledger": (["amount"], "move"),
        "rates": (["rate"], "move"),
    }
    expected = {t: old_keys(h.url, t, names) for t, (names, _) in cases.items()}
    jobs = [j for t, (_, mode) in cases.items() for j in archive(h.env, t, "--mode", mode)]
    h.drain()
    for job_id in jobs:
        h.wait_for(job_id, "completed", timeout=10)
    for table, (names, _) in cases.items():
        check_archive(h.url, h.azurite, h.container, table, names, expected[table])
        verified(h.env, table)


def test_a_text_key_split_for_parallel_workers(h: Harness) -> None:
    make_table(
        h.url,
        "codes",
        'code varchar(20) COLLATE "en-x-icu" PRIMARY KEY',
        f"({PREFIXES})[1 + i % 9] || i",
        rows=6_000,
    )
    expected = old_keys(h.url, "codes", ["code"])
    jobs = archive(h.env, "codes", "--parallel", "3")
    assert len(jobs) == 3
    workers = [start_worker(h.env, "--burst") for _ in range(2)]
    assert [w.wait(120) for w in workers] == [0, 0]
    for job_id in jobs:
        h.wait_for(job_id, "completed", timeout=10)
    check_archive(h.url, h.azurite, h.container, "codes", ["code"], expected)


def test_a_unique_index_on_not_null_columns_stands_in_for_a_primary_key(h: Harness) -> None:
    make_table(h.url, "events", "ref bigint NOT NULL UNIQUE, alt int", "i, i")
    h.sql("CREATE UNIQUE INDEX ON events (alt)")  # nullable: never the key
    expected = old_keys(h.url, "events", ["ref"])
    (job_id,) = archive(h.env, "events")
    h.drain()
    h.wait_for(job_id, "completed", timeout=10)
    check_archive(h.url, h.azurite, h.container, "events", ["ref"], expected)

    make_table(h.url, "loose", "ref bigint UNIQUE", "i")  # NULLs allowed
    result = h.cli("enqueue", "--table", "loose", "--before", CUTOFF)
    assert_refused(result, "no primary key and no unique index on NOT NULL columns", code=1)


def test_a_citext_key_of_an_extension_off_the_search_path(h: Harness) -> None:
    """citext installed in its own schema, which the worker's search_path does not hold:
    a bare `>` or `=` between citext values would then be text's (byte order,
    case-sensitive), not the order of the key's index. Keys whose bytes order otherwise
    (a < B < b in citext, B < a < b in bytes) are moved with their children, whose
    references differ from their parents' keys in case, as citext allows; and copied in
    three key ranges on two connections each."""
    key = "(ARRAY['a', 'B', 'b', 'A', 'Z', 'z'])[1 + i % 6] || lpad(i::text, 5, '0')"
    h.sql("CREATE SCHEMA ext; CREATE EXTENSION citext SCHEMA ext")
    make_table(h.url, "users", "email ext.citext PRIMARY KEY", key)
    make_table(h.url, "accounts", "login ext.citext PRIMARY KEY", key, rows=6_000)
    h.sql(
        "CREATE TABLE logins (id int PRIMARY KEY, "
        "email ext.citext NOT NULL REFERENCES users ON DELETE CASCADE);"
        "CREATE INDEX ON logins (email);"
        "INSERT INTO logins SELECT row_number() OVER (), upper(email::text) "
        "FROM users, generate_series(1, 2)",
    )
    # the common shape: a bigint key, and children referencing a unique citext column
    make_table(h.url, "profiles", "id bigint PRIMARY KEY", "i")
    h.sql(
        "ALTER TABLE profiles ADD handle ext.citext UNIQUE;"
        "UPDATE profiles SET handle = 'Handle' || id;"
        "CREATE TABLE posts (id int PRIMARY KEY, "
        "handle ext.citext REFERENCES profiles (handle) ON DELETE CASCADE);"
        "INSERT INTO posts SELECT id, lower(handle::text) FROM profiles",
    )
    children = h.sql(
        "SELECT l.id FROM logins l JOIN users u ON u.email OPERATOR(ext.=) l.email "
        f"WHERE u.created_at < '{CUTOFF}'",
    )
    posts = h.sql(
        "SELECT p.id FROM posts p JOIN profiles f ON f.handle OPERATOR(ext.=) p.handle "
        f"WHERE f.created_at < '{CUTOFF}'",
    )
    expected = {t: old_keys(h.url, t, [k]) for t, k in (("users", "email"), ("accounts", "login"))}
    moved = archive(h.env, "users", "--with-children") + archive(
        h.env, "profiles", "--with-children"
    )
    copied = archive(h.env, "accounts", "--mode", "copy", "--parallel", "3")
    two = {**h.env, "ARCHIVER_COPY_CONNECTIONS": "2"}
    workers = [start_worker(two, "--burst") for _ in range(2)]
    assert [w.wait(120) for w in workers] == [0, 0]
    for job_id in moved + copied:
        h.wait_for(job_id, "completed", timeout=10)
    check_archive(h.url, h.azurite, h.container, "users", ["email"], expected["users"])
    check_archive(h.url, h.azurite, h.container, "accounts", ["login"], expected["accounts"])
    assert not h.sql(f"SELECT 1 FROM users WHERE created_at < '{CUTOFF}'")
    for child, ids in (("logins", children), ("posts", posts)):
        files = h.sql(
            "SELECT path FROM archive_files WHERE source_table = $1",
            f"public.{child}",
        )
        rows = rows_in_blobs(h.azurite.connection_string, h.container, [f["path"] for f in files])
        assert sorted(r["id"] for r in rows) == sorted(r["id"] for r in ids), child
    # each range job read only its own range, in citext's order
    for job in h.sql(
        "SELECT j.payload->'key_range'->>'after' AS after, "
        "j.payload->'key_range'->>'through' AS through, array_agg(f.path) AS paths "
        "FROM background_jobs j JOIN archive_files f ON f.job_id = j.id "
        "WHERE j.id = ANY ($1::uuid[]) GROUP BY j.id",
        copied,
    ):
        keys = [
            r["login"]
            for r in rows_in_blobs(h.azurite.connection_string, h.container, job["paths"])
        ]
        outside = h.sql(
            "SELECT k FROM unnest($1::text[]) k WHERE NOT ("
            "($2::text IS NULL OR k::ext.citext OPERATOR(ext.>) $2::ext.citext) AND "
            "($3::text IS NULL OR k::ext.citext OPERATOR(ext.<=) $3::ext.citext))",
            keys,
            job["after"],
            job["through"],
        )
        assert not outside, f"{len(outside)} keys outside {job['after']}..{job['through']}"
    verified(h.env, "users")
    verified(h.env, "logins")
