"""A chunk's values handed to its statements as transaction-local settings (see
source.chunks for why settings and not parameters), and the lock timeout of what a job
runs outside its chunks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import adbc_driver_manager

from archiver.bulk import BulkConnection, BulkCursor
from archiver.model import KeyRange


def bind_chunk(
    cur: BulkCursor,
    cutoff: str,
    after: list[str] | None,
    limit: int,
    key_range: KeyRange | None = None,
    timeouts: tuple[float, float] = (0.0, 0.0),
) -> None:
    """Hand the chunk's values to the next statement as transaction-local settings, with
    its (lock_timeout, statement_timeout) in seconds (0: none)."""
    # jit off: compiling the chunk's expressions costs time on every chunk and gains
    # nothing on a statement that only streams rows.
    lock_timeout, statement_timeout = timeouts
    names = ["archiver.cutoff", "archiver.limit", "jit", "lock_timeout", "statement_timeout"]
    values = [
        cutoff,
        str(limit),
        "off",
        _milliseconds(lock_timeout),
        _milliseconds(statement_timeout),
    ]
    for i, value in enumerate(after or []):
        names.append(f"archiver.key_{i}")
        values.append(value)
    if key_range is not None:
        for name, bound in (
            ("first", key_range.first),
            ("after", key_range.after),
            ("through", key_range.through),
        ):
            if bound is not None:
                names.append(f"archiver.range_{name}")
                values.append(bound)
    calls = ", ".join(f"set_config(${2 * i + 1}, ${2 * i + 2}, true)" for i in range(len(names)))
    params: list[str] = []
    for name, value in zip(names, values, strict=True):
        params += [name, value]
    cur.execute(f"SELECT {calls}", tuple(params))
    cur.fetchall()


def set_lock_timeout(cur: BulkCursor, seconds: float) -> None:
    """The lock_timeout of the rest of the transaction."""
    cur.execute("SELECT set_config('lock_timeout', $1, true)", (_milliseconds(seconds),))
    cur.fetchall()


@contextlib.contextmanager
def session_lock_timeout(conn: BulkConnection, seconds: float) -> Iterator[None]:
    """The connection's lock_timeout for statements run outside a chunk's transaction
    (each in one of its own: a job's set-up), put back as it was after."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT current_setting('lock_timeout'), set_config('lock_timeout', $1, false)",
            (_milliseconds(seconds),),
        )
        previous = cur.fetchall()[0][0]
    conn.commit()
    try:
        yield
    finally:
        with contextlib.suppress(adbc_driver_manager.Error):  # a connection gone: no matter
            conn.rollback()
            with conn.cursor() as cur:
                cur.execute("SELECT set_config('lock_timeout', $1, false)", (previous,))
                cur.fetchall()
            conn.commit()


def _milliseconds(seconds: float) -> str:
    """A timeout setting's value: whole milliseconds, 0 for none."""
    return str(round(seconds * 1000))
