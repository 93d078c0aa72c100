"""The worker's pool of ADBC connections against fake connections (the integration test
in tests/integration/test_crash.py drops real ones): reuse after a clean job, never after a failed
one, nor after one that still holds a session advisory lock, a dead connection replaced
instead of handed out, idle ones closed."""

from __future__ import annotations

import time
from typing import Any

import adbc_driver_manager
import pytest

from archiver.bulk import BulkPool


class FakeConnection:
    def __init__(self, name: str) -> None:
        self.name, self.dead, self.closed, self.rollbacks = name, False, False, 0
        self.locks, self.last = 0, ""  # session advisory locks it holds; its last statement

    def cursor(self) -> FakeConnection:
        return self

    def __enter__(self) -> FakeConnection:
        return self

    def __exit__(self, *_: object) -> None:
        pass

    def execute(self, sql: str, params: Any = None) -> None:
        if self.dead:
            raise adbc_driver_manager.OperationalError(
                "server closed the connection", status_code=adbc_driver_manager.AdbcStatusCode.IO
            )
        self.last = sql

    def fetchall(self) -> list[tuple[int]]:
        return [(self.locks,)] if "pg_locks" in self.last else [(1,)]

    def rollback(self) -> None:
        self.rollbacks += 1

    def close(self) -> None:
        self.closed = True


class Opener:
    def __init__(self) -> None:
        self.opened: list[Any] = []  # FakeConnections, compared with what the pool hands out

    def __call__(self, url: str) -> Any:
        conn = FakeConnection(f"{url}#{len(self.opened)}")
        self.opened.append(conn)
        return conn


def test_a_connection_is_reused_after_a_clean_job_and_rolled_back() -> None:
    opener = Opener()
    pool = BulkPool(open_connection=opener)
    with pool.connection("a") as first, pool.connection("a") as second:
        assert first is not second  # one job's two connections
    with pool.connection("a") as again:
        assert again in (first, second)
    with pool.connection("b") as other:
        assert other not in (first, second)  # per URL
    assert len(opener.opened) == 3 and opener.opened[0].rollbacks >= 1


def test_a_failed_job_closes_its_connection() -> None:
    opener = Opener()
    pool = BulkPool(open_connection=opener)
    with pytest.raises(RuntimeError), pool.connection("a"):
        raise RuntimeError("chunk failed")
    assert opener.opened[0].closed
    with pool.connection("a") as fresh:
        assert fresh is opener.opened[1]


def test_a_connection_the_server_dropped_is_replaced_not_handed_out() -> None:
    opener = Opener()
    pool = BulkPool(open_connection=opener)
    with pool.connection("a"):
        pass
    opener.opened[0].dead = True
    with pool.connection("a") as fresh:
        assert fresh is opener.opened[1] and opener.opened[0].closed


def test_idle_connections_are_closed() -> None:
    opener = Opener()
    pool = BulkPool(idle_seconds=0.05, open_connection=opener)
    with pool.connection("a"):
        pass
    time.sleep(0.1)
    pool.prune()
    assert opener.opened[0].closed
    with pool.connection("a") as fresh:
        assert fresh is opener.opened[1]


def test_a_connection_holding_an_advisory_lock_is_closed_not_reused() -> None:
    opener = Opener()
    pool = BulkPool(open_connection=opener)
    with pool.connection("a"):
        (first,) = opener.opened
        first.locks = 1  # a ledger operation's, not released
    assert first.closed
    with pool.connection("a") as second:
        assert second is not first


def test_a_connection_given_back_after_the_pool_closed_is_closed() -> None:
    opener = Opener()
    pool = BulkPool(open_connection=opener)
    with pool.connection("a"):
        (conn,) = opener.opened
        pool.close()  # a command's end, while a thread still held one
    assert conn.closed
