"""A command costs what it touches: `archiver query` (both modes) reads nothing of the
tables a statement does not name, and nothing of the files the catalog rules out by the
statement's constraints on the cutoff or the key -- not even their footers; erase
neither. Shown by deleting those files' blobs from storage under the catalog: a command
that opened any of them would fail (each did on a84fc94, where every query bound every
file of every archived table, ~12 ms a file on Azurite)."""

from __future__ import annotations

import datetime as dt
import json

from azure.storage.blob import ContainerClient

from tests.support.harness import Harness

SCHEMA = """
CREATE TABLE events (id bigint PRIMARY KEY, customer int NOT NULL, created_at timestamptz NOT NULL);
CREATE INDEX ON events (created_at);
INSERT INTO events SELECT g, g % 10, '2024-01-01'::timestamptz + g * interval '1 hour'
    FROM generate_series(1, 24 * 12) g;
CREATE TABLE other (id bigint PRIMARY KEY, created_at timestamptz NOT NULL);
INSERT INTO other SELECT g, '2024-01-01' FROM generate_series(1, 10) g;
"""


def day(n: int) -> str:
    return (dt.date(2024, 1, 1) + dt.timedelta(days=n)).isoformat()


def answer(h: Harness, *args: str) -> list[dict[str, object]]:
    done = h.cli("query", *args[:-1], "--format", "json", args[-1])
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_what_a_statement_does_not_name_or_rules_out_is_never_opened(h: Harness) -> None:
    h.sql(SCHEMA)
    for n in range(1, 11):  # a job a day: ten files of 24 rows (the first 23)
        h.enqueue("--table", "events", "--before", day(n))
    h.enqueue("--table", "other", "--before", day(1))
    h.drain()
    early = [
        r["path"]
        for r in h.sql(
            "SELECT path FROM archive_files WHERE source_table = 'public.events' "
            "AND max_cutoff_value < $1::text::timestamptz",
            day(4),  # a day before the bound below: its margin
        )
    ]
    assert len(early) == 4
    client = ContainerClient.from_connection_string(h.azurite.connection_string, h.container)
    for path in early:  # gone from storage, still in the catalog
        client.delete_blob(path)
    late = h.value("SELECT count(*) FROM events") + 24 * 5  # archived from day 5 on, + live
    # a statement naming no table, or another one, reads none of events' files
    assert answer(h, "--with-live", "SELECT 1 AS one") == [{"one": 1}]
    assert answer(h, "SELECT count(*) AS n FROM other") == [{"n": 10}]
    assert answer(h, "--with-live", "SELECT count(*) AS n FROM other") == [{"n": 10}]
    # bounded by the cutoff: the files before it are ruled out by the catalog
    where = f"created_at >= '{day(5)}'"
    assert answer(h, f"SELECT count(*) AS n FROM events WHERE {where}") == [{"n": 24 * 5}]
    assert answer(h, "--with-live", f"SELECT count(*) AS n FROM events e WHERE e.{where}") == [
        {"n": late}
    ]
    assert answer(h, "SELECT count(*) AS n FROM events WHERE id BETWEEN 200 AND 230") == [{"n": 31}]
    # a statement every file is ruled out for still has the table (and its columns)
    assert answer(h, "SELECT count(id) AS n FROM events WHERE id < 0") == [{"n": 0}]
    # and what reads the whole table says which file it could not read
    whole = h.cli("query", "SELECT count(*) FROM events")
    assert whole.returncode == 1, whole.stderr
    assert any(p.rsplit("/", 1)[1] in whole.stderr for p in early), whole.stderr
    # an erasure bounded by the cutoff reads only the files it can match
    erased = h.cli("erase", "--table", "events", "--where", f"{where} AND customer = 3")
    assert erased.returncode == 0, erased.stderr
    assert "erased 12 rows" in erased.stdout, erased.stdout


def test_what_cannot_be_ruled_out_is_read(h: Harness) -> None:
    """The pruning never leaves out a file a row could come from: a text key whose ends
    read as numbers sorts as text ('100' < '20' < '3'), a name in other letters' case is
    the same table (as DuckDB resolves it), and a statement DuckDB's parse cannot be
    walked for (a PIVOT) reads every archived table."""
    h.sql("""
        CREATE TABLE codes (code text PRIMARY KEY, created_at timestamptz NOT NULL);
        INSERT INTO codes VALUES ('100', '2024-01-01'), ('20', '2024-01-01'),
            ('3', '2024-01-01'), ('4', '2024-02-01');
    """)
    h.enqueue("--table", "codes", "--before", "2024-01-02")
    h.drain()
    [(low, high)] = h.sql("SELECT min_key[1], max_key[1] FROM archive_files")
    assert (low, high) == ("100", "3")  # as text: 20 lies outside [100, 3] as a number
    for mode in ([], ["--with-live"]):
        assert answer(h, *mode, "SELECT code FROM codes WHERE code = '20'") == [{"code": "20"}]
        assert answer(h, *mode, "SELECT count(*) AS n FROM CODES c WHERE C.code >= '2'") == [
            {"n": 2 + len(mode)}
        ]
        pivot = answer(
            h, *mode, "PIVOT (SELECT code FROM codes) ON code IN ('20', '4') USING count(*)"
        )
        assert pivot == [{"20": 1, "4": len(mode)}], pivot
