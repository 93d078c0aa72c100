"""Restore's move back with the catalog in another database than the source
(ARCHIVER_SOURCE_URL): the rows go in in one source transaction, the files leave the
archive in one catalog transaction, bridged by the ledger's intent and the source
transaction's id (sql/015, archiver.ledger). Killed on either side of the source's
COMMIT, the next sweep asks the source whether it committed and finishes or undoes it:
each row in exactly one place throughout."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from archiver.testing.reference import seed_orders
from tests.support import archiver_cmd, fresh_database, sql, start_process
from tests.support.crash import kill_command_at
from tests.support.harness import Harness

LO, HI = "2024-12-28T12:00:00+00:00", "2024-12-29T06:00:00+00:00"  # in files 4 to 6
RESTORE_RANGE = ("restore", "--table", "orders", "--from", LO, "--to", HI)


@pytest.fixture
def apart(h: Harness) -> Iterator[tuple[Harness, str]]:
    """6,000 orders in a source database of their own, moved in files of 1,000 rows."""
    with fresh_database("archiver_src") as source:
        seed_orders(source, 6000)
        sql(source, "CREATE TABLE snapshot AS SELECT * FROM orders")
        h = h.with_env(ARCHIVER_SOURCE_URL=source)
        h.archive("--table", "orders", "--before", "2025-01-01", "--chunk-rows", "1000")
        yield h, source


def live(source: str) -> set[int]:
    return {r["id"] for r in sql(source, "SELECT id FROM orders")}


def in_range(source: str) -> set[int]:
    rows = sql(
        source,
        "SELECT id FROM snapshot WHERE created_at >= $1::text::timestamptz "
        "AND created_at < $2::text::timestamptz",
        LO,
        HI,
    )
    return {r["id"] for r in rows}


def one_place(h: Harness, source: str, *, back: set[int]) -> None:
    """Each order exactly once, live or archived; exactly `back` live, unchanged."""
    h.exactly_once(set(range(1, 6001)), source_url=source)
    assert live(source) == back
    changed = sql(
        source, "SELECT count(*) FROM (SELECT * FROM orders EXCEPT SELECT * FROM snapshot) d"
    )
    assert changed[0][0] == 0


def ledger(h: Harness) -> list[Any]:
    return h.sql(
        "SELECT status, rows, source_xid IS NOT NULL AS bridged FROM archive_ledger "
        "WHERE operation = 'restore'"
    )


def test_a_restore_moves_rows_back_into_a_source_apart_from_its_catalog(
    apart: tuple[Harness, str],
) -> None:
    h, source = apart
    back = in_range(source)
    dry = h.cli("restore", "--table", "orders", "--from", LO, "--to", HI, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert not live(source) and not ledger(h)
    done = h.cli("restore", "--table", "orders", "--from", LO, "--to", HI)
    assert done.returncode == 0, done.stderr
    assert f"restored {len(back)} rows from 3 files" in done.stdout, done.stdout
    assert [tuple(r) for r in ledger(h)] == [("done", len(back), True)]
    one_place(h, source, back=back)
    assert not h.value("SELECT count(*) FROM archive_files WHERE retired_by IS NOT NULL "
                       "AND state = 'committed'")  # fmt: skip
    # the restored rows are archived again by the next move: once
    h.archive("--table", "orders", "--before", "2025-01-01", "--chunk-rows", "1000")
    one_place(h, source, back=set())


@pytest.mark.parametrize(
    ("point", "outcome"),
    [("restore_intent_recorded", "abandoned"), ("restore_source_committed", "done")],
)
@pytest.mark.slow
def test_a_restore_killed_around_the_source_commit_is_settled_by_the_sweep(
    apart: tuple[Harness, str], tmp_path: Path, point: str, outcome: str
) -> None:
    h, source = apart
    back = in_range(source) if outcome == "done" else set()
    kill_command_at(h.env, point, tmp_path / "restore.log", *RESTORE_RANGE)
    claimed = h.value("SELECT count(*) FROM archive_files WHERE retired_by IS NOT NULL "
                      "AND state = 'committed'")  # fmt: skip
    assert claimed == 3  # still committed, claimed: no other operation takes them
    assert live(source) == back  # before the source's COMMIT, none; after, the range
    assert [r["status"] for r in ledger(h)] == ["running"]
    refused = h.cli("erase", "--table", "orders", "--where", "id > 0")
    assert refused.returncode == 1 and "left the archive meanwhile" in refused.stderr
    # a worker's sweep asks the source whether the restore's transaction committed
    worker_log = tmp_path / "worker.log"
    proc = start_process(archiver_cmd("worker", "--burst"), h.env, worker_log)
    assert proc.wait(120) == 0
    assert [r["status"] for r in ledger(h)] == [outcome]
    assert not h.value("SELECT count(*) FROM archive_files WHERE retired_by IS NOT NULL "
                       "AND state = 'committed'")  # fmt: skip
    one_place(h, source, back=back)
    if outcome == "done":
        assert "its rows had moved back before its process died" in worker_log.read_text()
    verified = h.cli("verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
