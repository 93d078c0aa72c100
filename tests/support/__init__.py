"""Real services for the tests: PostgreSQL databases made from a template, Azurite
started from the pinned npm package, and the CLI run as a real subprocess."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import adbc_driver_postgresql
import asyncpg

from archiver.testing import forkserver
from archiver.testing.cluster import PrivateCluster
from archiver.testing.forkserver import Process as Process  # the tests name it from here
from archiver.testing.services import with_database

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
# The driver library the adbc-driver-postgresql wheel ships (ARCHIVER_ADBC_DRIVER's default)
WHEEL_LIBRARY = Path(adbc_driver_postgresql.__file__).parent / "libadbc_driver_postgresql.so"
ADMIN_URL = os.environ.get(
    "ARCHIVER_TEST_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


@contextmanager
def fresh_database(prefix: str, template: str | None = None) -> Iterator[str]:
    """A database of the test's own (a copy of `template`, if given), dropped after."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    if template:  # a template is copied only with no session in it: sql's kept ones go
        _SESSIONS.forget(template)
    sql(ADMIN_URL, f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    try:
        yield with_database(ADMIN_URL, name)
    finally:
        _SESSIONS.forget(name)
        DROPS.drop(name)


class _Drops:
    """Test databases dropped by a thread of this process's own, the test going on
    meanwhile; `wait` waits for those asked (at the end of the run, conftest.py). PostgreSQL
    15's DROP DATABASE waits for a checkpoint and for every backend of the cluster to
    take in a signal, and a backend sending to a client whose flow a network-fault test
    froze takes it in only when the flow heals: teardowns waited 20-35 s for that."""

    def __init__(self) -> None:
        self.asked: queue.Queue[str] = queue.Queue()
        self.thread: threading.Thread | None = None
        self.failed: list[str] = []

    def drop(self, name: str) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._run, name="test-drops", daemon=True)
            self.thread.start()
        self.asked.put(name)

    def wait(self) -> None:
        self.asked.join()
        assert not self.failed, f"test databases not dropped: {self.failed}"

    def _run(self) -> None:
        while True:
            name = self.asked.get()
            try:
                asyncio.run(self._drop(name))
            except Exception as exc:
                self.failed.append(f"{name}: {exc}")
            finally:
                self.asked.task_done()

    @staticmethod
    async def _drop(name: str) -> None:
        conn = await asyncpg.connect(ADMIN_URL)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            # and the definitions database and role `archiver serve` made for it, if it ran
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}_archive" WITH (FORCE)')
            await conn.execute(f'DROP ROLE IF EXISTS "{name}_archive"')
        finally:
            await conn.close()


DROPS = _Drops()


@contextmanager
def private_database(*settings: str) -> Iterator[tuple[PrivateCluster, str]]:
    """Database `app` on a PostgreSQL cluster of the test's own (server `settings` such
    as "wal_level=logical"), and the cluster, to restart or halt: stopped and deleted after."""
    cluster = PrivateCluster()
    cluster.settings = list(settings)
    cluster.init()
    cluster.start()
    try:
        sql(cluster.admin_url, "CREATE DATABASE app")
        yield cluster, with_database(cluster.admin_url, "app")
    finally:
        cluster.stop()


def sql(url: str, query: str, *args: Any) -> list[asyncpg.Record]:
    """Run one statement (or a script of several) and return its rows, in a session of
    its own: in the main thread, a session kept per database for this process's later
    calls, given back as asyncpg's pool gives one back (no transaction, advisory lock,
    LISTEN, cursor or setting left); in another thread, or where an event loop runs in
    this one, a session opened and closed now. A kept session costs a round trip where a
    new one costs a backend's start, and the tests poll a job's state every 0.1 s."""

    async def run(conn: asyncpg.Connection) -> list[asyncpg.Record]:
        if not args and ";" in query.strip().rstrip(";"):
            await conn.execute(query)  # a script of several statements
            return []
        return list(await conn.fetch(query, *args))

    async def fresh() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(url)
        try:
            return await run(conn)
        finally:
            await conn.close()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        running = False
    else:
        running = True
    if running or threading.current_thread() is not threading.main_thread():
        return outside_loop(asyncio.run, fresh())
    rows: list[asyncpg.Record] = _SESSIONS.run(url, run)
    return rows


class _Sessions:
    """`sql`'s kept sessions: one event loop and a session per database, for this
    process's main thread only (a forked child opens its own). `forget` closes those of
    a database about to be copied as a template (which needs it to have no session) or
    dropped."""

    def __init__(self) -> None:
        self.pid = -1
        self.loop: asyncio.AbstractEventLoop | None = None
        self.kept: dict[str, asyncpg.Connection] = {}

    def run(self, url: str, work: Callable[[asyncpg.Connection], Any]) -> Any:
        if self.pid != os.getpid():  # forked: the parent's sockets are not this process's
            self.pid, self.loop, self.kept = os.getpid(), asyncio.new_event_loop(), {}
        assert self.loop is not None
        return self.loop.run_until_complete(self._run(url, work))

    async def _run(self, url: str, work: Callable[[asyncpg.Connection], Any]) -> Any:
        conn = self.kept.pop(url, None)
        if conn is not None and not conn.is_closed():
            try:
                return await self._on(url, conn, work)
            except _LOST:  # its server restarted since the last call: asked again, anew
                pass
        return await self._on(url, await asyncpg.connect(url), work)

    async def _on(
        self, url: str, conn: asyncpg.Connection, work: Callable[[asyncpg.Connection], Any]
    ) -> Any:
        try:
            result = await work(conn)
        except _LOST:
            conn.terminate()
            raise
        except BaseException:
            await self._give_back(url, conn)
            raise
        await self._give_back(url, conn)
        return result

    async def _give_back(self, url: str, conn: asyncpg.Connection) -> None:
        try:
            if conn.is_in_transaction():  # a script's BEGIN (reset would log it as an error)
                await conn.execute("ROLLBACK")
            await conn.reset()  # what asyncpg's pool runs: unlock, CLOSE ALL, UNLISTEN, RESET ALL
        except Exception:
            conn.terminate()
            return
        self.kept[url] = conn

    def forget(self, database: str) -> None:
        if self.pid != os.getpid() or self.loop is None:
            return
        for url in [u for u in self.kept if urlsplit(u).path.lstrip("/") == database]:
            self.loop.run_until_complete(self.kept.pop(url).close())


