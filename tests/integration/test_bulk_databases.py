"""The ADBC database object a process's bulk connections share (archiver.bulk._Databases),
against a real PostgreSQL: what it shares, when it is made again, what it reads of a type
not built in, and many threads opening and closing connections on it while it is
replaced under them."""

from __future__ import annotations

import threading

from archiver.bulk import _Databases, fetch_and_rollback
from tests.support import sql, wait_until

MOOD = "SELECT 'ok'::mood AS m"


def test_connections_share_one_database_object_until_it_is_old(database_url: str) -> None:
    kept, fresh = _Databases(reuse_seconds=3600), _Databases(reuse_seconds=0)
    first, other = kept.connect(None, database_url), fresh.connect(None, database_url)
    sql(database_url, "CREATE TYPE mood AS ENUM ('sad', 'ok')")
    first.close()  # the shared object outlives the connection it was made for
    shared, made_again = kept.connect(None, database_url), fresh.connect(None, database_url)
    try:
        assert shared._db is first._db and made_again._db is not other._db  # type: ignore[attr-defined]
        for conn in (shared, made_again):
            # a type not built in: opaque bytes through the driver (its own table of
            # types), its text as archiver selects it
            assert fetch_and_rollback(conn, MOOD) == [(b"ok",)]
            assert fetch_and_rollback(
                conn, "SELECT 'ok'::mood::text, now()::date = current_date"
            ) == [("ok", True)]
    finally:
        for conn in (shared, made_again, other):
            conn.close()


def test_threads_open_and_close_while_it_is_replaced(database_url: str) -> None:
    databases = _Databases(reuse_seconds=0.005)  # replaced every few opens, under the others
    failures: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(10):
                conn = databases.connect(None, database_url)
                try:
                    assert fetch_and_rollback(conn, "SELECT $1::int8 * 2", (n * 100 + i,)) == [
                        (2 * (n * 100 + i),)
                    ]
                finally:
                    conn.close()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    # every connection, and every making's own, closed: its backend leaves the server's
    # list a moment after the client's goodbye (it exits on its own time)
    wait_until(
        lambda: (
            sql(
                database_url,
                "SELECT count(*) AS n FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()",
            )[0]["n"]
            == 0
        ),
        timeout=10,
        what="every backend gone",
    )
