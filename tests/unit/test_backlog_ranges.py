"""The backlog plan's page ranges (archive.backlog.PageRanges) and the rule that chooses
it (archive.plan.choose_plan): pure functions, no database."""

from __future__ import annotations

from archiver.archive.backlog import PageRanges
from archiver.archive.plan import BACKLOG, KEY, BacklogRule, choose_plan
from archiver.model import ArchiveRequest, KeyRange, Mode, PageSpan
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


def test_a_split_backlog_shares_the_pages_and_each_share_cuts_only_its_own() -> None:
    spans = PageSpan.split(12_000, 3)
    assert spans == [PageSpan(0, 4_000, 3), PageSpan(4_000, 8_000, 3), PageSpan(8_000, None, 3)]
    assert PageSpan.split(2, 5) == [PageSpan(0, 1, 2), PageSpan(1, None, 2)]  # fewer pages
    assert PageSpan.split(0, 3) == [PageSpan(0, None, 1)]
    assert [s.first for s in PageSpan.split(7, 6)] == [0, 2, 4, 6]  # no share past the end
    # a middle share: ranges of about a chunk each, the last ending where the share does
    middle = PageRanges.plan(12_000, 300_000, 100_000, 2, spans[1])
    assert (middle.pages, middle.count) == (1_334, 3)
    assert [middle.bounds(i) for i in range(3)] == [(4_000, 5_334), (5_334, 6_668), (6_668, 8_000)]
    last = PageRanges.plan(12_000, 300_000, 100_000, 2, spans[2])
    assert last.bounds(last.count - 1)[1] is None  # the last share runs on to the table's end
    assert PageRanges.from_json(middle.to_json()) == middle
    # every page of the table in exactly one range of exactly one share
    pages = [
        p
        for span in spans
        for ranges in [PageRanges.plan(12_000, 300_000, 50_000, 2, span)]
        for i in range(ranges.count)
        for p in range(ranges.bounds(i)[0], ranges.bounds(i)[1] or 12_000)
    ]
    assert pages == list(range(12_000))


def test_a_share_of_a_split_backlog_takes_the_backlog_plan() -> None:
    rule = BacklogRule(connections=1, min_rows=1_000)
    table = TableInfo("public", "orders", columns=(), key=())
    request = ArchiveRequest(
        "public.orders", "created_at", "2024-01-01", Mode.MOVE, pages=PageSpan(100, 200, 3)
    )
    chosen, why = choose_plan(rule, request, table, 300, 1_000_000)
    assert chosen == BACKLOG and why.startswith("pages 100-199, one of 3 shares")
    assert ArchiveRequest.from_payload(request.payload()) == request
    assert request.range_keys(1, 3)[0].endswith(":pages:1/3")
