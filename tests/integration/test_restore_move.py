"""Restore moves rows back: each row in exactly one place -- live in PostgreSQL or in
one catalogued file (and the Delta table) -- through crashes at every step; copies
(--into, --keep-archive) leave the archive as it was; a later move archives the
restored rows once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from archiver.testing.reference import seed_orders
from tests.support.archive import icu_rewrites
from tests.support.crash import kill_command_at
from tests.support.delta import catalogued, delta, duck, uri
from tests.support.harness import Harness

LO, HI = "2024-12-28T12:00:00+00:00", "2024-12-29T06:00:00+00:00"  # in files 4 to 6
RESTORE_RANGE = ("restore", "--table", "orders", "--from", LO, "--to", HI)


def archive_orders(h: Harness, rows: int = 6000) -> set[int]:
    """`rows` orders, all older than the cutoff, moved in files of 1,000 rows."""
    seed_orders(h.url, rows)
    h.sql("CREATE TABLE snapshot AS SELECT * FROM orders")
    h.archive("--table", "orders", "--before", "2025-01-01", "--chunk-rows", "1000")
    return set(range(1, rows + 1))


def in_range(h: Harness) -> set[int]:
    rows = h.sql(
        "SELECT id FROM snapshot WHERE created_at >= $1::text::timestamptz "
        "AND created_at < $2::text::timestamptz",
        LO,
        HI,
    )
    return {r["id"] for r in rows}


def one_place(h: Harness, ids: set[int], *, live: set[int]) -> None:
    """Each of `ids` exactly once, live or archived; exactly `live` are live, with the
    values they had; the blobs are the catalog's."""
    h.exactly_once(ids)
    assert h.keys() == live
    changed = h.value("SELECT count(*) FROM (SELECT * FROM orders EXCEPT SELECT * FROM snapshot) d")
    assert changed == 0


def ledger(h: Harness) -> list[Any]:
    return h.sql("SELECT operation, status, rows, detail::text AS detail FROM archive_ledger")