_LOST = (asyncpg.PostgresConnectionError, asyncpg.InterfaceError, ConnectionError, OSError)
_SESSIONS = _Sessions()


def outside_loop(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)`, in a thread of its own when this one runs an event loop (Playwright's
    sync API keeps one running under the browser tests): asyncio.run refuses to nest."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args).result()


def sql_value(url: str, query: str, *args: Any) -> Any:
    rows = sql(url, query, *args)
    return rows[0][0] if rows else None


def archiver_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "archiver", *args]


def run_cli(
    env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`archiver ARGS` run to its end, its output captured (forked: archiver.testing.forkserver)."""
    return forkserver.run(archiver_cmd(*args), env, ROOT, timeout)


# Every process a test starts, so a failed test cannot leave one running (see conftest).
STARTED: list[Process] = []


def enqueued(env: dict[str, str], *args: str) -> list[str]:
    """`archiver enqueue ARGS`, which must succeed: the ids of the jobs it queued."""
    result = run_cli(env, "enqueue", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def start_process(args: list[str], env: dict[str, str], log: Path | None = None) -> Process:
    """`args` started, its output to `log` (appended) or nowhere; an archiver process
    forked from archiver.testing.forkserver."""
    with open(log or os.devnull, "a") as out:  # the child keeps its own descriptor
        proc = forkserver.start(args, env, ROOT, out.fileno(), out.fileno())
    STARTED.append(proc)
    return proc


def start_worker(env: dict[str, str], *args: str, log: Path | None = None) -> Process:
    return start_process(archiver_cmd("worker", *args), env, log)


def kill_at_failpoint(env: dict[str, str], point: str, log: Path) -> None:
    """Start a worker that pauses at failpoint `point`, wait until it is there, SIGKILL it."""
    worker = start_worker({**env, "ARCHIVER_FAILPOINTS": f"{point}=pause"}, log=log)
    wait_for_text(log, f"failpoint {point} reached")
    worker.kill()
    worker.wait(10)


def wait_for_killed_leases(url: str) -> None:
    """Wait until no running job's lease is fresh: the leases (2 s, fast_env) of workers
    killed at a failpoint ran out, so a burst worker rescues their jobs as it starts."""
    wait_until(
        lambda: (
            not sql_value(
                url,
                "SELECT count(*) FROM background_jobs WHERE status = 'running' "
                "AND heartbeat_at > now() - interval '2 seconds'",
            )
        ),
        what="the killed workers' leases to expire",
    )


def reap_started() -> None:
    """Kill whatever a test started and left running."""
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def wait_until(
    predicate: Any, timeout: float = 60.0, interval: float = 0.1, what: str = "condition"
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def wait_for_text(path: Path, text: str, timeout: float = 60.0) -> None:
    """Wait until a process's log file contains `text`."""
    wait_until(
        lambda: path.exists() and text in path.read_text(), timeout, what=f"{text!r} in {path.name}"
    )


def job_row(url: str, job_id: str) -> Any:
    return sql(url, "SELECT * FROM background_jobs WHERE id = $1::uuid", job_id)[0]


def wait_for_status(url: str, job_id: str, status: str, timeout: float = 90.0) -> Any:
    return wait_until(
        lambda: (r := job_row(url, job_id))["status"] == status and r,
        timeout,
        what=f"job {job_id} {status}",
    )


def fast_env(env: dict[str, str], **extra: str) -> dict[str, str]:
    """`env` with short leases, heartbeats and backoffs, so rescues happen within seconds."""
    return {
        **env,
        "ARCHIVER_LEASE_SECONDS": "2",
        "ARCHIVER_HEARTBEAT_SECONDS": "0.5",
        "ARCHIVER_RETRY_BASE_SECONDS": "0.2",
        "ARCHIVER_POLL_INTERVAL": "0.3",
        **extra,
    }


def assert_refused(
    result: subprocess.CompletedProcess[str],
    *needles: str,
    code: int | None = None,
    prefix: str = "archiver: error: ",
) -> None:
    """The one check of a refusal: a non-zero exit (exactly `code` when given), one line
    on stderr starting with `prefix` (argparse's own refusals say `archiver <command>:
    error: `) and holding each needle; no traceback, no second line."""
    if code is None:
        assert result.returncode != 0, (result.returncode, result.stdout, result.stderr)
    else:
        assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and result.stderr.endswith("\n"), result.stderr
    assert result.stderr.startswith(prefix), result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr


def column_layout(data: bytes) -> dict[str, tuple[str, set[str]]]:
    """A Parquet file's top-level columns: physical type and encodings (its first row
    group), as parquet.writer_options writes them."""
    import io

    import pyarrow.parquet as pq

    group = pq.read_metadata(io.BytesIO(data)).row_group(0)
    columns = (group.column(i) for i in range(group.num_columns))
    return {c.path_in_schema: (c.physical_type, set(c.encodings)) for c in columns}
