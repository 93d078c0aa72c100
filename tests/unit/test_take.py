"""Move mode's chunk statement: the locking form, the waiting form, the key-range form, and
which jobs take which."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import cast

import pytest

from archiver.archive import take
from archiver.archive.context import ChunkLimits, JobContext
from archiver.model import ArchivedFile, ArchiveRequest, KeyRange, Mode
from archiver.pgtypes.column import Column
from archiver.source.chunks import ChunkQueries, follows
from archiver.source.tables import TableInfo

KEY = Column("id", "bigint", "int8")
CUTOFF = Column("created_at", "timestamp with time zone", "timestamptz")
ORDERS = TableInfo("public", "orders", (KEY, CUTOFF), (KEY,))


def test_the_locking_form_skips_locked_rows() -> None:
    sql = ChunkQueries(ORDERS, CUTOFF).take(after_key=True)
    chosen, _, outer = sql.rpartition("FOR UPDATE SKIP LOCKED")
    assert chosen.startswith('DELETE FROM "public"."orders" WHERE ctid = ANY (ARRAY (SELECT ctid')
    assert outer.startswith(")) RETURNING ")


def test_the_waiting_form_locks_nothing_first_and_rechecks_the_chunk() -> None:
    queries = ChunkQueries(ORDERS, CUTOFF)
    sql = queries.take(after_key=True, key_range=KeyRange("100", "900"), skip_locked=False)
    assert "FOR UPDATE" not in sql
    where = sql.split("RETURNING")[0]
    # the DELETE's own WHERE after the chosen ctids: the chunk's conditions, rechecked on
    # a row's newest version where the TID scan itself is not. There they are a Filter,
    # so each setting is a scalar subquery (computed once, not parsed for every row).
    cutoff = "\"created_at\" < (SELECT current_setting('archiver.cutoff')::timestamptz)"
    chunk = (
        f"{cutoff} AND \"id\" > current_setting('archiver.range_after')::int8"
        " AND \"id\" <= current_setting('archiver.range_through')::int8"
        " AND (\"id\") > (current_setting('archiver.key_0')::int8)"
    )
    recheck = (
        f"{cutoff} AND \"id\" > (SELECT current_setting('archiver.range_after')::int8)"
        " AND \"id\" <= (SELECT current_setting('archiver.range_through')::int8)"
        " AND (\"id\") > ((SELECT current_setting('archiver.key_0')::int8))"
    )
    assert where == (
        f'DELETE FROM "public"."orders" WHERE ctid = ANY (ARRAY (SELECT ctid FROM '
        f'"public"."orders" WHERE {chunk} ORDER BY "public"."orders"."id" '
        f"LIMIT current_setting('archiver.limit')::bigint)) AND {recheck} "
    )


def test_the_key_range_form_deletes_the_range_in_one_pass() -> None:
    """No rows chosen first: the DELETE takes every old row in the key range, whose end
    `chunk_end` finds among the keys alone (old or not) in key order."""
    queries = ChunkQueries(ORDERS, CUTOFF)
    sql = queries.take(
        after_key=True, key_range=KeyRange(None, "900"), skip_locked=False, by_key_range=True
    )
    assert sql.split(" RETURNING ")[0] == (
        'DELETE FROM "public"."orders" WHERE "created_at" < '
        "(SELECT current_setting('archiver.cutoff')::timestamptz)"
        " AND \"id\" <= (SELECT current_setting('archiver.range_through')::int8)"
        " AND (\"id\") > ((SELECT current_setting('archiver.key_0')::int8))"
    )
    end = queries.chunk_end(after_key=True, key_range=KeyRange("100", None))
    keys = (
        'FROM "public"."orders" WHERE true'
        " AND \"id\" > current_setting('archiver.range_after')::int8"
        " AND (\"id\") > (current_setting('archiver.key_0')::int8)"
        ' ORDER BY "public"."orders"."id"'
    )
    cutoff = "\"created_at\" < (SELECT current_setting('archiver.cutoff')::timestamptz)"
    first = f"SELECT coalesce({cutoff}, false) {keys} LIMIT 1"
    nth = (
        f'SELECT "public"."orders"."id"::text {keys}'
        " OFFSET current_setting('archiver.limit')::bigint - 1 LIMIT 1"
    )
    last = f'SELECT "public"."orders"."id"::text {keys} DESC LIMIT 1'
    assert end == (
        f"SELECT old, nth, CASE WHEN old AND nth IS NULL THEN ({last}) END "
        f"FROM (SELECT old, CASE WHEN old THEN ({nth}) END AS nth "
        f"FROM (SELECT ({first}) AS old OFFSET 0) f OFFSET 0) n"
    )


def test_key_ranges_until_old_rows_turn_sparse() -> None:
    job = _job()
    assert job.takes_key_ranges
    job.row_locks.sparse = True
    assert job.waits_for_row_locks and not job.takes_key_ranges
    composite = dataclasses.replace(ORDERS, key=(KEY, CUTOFF))
    assert not _job(composite).takes_key_ranges
    assert not _job(wait=0).takes_key_ranges


def _job(table: TableInfo = ORDERS, mode: Mode = Mode.MOVE, wait: float = 0.1) -> JobContext:
    request = ArchiveRequest(table.qualified, "created_at", "2024-01-01T00:00:00+00:00", mode)
    return JobContext(
        "j1",
        1,
        request,
        ChunkQueries(table, CUTOFF),
        source=None,  # type: ignore[arg-type]
        storage=None,  # type: ignore[arg-type]
        catalog=None,  # type: ignore[arg-type]
        commit=None,  # type: ignore[arg-type]
        workdir=Path("."),
        limits=ChunkLimits(row_lock_wait=wait),
    )


def test_a_move_job_waits_until_a_wait_runs_out() -> None:
    job = _job()
    assert job.waits_for_row_locks
    job.row_locks.skip = True
    assert not job.waits_for_row_locks
    assert _job().waits_for_row_locks  # per job


@pytest.mark.parametrize(
    "job",
    [
        _job(mode=Mode.COPY),
        _job(wait=0),
        _job(dataclasses.replace(ORDERS, partitioned=True)),
        _job(dataclasses.replace(ORDERS, key=(Column("code", "text", "text"),))),
    ],
    ids=["copy", "wait 0", "partitioned", "text key"],
)
def test_other_jobs_skip_locked_rows(job: JobContext) -> None:
    assert not job.waits_for_row_locks


EMAIL = Column("email", "ext.citext", "citext", "S", base_schema="ext")


def test_an_extension_types_key_is_compared_with_its_own_operators() -> None:
    """citext in a schema off the search_path: cast to it and compared by its schema; a
    composite key with it spelled out column by column (a row comparison would resolve
    each operator through the search_path), led by the first column's bound."""
    values = ["$a", "$b"]
    assert follows((KEY, EMAIL), values) == (
        '"id" >= $a AND (("id" > $a) OR ("id" = $a AND "email" OPERATOR("ext".>) $b))'
    )
    assert follows((EMAIL,), values[:1]) == '"email" OPERATOR("ext".>) $a'
    assert follows((KEY,), values[:1]) == '("id") > ($a)'
    table = TableInfo("public", "users", (EMAIL, CUTOFF), (EMAIL,))
    sql = ChunkQueries(table, CUTOFF).read(after_key=True, key_range=KeyRange("a", "b", 2))
    assert 'current_setting(\'archiver.key_0\')::"ext"."citext"' in sql
    assert '"email" OPERATOR("ext".<=) current_setting(\'archiver.range_through\')' in sql
    assert '"email"::text AS "email"' in sql  # the driver has no citext: its text
    assert sql.endswith(
        'ORDER BY "public"."users"."email" LIMIT current_setting(\'archiver.limit\')::bigint'
    )


