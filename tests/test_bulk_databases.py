"""The ADBC database object a process's bulk connections share (archiver.bulk._Databases),
against a real PostgreSQL: what it shares, when it is made again, and many threads
opening and closing connections on it while it is replaced under them."""

from __future__ import annotations

import threading

from archiver.bulk import _Databases, fetch_all
from tests.support import sql

MOOD = "SELECT 'ok'::mood AS m"  # the driver knows the enum only if it read it from pg_type


def test_connections_share_one_picture_of_the_server_until_it_is_old(database_url: str) -> None:
    kept, fresh = _Databases(reuse_seconds=3600), _Databases(reuse_seconds=0)
    first = kept.connect(None, database_url)
    fresh.connect(None, database_url).close()
    sql(database_url, "CREATE TYPE mood AS ENUM ('sad', 'ok')")
    first.close()  # the shared database outlives the connection it was made for
    shared, made_again = kept.connect(None, database_url), fresh.connect(None, database_url)
    try:
        # made before the type: the driver hands its values over as opaque bytes
        assert fetch_all(shared, MOOD) == [(b"ok",)]
        assert fetch_all(made_again, MOOD) == [("ok",)]
        assert fetch_all(shared, "SELECT 'ok'::mood::text") == [("ok",)]  # as archiver reads
    finally:
        shared.close()
        made_again.close()


def test_threads_open_and_close_while_it_is_replaced(database_url: str) -> None:
    databases = _Databases(reuse_seconds=0.005)  # replaced every few opens, under the others
    failures: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(25):
                conn = databases.connect(None, database_url)
                try:
                    assert fetch_all(conn, "SELECT $1::int8 * 2", (n * 100 + i,)) == [
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
    left = sql(
        database_url,
        "SELECT count(*) AS n FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    assert left[0]["n"] == 0  # every connection, and every making's own, closed