def test_a_range_restore_moves_rows_back_and_a_later_move_archives_them_once(h: Harness) -> None:
    ids = archive_orders(h)
    back = in_range(h)
    before = {r["path"] for r in h.sql("SELECT path FROM archive_files")}

    dry = h.cli("restore", "--table", "orders", "--from", LO, "--to", HI, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would be rewritten with the other" in dry.stdout
    assert {r["path"] for r in h.sql("SELECT path FROM archive_files")} == before
    assert not h.keys() and not ledger(h)

    done = h.cli("restore", "--table", "orders", "--from", LO, "--to", HI)
    assert done.returncode == 0, done.stderr
    assert f"restored {len(back)} rows" in done.stdout
    one_place(h, ids, live=back)
    # the two files at the range's ends were rewritten (new names), those inside emptied
    after = {r["path"] for r in h.sql("SELECT path FROM archive_files")}
    assert len(after - before) == 2 and all("/rewrite-" in p for p in after - before)
    assert not h.value("SELECT count(*) FROM archive_files WHERE state = 'retired'")
    [entry] = ledger(h)
    assert (entry["operation"], entry["status"], entry["rows"]) == ("restore", "done", len(back))
    verified = h.cli("verify", "--table", "orders")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # the rewritten files' catalogued ranges are their rows' own
    rewritten = h.sql(
        "SELECT min_key[1]::int AS lo, max_key[1]::int AS hi, row_count FROM archive_files "
        "WHERE path LIKE '%/rewrite-%' ORDER BY 1"
    )
    assert all(r["hi"] - r["lo"] + 1 == r["row_count"] for r in rewritten)

    # a restore of the same range finds nothing more to bring back
    again = h.cli("restore", "--table", "orders", "--from", LO, "--to", HI)
    assert "restored 0 rows" in again.stdout or "no archived files match" in again.stderr

    # the restored rows are archived again by the next move: once
    h.archive("--table", "orders", "--before", "2025-01-01", "--chunk-rows", "1000")
    one_place(h, ids, live=set())


def test_a_restore_killed_before_its_commit_changes_nothing(h: Harness, tmp_path: Path) -> None:
    ids = archive_orders(h)
    before = sorted(r["path"] for r in h.sql("SELECT path FROM archive_files"))
    kill_command_at(h.env, "restore_before_commit", tmp_path / "restore.log", *RESTORE_RANGE)
    # the rewrites were uploaded, not catalogued: the rows are where they were
    assert not h.keys()
    assert sorted(r["path"] for r in h.sql("SELECT path FROM archive_files")) == before
    strays = [b for b in h.blobs() if "/rewrite-" in b]
    assert len(strays) == 2
    assert [r["status"] for r in ledger(h)] == ["running"]
    h.exactly_once(ids, stray_blobs=frozenset(strays))
    # a worker's sweep finds the dead operation: its blobs go, the row says abandoned
    h.drain()  # a burst worker: its maintenance queues the sweep, then runs it
    assert [r["status"] for r in ledger(h)] == ["abandoned"]
    one_place(h, ids, live=set())
    # and the restore, run again, works
    done = h.cli("restore", "--table", "orders", "--from", LO, "--to", HI)
    assert done.returncode == 0, done.stderr
    one_place(h, ids, live=in_range(h))


def test_a_restore_killed_after_its_commit_is_finished_by_the_sweep(
    h: Harness, tmp_path: Path
) -> None:
    ids = archive_orders(h)
    back = in_range(h)
    kill_command_at(h.env, "restore_committed", tmp_path / "restore.log", *RESTORE_RANGE)
    # committed: the rows are live, their files retired (not counted), not yet deleted
    retired = h.value("SELECT count(*) FROM archive_files WHERE state = 'retired'")
    assert retired == 3
    one_place(h, ids, live=back)
    assert len(h.blobs()) == 6 + 2  # the retired files' blobs are there, and two rewrites
    h.drain()
    assert not h.value("SELECT count(*) FROM archive_files WHERE state = 'retired'")
    assert len(h.blobs()) == 6 - 3 + 2
    one_place(h, ids, live=back)
    verified = h.cli("verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_copies_leave_the_archive_as_it_was(h: Harness) -> None:
    ids = archive_orders(h, 3000)
    before = h.sql("SELECT path, state, md5 FROM archive_files ORDER BY path")
    kept = h.cli("restore", "--table", "orders", "--keep-archive")
    assert kept.returncode == 0, kept.stderr and "left the archive" not in kept.stdout
    assert h.keys() == ids
    into = h.cli("restore", "--table", "orders", "--into", "orders_copy")
    assert into.returncode == 0, into.stderr
    assert h.value("SELECT count(*) FROM orders_copy") == 3000
    assert h.sql("SELECT path, state, md5 FROM archive_files ORDER BY path") == before
    assert not ledger(h)
    assert sorted(r["id"] for r in h.archived()) == sorted(ids)


def test_a_text_keyed_table_is_rewritten_with_postgres_key_order(h: Harness) -> None:
    """Keys Arrow orders otherwise than PostgreSQL (text under an ICU collation): a
    rewritten file's catalogued key range is PostgreSQL's, and verify agrees."""
    h.sql('CREATE TABLE codes (code text COLLATE "und-x-icu" PRIMARY KEY, at timestamptz)')
    # ICU puts every a… before every B…; bytes put B before a. Files of 150 rows: the
    # second holds the last 50 a-keys and the first 100 B-keys
    h.sql(
        "INSERT INTO codes SELECT CASE WHEN g % 2 = 0 THEN 'B' ELSE 'a' END "
        "|| lpad(g::text, 4, '0'), '2024-01-01'::timestamptz + g * interval '1 hour' "
        "FROM generate_series(1, 400) g"
    )
    h.sql("CREATE TABLE codes_before AS SELECT * FROM codes")
    h.archive("--table", "codes", "--before", "2025-01-01", "--column", "at", "--chunk-rows", "150")
    restore = ("--table", "codes", "--from", "2024-01-03T00:00:00Z", "--to", "2024-01-05T00:00:00Z")
    done = h.cli("restore", *restore)
    assert done.returncode == 0, done.stderr
    live = {r["code"] for r in h.sql("SELECT code FROM codes")}
    archived = Counter(r["code"] for r in h.archived("public.codes"))
    assert max(archived.values()) == 1 and not live & archived.keys()
    assert live | archived.keys() == {r["code"] for r in h.sql("SELECT code FROM codes_before")}
    verified = h.cli("verify", "--table", "codes")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    mixed = 0
    for f, codes, ends in icu_rewrites(h.url, h.azurite.connection_string, h.container):
        assert (f["min_key"], f["max_key"]) == ([ends["lo"]], [ends["hi"]])
        mixed += min(codes) != ends["lo"]  # bytes would have said otherwise
    assert mixed, "no rewritten file whose ends differ between the two orders"


def test_the_delta_table_loses_the_restored_rows_in_one_commit(h: Harness) -> None:
    """With Delta publishing: after a restore, the publication that takes the retired
    files out adds their rewrites in the same version; delta-rs and DuckDB read exactly
    the rows still archived, and verify finds the log equal to the catalog."""
    d = h.with_env(ARCHIVER_DELTA="true")
    ids = archive_orders(d)
    d.drain()  # publishes
    assert delta(d).to_pyarrow_table().num_rows == 6000
    version = delta(d).version()
    back = in_range(d)

    done = d.cli("restore", "--table", "orders", "--from", LO, "--to", HI, "--no-wait")
    assert done.returncode == 0, done.stderr
    # committed, not published yet: the retired files are still in the Delta table
    assert d.value("SELECT count(*) FROM archive_files WHERE state = 'retired'") == 3
    d.drain()  # the worker's sweep queues the table's publication, and runs it
    table = delta(d)
    assert table.version() == version + 1  # one commit: removes and adds together
    assert Counter(table.get_add_actions(flatten=True).column("path").to_pylist()) == Counter(
        catalogued(d)
    )
    rows = sorted(table.to_pyarrow_table().column("id").to_pylist())
    assert rows == sorted(ids - back)
    found = duck(d).execute(f"SELECT count(*) FROM delta_scan('{uri(d, 'public.orders')}')")
    assert found.fetchone() == (len(ids - back),)
    one_place(d, ids, live=back)
    verified = d.cli("verify", "--table", "orders")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_rows_a_trigger_skips_stay_archived_in_a_whole_restore(h: Harness) -> None:
    """A whole-table move back counts what went in; where a BEFORE INSERT trigger skipped
    rows (RETURN NULL), fewer did, and exactly those stay archived, in rewrites."""
    ids = archive_orders(h, 3000)
    h.sql(
        "CREATE FUNCTION skip_odd() RETURNS trigger LANGUAGE plpgsql AS "
        "$$BEGIN IF NEW.id % 2 = 1 THEN RETURN NULL; END IF; RETURN NEW; END$$;"
        "CREATE TRIGGER skip_odd BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION skip_odd()"
    )
    done = h.cli("restore", "--table", "orders")
    assert done.returncode == 0, done.stderr
    even = {i for i in ids if i % 2 == 0}
    assert f"restored {len(even)} rows" in done.stdout
    one_place(h, ids, live=even)
    assert h.value("SELECT sum(row_count) FROM archive_files") == len(ids) - len(even)
    verified = h.cli("verify", "--table", "orders")
    assert verified.returncode == 0, verified.stdout + verified.stderr