@dataclasses.dataclass
class _File:
    row_count: int


@pytest.mark.parametrize(
    ("found", "rows_taken", "expected"),
    [
        # (old, nth, last) -> rows the DELETE took -> (file's rows, choose rows, sparse, end)
        ((None, None, None), None, (None, False, False, None)),  # no row left: done
        ((False, None, None), None, (None, True, True, None)),  # the next row is new
        ((True, "600", None), 500, (500, False, False, "600")),  # a full range, dense
        ((True, "600", None), 449, (449, False, True, "600")),  # under 90%: sparse
        ((True, "600", None), None, (None, True, True, "600")),  # empty: choose rows now
        ((True, None, "900"), 40, (40, False, False, "900")),  # the last range
        ((True, None, "900"), None, (None, False, False, "900")),  # the last, empty: done
    ],
)
def test_what_a_key_range_chunk_does_with_what_it_found(
    found: tuple[bool | None, str | None, str | None],
    rows_taken: int | None,
    expected: tuple[int | None, bool, bool, str | None],
) -> None:
    job, ran = _job(), list[KeyRange]()
    taken = None if rows_taken is None else cast(ArchivedFile, _File(rows_taken))

    def delete(statement: str, key_range: KeyRange) -> ArchivedFile | None:
        ran.append(key_range)
        return taken

    file, choose_rows = take.take_key_range(job, found, delete, 500, True)
    through = ran[0].through if ran else None
    assert (
        file.row_count if file else None,
        choose_rows,
        job.row_locks.sparse,
        through,
    ) == expected
