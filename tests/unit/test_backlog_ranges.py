"""The backlog plan's page ranges (archive.backlog.PageRanges) and the rule that chooses
it (archive.plan.choose_plan): pure functions, no database."""

from __future__ import annotations

from archiver.archive.backlog import PageRanges
from archiver.archive.plan import BACKLOG, KEY, BacklogRule, choose_plan
from archiver.model import ArchiveRequest, KeyRange, Mode
from archiver.source.tables import TableInfo


def test_ranges_hold_about_a_chunk_of_old_rows_and_one_per_connection_at_least() -> None:
    # 12,000 pages holding 1M old rows: ranges of 100k rows are 1,200 pages
    ranges = PageRanges.plan(12_000, 1_000_000, 100_000, 2)
    assert (ranges.pages, ranges.count) == (1_200, 10)
    assert ranges.bounds(0) == (0, 1_200)
    assert ranges.bounds(9) == (10_800, None)  # the last runs on to the table's end
    # a chunk bigger than the table: one range per connection
    assert PageRanges.plan(12_000, 1_000_000, 2_000_000, 2) == PageRanges(6_000, 2)
    assert PageRanges.plan(12_001, 1_000_000, 2_000_000, 2) == PageRanges(6_001, 2)
    assert PageRanges.plan(1, 30, 100_000, 2) == PageRanges(1, 1)
    assert PageRanges.plan(0, 0, 100_000, 2) == PageRanges(1, 1)  # empty: one open range


def test_ranges_left_and_their_record() -> None:
    ranges = PageRanges(100, 4, frozenset({0, 2}))
    assert ranges.left() == [1, 3]
    assert PageRanges.from_json(ranges.to_json()) == ranges
    assert ranges.to_json() == {"pages": 100, "ranges": 4, "done": [0, 2]}


def test_the_rule() -> None:
    rule = BacklogRule(connections=2, min_rows=1_000)
    table = TableInfo("public", "orders", columns=(), key=())
    request = ArchiveRequest("public.orders", "created_at", "2024-01-01", Mode.MOVE)
    assert choose_plan(rule, request, table, 900_000, 1_000_000)[0] == BACKLOG
    assert choose_plan(rule, request, table, 400_000, 1_000_000) == (
        KEY,
        "chunks in key order (~400,000 of ~1,000,000 rows older than the cutoff: under half "
        "the table)",
    )
    assert "ARCHIVER_BACKLOG_MIN_ROWS" in choose_plan(rule, request, table, 900, 1_000)[1]
    assert "BACKLOG_CONNECTIONS" in choose_plan(BacklogRule(1), request, table, 10**6, 10**6)[1]
    assert "rate limit" in choose_plan(rule, request, table, 10**6, 10**6, throttled=True)[1]
    split = ArchiveRequest(
        "public.orders", "created_at", "2024-01-01", Mode.COPY, key_range=KeyRange(None, "5", 2)
    )
    assert "--parallel" in choose_plan(rule, split, table, 10**6, 10**6)[1]
    children = ArchiveRequest(
        "public.orders", "created_at", "2024-01-01", Mode.MOVE, with_children=True
    )
    assert "children" in choose_plan(rule, children, table, 10**6, 10**6)[1]
