"""Bounded waits for serve's libpq sessions (psycopg's binding, which has no client-side
timeout): a step on a session registers the session's socket with a deadline, and a
step still waiting past it -- on a flow a NAT or a load balancer forgot, which never
answers -- has its socket shut down, so libpq's wait returns an error at once and the
session is replaced. One thread keeps every deadline of the process; `shut_all` ends
what still waits when serve stops."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator

log = logging.getLogger(__name__)


class Watchdog:
    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._due: list[tuple[float, int]] = []  # (deadline, token), a heap
        self._watched: dict[int, tuple[int, str]] = {}  # token -> (socket's fd, what)
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watch(self, fd: int, seconds: float, what: str) -> Iterator[None]:
        """The block's waits on socket `fd` bounded by `seconds` (0: not bounded)."""
        if seconds <= 0 or fd < 0:
            yield
            return
        token = next(self._tokens)
        with self._lock:
            self._watched[token] = (fd, what)
            heapq.heappush(self._due, (time.monotonic() + seconds, token))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="serve-watchdog", daemon=True
                )
                self._thread.start()
            elif self._due[0][1] == token:
                self._lock.notify()
        try:
            yield
        finally:
            with self._lock:
                self._watched.pop(token, None)  # its heap entry goes when it comes due

    def shut_all(self) -> int:
        """Shut every watched socket now (serve stopping): how many."""
        with self._lock:
            watched, self._watched = self._watched, {}
            for fd, _ in watched.values():
                _shut(fd)
        return len(watched)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._lock.wait(self._due[0][0] - time.monotonic() if self._due else None)
                _, token = heapq.heappop(self._due)
                found = self._watched.pop(token, None)
                if found is not None:  # under the lock: the block, still inside, owns the fd
                    fd, what = found
                    log.warning("serve: %s got no answer in time: its session is closed", what)
                    _shut(fd)


def _shut(fd: int) -> None:
    """Shut down the socket behind `fd` (libpq's own fd stays its to close)."""
    with contextlib.suppress(OSError):
        dup = socket.socket(fileno=os.dup(fd))
        try:
            dup.shutdown(socket.SHUT_RDWR)
        finally:
            dup.close()


WATCHDOG = Watchdog()
