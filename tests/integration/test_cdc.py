"""The CDC marker, read back as a consumer reads it: on a wal_level = logical cluster of
the test's own, a test_decoding slot sees one transactional `archiver` message in the
transaction of each committed move chunk, and none with --no-cdc-marker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from archiver.testing.reference import seed_orders
from tests.support import private_database, run_cli, sql, sql_value, start_worker

pytestmark = pytest.mark.slow


@pytest.fixture
def logical() -> Iterator[str]:
    settings = ("wal_level=logical", "max_replication_slots=4", "max_wal_senders=4")
    with private_database(*settings) as (_, url):
        yield url


def changes(url: str) -> list[str]:
    rows = sql(url, "SELECT data FROM pg_logical_slot_get_changes('cdc', NULL, NULL)")
    return [str(r["data"]) for r in rows]


# The key plan: 2,680 of 7,000 rows older than 2024-12-29, three chunks; the backlog plan
# (archive.backlog, its minimum lowered): 5,560 older than 2024-12-31, a file a range.
PLANS = {"key": ({}, "2024-12-29"), "backlog": ({"ARCHIVER_BACKLOG_MIN_ROWS": "1"}, "2024-12-31")}


@pytest.mark.parametrize("plan", PLANS)
def test_one_marker_per_committed_chunk(logical: str, tmp_path: Path, plan: str) -> None:
    url = logical
    extra, cutoff = PLANS[plan]
    env = {
        "PATH": "/usr/bin:/bin",
        "ARCHIVER_DATABASE_URL": url,
        "ARCHIVER_STORAGE_URL": f"file://{tmp_path}/store",
        "TMPDIR": str(tmp_path),
        **extra,
    }
    assert run_cli(env, "migrate").returncode == 0
    seed_orders(url, 7_000)
    sql(url, "SELECT pg_create_logical_replication_slot('cdc', 'test_decoding')")
    enqueue = ["enqueue", "--table", "orders", "--chunk-rows", "1000", "--before"]
    job = run_cli(env, *enqueue, cutoff).stdout.strip()
    assert start_worker(env, "--burst").wait(60) == 0

    lines = changes(url)
    markers = [
        line for line in lines if line.startswith("message: transactional: 1 prefix: archiver")
    ]
    files = sql(url, "SELECT part, row_count, path FROM archive_files ORDER BY part")
    assert len(files) >= 3 and len(markers) == len(files)
    contents = [json.loads(line.split("content:", 1)[1]) for line in markers]
    # in the order they committed: the backlog plan's ranges commit in any order
    assert sorted((c["part"], c["job_id"], c["table"], c["rows"], c["path"]) for c in contents) == [
        (f["part"], job, "public.orders", f["row_count"], f["path"]) for f in files
    ]
    progress = json.loads(
        sql_value(url, "SELECT progress FROM background_jobs WHERE id = $1::uuid", job)
    )
    assert progress["plan"] == plan
    # each marker sits inside the transaction that deleted that chunk's rows
    for marker in markers:
        at = lines.index(marker)
        begin = max(i for i in range(at) if lines[i].startswith("BEGIN"))
        commit = min(i for i in range(at, len(lines)) if lines[i].startswith("COMMIT"))
        deletes = [x for x in lines[begin:commit] if x.startswith("table public.orders: DELETE")]
        assert len(deletes) == json.loads(marker.split("content:", 1)[1])["rows"]

    quiet = run_cli(env, *enqueue, "2025-01-01", "--no-cdc-marker")
    assert quiet.returncode == 0, quiet.stderr
    assert start_worker(env, "--burst").wait(60) == 0
    after = changes(url)
    assert any(x.startswith("table public.orders: DELETE") for x in after)
    assert not [x for x in after if "prefix: archiver" in x]
    assert (
        sql_value(
            url,
            "SELECT count(*) FROM background_jobs WHERE task_name = 'archive' AND status = 'completed'",
        )
        == 2
    )
    sql(url, "SELECT pg_drop_replication_slot('cdc')")
