"""Row locks: a move's chunk and an application writing the same rows. A chunk waits
ARCHIVER_ROW_LOCK_WAIT for a row another transaction changes, then skips the rows still
held for the rest of its attempt (they stay for the next archive); the short wait ends
with the DELETE; an application writing old rows while they move, and old rows sparse
in key order, leave every row exactly once. Table locks are test_locks.py's."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from archiver.testing.reference import seed_orders
from tests.support import sql, start_worker, wait_for_text, wait_until
from tests.support.archive import catalog_paths, rows_in_blobs
from tests.support.harness import Harness

CUTOFF = "2024-12-25"


def _seed(database_url: str, rows: int, oldest_first: bool) -> None:
    """The reference rows, whose oldest have the highest ids; `oldest_first`: created in
    key order instead (a serial key), so that a move takes dense key ranges."""
    seed_orders(database_url, rows)
    if oldest_first:
        sql(
            database_url,
            "UPDATE orders SET created_at = timestamptz '2025-01-01 00:00:00+00' "
            f"- make_interval(mins => ({rows} + 1 - id)::int)",
        )
        sql(database_url, "VACUUM orders")


KEY_ORDER = pytest.mark.parametrize("oldest_first", [False, True], ids=["newest", "oldest"])
KEY_RANGE = "a key range of public.orders"  # the worker's debug line for each range


def _took_key_ranges(log: str) -> bool:
    """Whether the worker's chunks were key ranges: in either key order they are, since
    a job's keys start at its first old row (archive.job.bound_to_old_rows), until the
    job turns to choosing rows."""
    return KEY_RANGE in log


def _old_ids(database_url: str) -> list[int]:
    return [
        r["id"]
        for r in sql(
            database_url, f"SELECT id FROM orders WHERE created_at < '{CUTOFF}' ORDER BY id"
        )
    ]


@KEY_ORDER
def test_a_move_chunk_waits_for_a_row_another_transaction_changes(
    h: Harness, oldest_first: bool
) -> None:
    """The DELETE locks no row before it deletes it and waits for a row another
    transaction holds (ARCHIVER_ROW_LOCK_WAIT). When that transaction commits a change,
    the row is never archived in its old version: it stays in the table (PostgreSQL
    rechecks the chosen ctid against the newest version), or it is taken in its newest
    version only if that is still older than the cutoff (the DELETE's WHERE, rechecked).
    Oldest first, the waiting DELETE is a key range's, and the two rows are its first."""
    _seed(h.url, 12_000, oldest_first)  # ~1,900 rows older than the cutoff
    old = _old_ids(h.url)
    changed, renewed = old[0], old[1]

    async def scenario() -> None:
        app = await asyncpg.connect(h.url)
        tx = app.transaction()
        await tx.start()
        await app.execute("UPDATE orders SET note = 'changed meanwhile' WHERE id = $1", changed)
        await app.execute(
            "UPDATE orders SET created_at = '2030-01-01 00:00:00+00' WHERE id = $1", renewed
        )
        log = h.tmp / "worker.log"
        assert h.cli("enqueue", "--table", "orders", "--before", CUTOFF).returncode == 0
        waits = {**h.env, "ARCHIVER_ROW_LOCK_WAIT": "60", "ARCHIVER_LOCK_TIMEOUT": "60"}
        worker = start_worker(waits, "--burst", "--verbose", log=log)
        waiting = (
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            'AND query LIKE \'%DELETE FROM "public"."orders"%\''
        )
        await asyncio.to_thread(
            wait_until, lambda: h.sql(waiting)[0][0] == 1, 60, 0.05, "a waiting DELETE"
        )
        await tx.commit()
        await app.close()
        assert await asyncio.to_thread(worker.wait, 120) == 0
        text = log.read_text()
        assert "taking the chunk again" not in text
        assert _took_key_ranges(text)

    asyncio.run(scenario())
    left = {r["id"]: r for r in h.sql("SELECT * FROM orders WHERE id = ANY($1::int8[])", old)}
    assert left[renewed]["created_at"].year == 2030
    assert set(left) <= {changed, renewed}
    paths = catalog_paths(h.url)
    archived = {r["id"]: r for r in rows_in_blobs(h.azurite.connection_string, h.container, paths)}
    assert renewed not in archived
    assert (archived.get(changed) or left[changed])["note"] == "changed meanwhile"
    h.exactly_once(set(old) - {renewed})


@KEY_ORDER
def test_rows_held_past_the_wait_are_skipped_for_the_rest_of_the_attempt(
    h: Harness, oldest_first: bool
) -> None:
    """Rows an application holds longer than ARCHIVER_ROW_LOCK_WAIT: the chunk that meets
    the first rolls back and is taken again with FOR UPDATE SKIP LOCKED at once (no
    backoff, no lock retry or attempt spent), and so are the later chunks, which skip
    the second held row without waiting; both stay for the next job. The chunk that
    waits is a key range's DELETE."""
    _seed(h.url, 20_000, oldest_first)  # ~9,900 rows older than the cutoff: 5 chunks
    old = _old_ids(h.url)
    held = [old[len(old) // 3], old[2 * len(old) // 3]]  # in two different middle chunks

    async def scenario() -> str:
        app = await asyncpg.connect(h.url)
        tx = app.transaction()
        await tx.start()
        await app.execute("SELECT 1 FROM orders WHERE id = ANY($1::int8[]) FOR UPDATE", held)
        log = h.tmp / "worker.log"
        args = ("enqueue", "--table", "orders", "--before", CUTOFF, "--chunk-rows", "2000")
        assert h.cli(*args).returncode == 0
        wait = {**h.env, "ARCHIVER_ROW_LOCK_WAIT": "0.2"}
        worker = start_worker(wait, "--burst", "--verbose", log=log)
        assert await asyncio.to_thread(worker.wait, 120) == 0
        await tx.rollback()
        await app.close()
        return log.read_text()

    text = asyncio.run(scenario())
    assert text.count("taking the chunk again") == 1
    assert "waited 0.2s for a lock on public.orders" in text
    # the DELETE that waited was a key range's
    assert _took_key_ranges(text[: text.index("waited 0.2s")])
    job = h.sql("SELECT status, attempts, last_error FROM background_jobs")[0]
    assert (job["status"], job["attempts"], job["last_error"]) == ("completed", 1, None)
    left = h.sql("SELECT id FROM orders WHERE id = ANY($1::int8[]) ORDER BY id", old)
    assert [r["id"] for r in left] == held
    h.exactly_once(set(old))


def test_the_short_wait_ends_with_the_delete(h: Harness) -> None:
    """The row wait is the DELETE's alone: the chunk's catalog writes (its file, the
    job's progress) wait as long as any chunk's statements. Here the job's own row is
    held for a second after the chunk's file is written: no fallback, no retry."""
    seed_orders(h.url, 12_000)
    old = _old_ids(h.url)
    log = h.tmp / "worker.log"
    job_id = h.cli("enqueue", "--table", "orders", "--before", CUTOFF).stdout.strip()
    slow = {**h.env, "ARCHIVER_FAILPOINTS": "before_upload=sleep:1"}
    worker = start_worker(slow, "--burst", log=log)

    async def hold_the_job_row() -> None:
        await asyncio.to_thread(wait_for_text, log, "failpoint before_upload reached")
        app = await asyncpg.connect(h.url)
        async with app.transaction():
            await app.execute(
                "SELECT 1 FROM background_jobs WHERE id = $1::uuid FOR UPDATE", job_id
            )
            await asyncio.sleep(2)  # the failpoint's second, then the catalog write waits
        await app.close()

    asyncio.run(hold_the_job_row())
    assert worker.wait(120) == 0
    text = log.read_text()
    assert "taking the chunk again" not in text and "retrying in" not in text
    job = h.sql("SELECT status, attempts, last_error FROM background_jobs")[0]
    assert (job["status"], job["attempts"], job["last_error"]) == ("completed", 1, None)
    h.exactly_once(set(old))


@KEY_ORDER
def test_a_move_under_an_application_writing_old_rows(h: Harness, oldest_first: bool) -> None:
    """Six application sessions update and delete random old rows in short transactions
    (each holds its row 0-150 ms, so some waits end in time and some run out) while a
    move job takes them in 500-row chunks. Every row is in exactly one place, and that
    place holds the row as the application last committed it: never a stale version.
    The chunks are key ranges deleted in one pass."""
    import random

    _seed(h.url, 20_000, oldest_first)
    old = _old_ids(h.url)
    h.cli("enqueue", "--table", "orders", "--before", CUTOFF, "--chunk-rows", "500")
    last_note: dict[int, str] = {}
    deleted: set[int] = set()
    log = h.tmp / "worker.log"

    async def application(n: int, done: asyncio.Event) -> None:
        conn = await asyncpg.connect(h.url)
        rng = random.Random(n)
        i = 0
        while not done.is_set():
            i += 1
            row = rng.choice(old)
            async with conn.transaction():
                if rng.random() < 0.1:
                    status = await conn.execute("DELETE FROM orders WHERE id = $1", row)
                else:
                    note = f"app {n} write {i}"
                    status = await conn.execute(
                        "UPDATE orders SET note = $2 WHERE id = $1", row, note
                    )
                await conn.execute("SELECT pg_sleep($1)", rng.random() * 0.15)
            if status == "DELETE 1":
                deleted.add(row)
                last_note.pop(row, None)
            elif status == "UPDATE 1":
                last_note[row] = note
        await conn.close()

    async def scenario() -> None:
        done = asyncio.Event()
        apps = [asyncio.create_task(application(n, done)) for n in range(6)]
        await asyncio.sleep(0.3)
        worker = start_worker(h.env, "--burst", "--verbose", log=log)
        assert await asyncio.to_thread(worker.wait, 120) == 0
        done.set()
        await asyncio.gather(*apps)

    asyncio.run(scenario())
    assert _took_key_ranges(log.read_text())
    assert len(last_note) > 20 and deleted  # the application did write meanwhile
    left = {
        r["id"]: r["note"]
        for r in h.sql("SELECT id, note FROM orders WHERE id = ANY($1::int8[])", old)
    }
    paths = catalog_paths(h.url)
    archived = {
        r["id"]: r["note"] for r in rows_in_blobs(h.azurite.connection_string, h.container, paths)
    }
    assert len(archived) > len(old) // 2
    stale = {i: n for i, n in last_note.items() if (archived | left).get(i) != n}
    assert not stale, f"{len(stale)} rows not as last committed, e.g. {list(stale.items())[:3]}"
    h.exactly_once(set(old) - deleted)


def test_old_rows_sparse_in_key_order_turn_a_move_to_choosing_its_rows(h: Harness) -> None:
    """Old rows dense in key order are moved a key range at a time. Past them, a range
    that would start at a new row (`audit`), or at a row whose cutoff value is NULL
    (`gaps`), or that holds under 90% old rows (`events`, one old row then 999 new)
    turns the job to choosing its chunks' rows in key order, and the old rows past the
    gap are moved all the same. Fewer keys than a chunk's left (`tail`): the last range
    ends at the last key."""
    old_ids = "g <= 2000 OR g BETWEEN 3001 AND 3300"
    tables = {  # table: (rows, which are old, NULL where, the files expected)
        "events": (5000, f"{old_ids} OR g = 2001", "false", [500] * 4 + [1, 300]),
        "audit": (5000, old_ids, "false", [500] * 4 + [300]),
        "tail": (1200, "true", "false", [500, 500, 200]),  # the last range ends at the last key
        "gaps": (1200, "true", "g = 501", [500, 500, 199]),  # a NULL cutoff value next
    }
    for table, (rows, which, null, _) in tables.items():
        h.sql(
            f"""CREATE TABLE {table} (id bigint PRIMARY KEY, at timestamptz, body text);
                INSERT INTO {table} SELECT g, CASE WHEN {null} THEN NULL WHEN {which}
                    THEN timestamptz '2024-01-01' + make_interval(mins => g::int)
                    ELSE timestamptz '2030-01-01' END, 'row ' || g
                FROM generate_series(1, {rows}) g;""",
        )
        args = ("--table", table, "--column", "at", "--before", "2025-01-01", "--chunk-rows", "500")
        assert h.cli("enqueue", *args).returncode == 0
    old = {
        t: [r["id"] for r in h.sql(f"SELECT id FROM {t} WHERE at < '2025-01-01'")] for t in tables
    }
    log = h.tmp / "worker.log"
    assert start_worker(h.env, "--burst", log=log).wait(120) == 0
    text = log.read_text()
    assert text.count("choosing each chunk's rows in key order") == 3
    assert "1 of the next 500 keys of public.events are rows older than the cutoff" in text
    assert "the next row of public.audit is not older than the cutoff" in text
    assert "the next row of public.gaps is not older than the cutoff" in text
    for table, (_, _, _, sizes) in tables.items():
        files = h.sql(
            "SELECT row_count FROM archive_files WHERE source_table = $1 ORDER BY part",
            f"public.{table}",
        )
        assert [f["row_count"] for f in files] == sizes
        left = h.sql(f"SELECT count(*) AS n FROM {table} WHERE at < '2025-01-01'")
        assert left[0]["n"] == 0
        paths = catalog_paths(h.url, f"public.{table}")
        archived = rows_in_blobs(h.azurite.connection_string, h.container, paths)
        assert sorted(r["id"] for r in archived) == sorted(old[table])
