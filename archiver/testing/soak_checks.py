"""The soak's invariants, checked by code that shares nothing with archiver's own
verification: the live tables and the catalog read in one snapshot, every committed file
read back from Azurite with pyarrow, each Delta log read with delta-rs, the erased
values looked for in every blob, log entry, ledger row and log line. Each check returns
the problems it found, as lines; none is the invariant holding."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pyarrow as pa
import pyarrow.parquet as pq
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.storage.blob import ContainerClient

from archiver.testing.soak_world import (
    CONTAINER,
    KEPT,
    KEYS,
    PURGE_AFTER,
    QUIET_DAYS,
    Ledger,
    Row,
    World,
    drained,
    fetch,
)

PREFIX = "archive"


class FileGone(Exception):
    """A file committed at the snapshot was deleted before it was read (retired and
    reaped meanwhile): the check is taken again at a new snapshot."""


class FileOffline(Exception):
    """A committed file in the Archive tier that was never read while it was online:
    its keys cannot be known until it is rehydrated, so this check cannot be whole."""


def container(world: World) -> ContainerClient:
    return ContainerClient.from_connection_string(world.azurite.connection_string, CONTAINER)


def blob_name(path: str) -> str:
    return path if path.startswith(PREFIX + "/") else f"{PREFIX}/{path}"


class FileKeys:
    """The keys each archived file holds, read once per file (files never change)."""

    def __init__(self, world: World) -> None:
        self.client = container(world)
        self.keys: dict[str, list[object]] = {}

    def of(self, path: str, column: str) -> list[object]:
        if path not in self.keys:
            try:
                data = self.client.download_blob(blob_name(path)).readall()
            except ResourceNotFoundError:
                raise FileGone(path) from None
            except HttpResponseError as exc:
                if getattr(exc, "error_code", None) == "BlobArchived":
                    raise FileOffline(path) from None
                raise
            table = pq.read_table(io.BytesIO(data), columns=[column])
            self.keys[path] = table.column(column).to_pylist()
        return self.keys[path]


async def rows_in_one_place(world: World, ledger: Ledger, files: FileKeys) -> list[str]:
    """Every row the soak inserted is live, or in exactly one committed file, never both;
    nothing else is anywhere. A row may be missing only if a purge may have taken it
    (an event older than the retention), or present only while its subject's erasure
    is under way."""
    for _ in range(4):
        try:
            return await _rows_in_one_place(world, ledger, files, last=False)
        except FileGone:
            continue
    return await _rows_in_one_place(world, ledger, files, last=True)


async def _rows_in_one_place(
    world: World, ledger: Ledger, files: FileKeys, *, last: bool
) -> list[str]:
    """One snapshot's check; a committed file whose blob is gone raises FileGone, or on
    the `last` try is itself a problem (and its rows count as nowhere)."""
    problems = []
    before, erasing = ledger.snapshot(), set(ledger.erasing)
    conn = await asyncpg.connect(world.url)
    try:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            live = {t: {r[0] for r in await conn.fetch(f'SELECT "{k}" FROM {t}')}
                    for t, k in KEYS.items()}  # fmt: skip
            committed = await conn.fetch(
                "SELECT path, source_table FROM archive_files WHERE state = 'committed'"
            )
    finally:
        await conn.close()
    archived: dict[str, Counter[object]] = {t: Counter() for t in KEYS}
    for f in committed:
        table = f["source_table"].rpartition(".")[2]
        try:
            keys = await asyncio.to_thread(files.of, f["path"], KEYS[table])
        except FileGone:
            if not last:
                raise
            problems.append(f"{table}: {f['path']} is committed in the catalog, not stored")
            continue
        archived[table].update(keys)
    # after the files are read: the feeder has recorded every batch committed by then
    erasing |= ledger.erasing
    unsure = ledger.unsure.rows if ledger.unsure is not None else {t: {} for t in KEYS}
    seen = Seen(before, ledger.snapshot(), live, archived, erasing, unsure)
    return problems + judge(seen, ledger, dt.datetime.now(dt.UTC))


@dataclass
class Seen:
    """What one check saw: the ledger's rows before and after the snapshot, the keys live
    and archived (a count per key) at the snapshot, and the rows allowed to be present
    without being in the ledger (subjects being erased, a batch being inserted)."""

    before: dict[str, dict[object, Row]]
    after: dict[str, dict[object, Row]]
    live: dict[str, set[object]]
    archived: dict[str, Counter[object]]
    erasing: set[str]
    unsure: dict[str, dict[object, Row]]


def judge(seen: Seen, ledger: Ledger, now: dt.datetime) -> list[str]:
    """The invariant over what one check saw: per table, no key archived twice, none
    live and archived, none found that the ledger does not hold (unless its subject is
    being erased or its batch is unsure), none the ledger holds that is nowhere (unless
    a purge may have taken it: an event older than the retention)."""
    problems = []
    for table in KEYS:
        live, archived = seen.live[table], seen.archived[table]
        found = live | archived.keys()
        removed = ledger.removed[table]
        extra = [
            k
            for k in found - seen.after[table].keys()
            if k not in seen.unsure[table]
            and not (k in removed and removed[k].subject in seen.erasing)
        ]
        missing = [
            k
            for k in seen.before[table].keys() - found
            if not (table == "events" and _purgeable(seen.before[table][k].created_at, now))
        ]
        wrong: list[tuple[str, list[object]]] = [
            ("archived twice", [k for k, n in archived.items() if n > 1]),
            ("live and archived", sorted(live & archived.keys(), key=str)),
            ("found but not inserted, or erased", extra),
            ("lost", missing),
        ]
        problems += [f"{table}: {len(keys)} rows {what}, e.g. {_named(keys, seen, ledger, table)}"
                     for what, keys in wrong if keys]  # fmt: skip
    return problems


def _named(keys: list[object], seen: Seen, ledger: Ledger, table: str) -> list[str]:
    """The first three keys, each with its subject and whether it was erased (what a
    lost or extra row's story starts from)."""
    out = []
    for k in sorted(keys, key=str)[:3]:
        row = seen.before[table].get(k) or seen.after[table].get(k) or ledger.removed[table].get(k)
        who = row.subject if row else None
        state = (
            " erased" if who in ledger.erased else " being erased" if who in seen.erasing else ""
        )
        out.append(f"{k} ({who or 'no subject'}{state})")
    return out


def one_error_line(stderr: str) -> bool:
    """A failed command's stderr ends in its one error line, and holds no traceback
    (progress lines before it are a command's own)."""
    lines = stderr.strip().splitlines()
    return bool(lines) and lines[-1].startswith("archiver: error: ") and "Traceback" not in stderr


def _purgeable(created_at: dt.datetime | None, now: dt.datetime) -> bool:
    return created_at is not None and created_at < now - PURGE_AFTER


def counts(world: World) -> dict[str, int]:
    """Live rows per table, for the figures."""

    async def count() -> dict[str, int]:
        conn = await asyncpg.connect(world.url)
        try:
            return {t: int(await conn.fetchval(f"SELECT count(*) FROM {t}")) for t in KEYS}
        finally:
            await conn.close()

    return asyncio.run(count())


def delta_equals_catalog(world: World, tries: int = 4) -> list[str]:
    """Once the queue is idle, each table's Delta log adds exactly its committed files.
    The workers' maintenance goes on after the queue drains (a compaction a minute): a
    merge committed just before or while the logs are read is not in them yet, until the
    job that made it or the publication sweep (every 30 s) publishes it. So the catalog is
    read before and after the logs, and a mismatch taken again a sweep later."""
    from deltalake import DeltaTable

    options = world.azurite.delta_options

    async def catalogued() -> dict[str, set[str]]:
        rows = await fetch(
            world,
            "SELECT source_table, path FROM archive_files "
            "WHERE state = 'committed' AND delta AND NOT offline",
        )
        found: dict[str, set[str]] = {}
        for r in rows:
            table = r["source_table"]
            found.setdefault(table, set()).add(r["path"].split(f"{table}/", 1)[1])
        return found

    def logged(table: str) -> set[str]:
        log = DeltaTable(f"az://{CONTAINER}/{PREFIX}/{table}", storage_options=options)
        return set(log.get_add_actions(flatten=True).column("path").to_pylist())

    for attempt in range(tries):
        before = asyncio.run(catalogued())
        logs = {table: logged(table) for table in before}
        after = asyncio.run(catalogued())
        problems = []
        for table, added in logs.items():
            expected = after.get(table, set())
            if added != expected:
                problems.append(
                    f"{table}: the Delta log adds {len(added)} files, the catalog commits "
                    f"{len(expected)} ({len(added - expected)} extra, "
                    f"{len(expected - added)} missing)"
                )
        if not problems or attempt == tries - 1:
            return problems
        if before == after:  # else the catalog moved while the logs were read: again
            asyncio.run(drained(world))
            time.sleep(35)
    return []


def erased_nowhere(world: World, ledger: Ledger, outputs: list[str]) -> list[str]:
    """No erased subject's value in any blob (a Parquet file's every column, a Delta log
    entry), any ledger or catalog row, any process's log line or command output."""
    if not ledger.erased:
        return []
    values = sorted(ledger.erased)
    problems = []
    client = container(world)
    for blob in client.list_blobs():
        try:
            data = client.download_blob(blob.name).readall()
        except ResourceNotFoundError:  # deleted since the listing (a worker reaping): gone
            continue
        if blob.name.endswith(".parquet"):
            text = json.dumps(_values(pq.read_table(io.BytesIO(data))), default=str)
        else:
            text = data.decode("utf-8", "replace")
        problems += [f"{blob.name} holds {v}" for v in values if v in text]

    async def rows() -> str:
        conn = await asyncpg.connect(world.url)
        try:
            found = [
                str(await conn.fetch(f"SELECT t::text FROM {t} t"))
                for t in ("archive_ledger", "archive_files", "background_jobs")
            ]
        finally:
            await conn.close()
        return "".join(found)

    text = asyncio.run(rows())
    problems += [f"the ledger, the catalog or the queue holds {v}" for v in values if v in text]
    for log in sorted(Path(world.log_dir).glob("*.log")):
        text = log.read_text(errors="replace")
        problems += [f"{log.name} holds {v}" for v in values if v in text]
    problems += [f"a command's output holds {v}" for v in values if any(v in o for o in outputs)]
    return problems


def _values(table: pa.Table) -> list[object]:
    return [table.column(i).to_pylist() for i in range(table.num_columns)]


async def nothing_left_behind(world: World) -> list[str]:
    """After every archiver process has stopped: no session of one, no advisory lock."""
    conn = await asyncpg.connect(world.url)
    try:
        sessions = await conn.fetch(
            "SELECT pid, application_name, state FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'"
        )
        locks = await conn.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
    finally:
        await conn.close()
    problems = [f"a session left: {dict(s)}" for s in sessions]
    if locks:
        problems.append(f"{locks} advisory locks left")
    return problems


def rss_flat(samples: list[tuple[float, float]], minutes: float) -> list[str]:
    """The workers' peak RSS over the last half (at most 10 minutes) of the run against
    the first's: a leak shows as growth; 1.5x and 40 MB of slack absorb a worker
    SIGKILLed and started again and chunks of different widths."""
    span = min(minutes / 2, 10.0)
    first = max((mb for at, mb in samples if at <= span), default=0.0)
    last = max((mb for at, mb in samples if at >= minutes - span), default=0.0)
    if first and last > first * 1.5 + 40:
        return [
            f"worker RSS grew: peak {first:.0f} MB in the first {span:g} min, {last:.0f} MB in the last"
        ]
    return []


# -- the soak's questions with known answers --------------------------------------------


def _kept(column: str) -> str:
    return f"{column} IN ({', '.join(repr(s) for s in sorted(KEPT))})"


def live_questions(ledger: Ledger, upto: int) -> list[tuple[str, dict[str, int]]]:
    """For `query --with-live`, with their answers: the kept subjects' orders and their
    lines (a join: several scans of the source in one statement), and their audit rows
    (a table the soak moves to the Archive tier now and then: refused meanwhile), up to
    id `upto` -- rows no insert or erasure changes while it runs, whichever side each
    is on."""
    orders = {
        k for k, r in ledger.rows["orders"].items() if r.subject in KEPT and int(str(k)) <= upto
    }
    lines = sum(1 for r in ledger.rows["order_lines"].values() if r.parent in orders)
    audit = sum(
        1 for k, r in ledger.rows["audit"].items() if r.subject in KEPT and int(str(k)[2:]) <= upto
    )
    return [
        (
            f"SELECT (SELECT count(*) FROM orders WHERE {_kept('customer')} AND id <= {upto}) "
            "AS o, (SELECT count(*) FROM orders o JOIN order_lines l ON l.order_id = o.id "
            f"WHERE {_kept('o.customer')} AND o.id <= {upto}) AS l",
            {"o": len(orders), "l": lines},
        ),
        (
            f"SELECT count(*) AS a FROM audit WHERE {_kept('actor')} AND key <= 'a-{upto:09d}'",
            {"a": audit},
        ),
    ]


def quiet_limit(now: dt.datetime) -> str:
    """Orders older than this (UTC) no restore of the soak reaches."""
    return (now - dt.timedelta(days=QUIET_DAYS)).isoformat()


def archive_question(upto: int, limit: str) -> str:
    """For `archiver query` (the archive alone): the kept subjects' quiet orders (older
    than `limit`, which no restore reaches) up to id `upto` -- once every one of them is
    archived it stays so --; and whether any archived order is there twice."""
    return (
        f"SELECT count(*) FILTER (WHERE {_kept('customer')} AND id <= {upto} AND created_at "
        f"< TIMESTAMPTZ '{limit}') AS quiet, count(*) - count(DISTINCT id) AS twice FROM orders"
    )


def quiet_live(upto: int, limit: str) -> str:
    """SQL on the source: how many of those quiet orders are still live (not moved yet)."""
    return (
        f"SELECT count(*) FROM orders WHERE {_kept('customer')} AND id <= {upto} "
        f"AND created_at < '{limit}'::timestamptz"
    )


def archive_truth(ledger: Ledger, upto: int, limit: str) -> dict[str, int]:
    before = dt.datetime.fromisoformat(limit)
    quiet = sum(
        1
        for k, r in ledger.rows["orders"].items()
        if r.subject in KEPT and int(str(k)) <= upto and r.created_at and r.created_at < before
    )
    return {"quiet": quiet, "twice": 0}
