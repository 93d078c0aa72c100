"""A command interrupted (SIGINT: Ctrl-C; SIGTERM) stops on both sides within a moment.

Python runs a signal handler in the main thread, between two bytecodes: a command
waiting on a statement (in a driver's C code, or in a thread asyncio.run then waits for
at exit) would not stop until the statement ends, and a command killed outright leaves
its statement running in PostgreSQL. So each one-shot command names its connections
after itself (`archiver <command> <pid>` in pg_stat_activity, db.set_application_name),
and a thread of its own wakes on the signal (signal.set_wakeup_fd), ends those sessions
with pg_terminate_backend (their statements and transactions with them), prints one
line and ends the process at once: what a crash leaves, by design — the ledger and the
catalog as docs/lifecycle.md says a killed operation leaves them (a `running` ledger row
whose lock is free, rewrites nobody catalogued: the next sweep abandons them), and the
command's scratch directory (archiver.scratch) removed. The services (worker, scheduler, console) stop
their own way, gracefully."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator

from archiver.config import Settings
from archiver.db import set_application_name

SIGNALS = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}


def _end_sessions(urls: list[str], name: str) -> int:
    """pg_terminate_backend of every session named `name` on each database of `urls`:
    how many ended (a database not reached is skipped: nothing of ours runs there)."""
    import asyncio

    import asyncpg

    async def end(url: str) -> int:
        conn = await asyncpg.connect(url, timeout=2)
        try:
            return int(
                await conn.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = $1 AND pid <> pg_backend_pid()",
                    name,
                )
            )
        finally:
            await conn.close()

    ended = 0
    for url in dict.fromkeys(urls):
        with contextlib.suppress(Exception):
            ended += asyncio.run(asyncio.wait_for(end(url), 3))
    return ended


SERVICES = frozenset(("worker", "scheduler", "console", "serve"))


def stops_on_signal(command: str, settings: Settings) -> contextlib.AbstractContextManager[None]:
    """Around subcommand `command`: a one-shot command ends on SIGINT or SIGTERM as the
    module says, exit status 128 + the signal's number; a service as it always did."""
    if command in SERVICES:
        return contextlib.nullcontext()
    return _one_shot(command, [settings.database_url, settings.effective_source_url])


@contextlib.contextmanager
def _one_shot(command: str, urls: list[str]) -> Iterator[None]:
    name = f"archiver {command} {os.getpid()}"
    set_application_name(name)
    scratch = tempfile.gettempdir()  # the process's own (archiver.scratch): removed on a signal
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous = {s: signal.signal(s, lambda *_: None) for s in SIGNALS}
    old_fd = signal.set_wakeup_fd(write, warn_on_full_buffer=False)

    woken = threading.Event()

    def watch() -> None:
        got = os.read(read, 1)
        woken.set()
        number = got[0] if got else signal.SIGTERM
        _end_sessions(urls, name)
        shutil.rmtree(scratch, ignore_errors=True)
        sign = SIGNALS.get(signal.Signals(number), f"signal {number}")
        print(
            f"archiver: error: {command} interrupted ({sign}): its statements were "
            "cancelled in PostgreSQL; what it did not commit is undone or left for the "
            "next sweep, as after a crash",
            file=sys.stderr,
            flush=True,
        )
        os._exit(128 + number)

    threading.Thread(target=watch, name="interrupt", daemon=True).start()
    try:
        yield
    finally:
        if woken.is_set():  # the command failed as its sessions ended: the watcher ends it
            threading.Event().wait()
        signal.set_wakeup_fd(old_fd)
        for s, handler in previous.items():
            signal.signal(s, handler)
