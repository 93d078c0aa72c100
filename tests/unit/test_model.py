"""Progress arithmetic, payloads and keys: pure data."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid

import pytest

from archiver.errors import InputError
from archiver.limits import replica_lag_limit
from archiver.model import (
    ArchivedFile,
    ArchiveRequest,
    Job,
    KeyRange,
    Mode,
    Progress,
    Status,
    parse_job_id,
)


def file(rows: int, max_key: str) -> ArchivedFile:
    return ArchivedFile(
        "j", 1, "public.t", "file:///x", "p", rows, 10 * rows, "m", ["id"], ["1"], [max_key],
        "created_at", None, None,
    )  # fmt: skip


def test_progress_after_a_file_counts_and_never_estimates_below_the_count() -> None:
    p = Progress(chunk_rows=100, rows_estimated=150, chunks_estimated=2)
    p = p.after(file(100, "100")).after(file(100, "200"))
    assert (p.rows, p.bytes, p.files, p.last_key) == (200, 2000, 2, ["200"])
    assert (p.rows_estimated, p.chunks_estimated) == (200, 2)
    done = p.finished()
    assert (done.rows_estimated, done.chunks_estimated) == (200, 2)


def test_progress_json_keeps_unknown_keys() -> None:
    data = {"rows": 5, "files": 1, "last_key": ["7"], "future": {"x": 1}}
    p = Progress.from_json(data)
    assert p.unknown == {"future": {"x": 1}}
    assert Progress.from_json(p.to_json()) == p
    assert p.after(file(1, "8")).to_json()["future"] == {"x": 1}


def test_request_payload_round_trip_and_keys() -> None:
    r = ArchiveRequest("public.t", "created_at", "2024-01-01T00:00:00+00:00", Mode.COPY, 500)
    assert ArchiveRequest.from_payload(json.loads(json.dumps(r.payload()))) == r
    assert r.keys() == (
        "archive:public.t:created_at:2024-01-01T00:00:00+00:00:copy",
        "table:public.t",
    )
    part = ArchiveRequest(
        "public.t", "c", "2024-01-01", Mode.MOVE, key_range=KeyRange("10", None), group="g"
    )
    assert ArchiveRequest.from_payload(part.payload()) == part
    third = dataclasses.replace(part, key_range=KeyRange("10", "20", 3))
    assert ArchiveRequest.from_payload(json.loads(json.dumps(third.payload()))) == third
    older = {**third.payload(), "key_range": {"after": "10", "through": "20"}}  # queued before
    assert ArchiveRequest.from_payload(older).key_range == KeyRange("10", "20", None)
    quiet = ArchiveRequest("public.t", "c", "2024-01-01", Mode.MOVE, cdc_marker=False)
    assert ArchiveRequest.from_payload(quiet.payload()) == quiet
    assert "cdc_marker" not in r.payload()  # the default is not written: old payloads read the same
    dedup, lock = part.range_keys(1, 4)
    assert dedup.endswith(":range:1/4") and lock == "table:public.t:range:1"


def test_job_from_row() -> None:
    now = dt.datetime.now(dt.UTC)
    row = {
        "id": uuid.uuid4(), "task_name": "archive", "payload": '{"table": "t"}',
        "status": "running", "priority": 0, "attempts": 1, "max_attempts": 5,
        "locked_by": "w", "progress": '{"rows": 3}', "last_error": None, "errors": "[]",
        "run_at": now, "created_at": now, "started_at": now, "finished_at": None,
        "heartbeat_at": now, "cancel_requested_at": None,
    }  # fmt: skip
    job = Job.from_row(row)
    assert job.status is Status.RUNNING and job.progress == {"rows": 3}


def test_parse_job_id() -> None:
    value = uuid.uuid4()
    assert parse_job_id(str(value)) == value
    with pytest.raises(InputError, match="is not a job id"):
        parse_job_id("42")


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("64MB", {"max_replica_lag_bytes": 64 * 1024**2}),
        ("512kB", {"max_replica_lag_bytes": 512 * 1024}),
        ("30s", {"max_replica_lag_seconds": 30}),
        ("1.5 min", {"max_replica_lag_seconds": 90}),
    ],
)
def test_replica_lag_limits(text: str, limit: dict[str, float]) -> None:
    assert replica_lag_limit(text) == limit


@pytest.mark.parametrize("text", ["64", "fast", "10 parsecs", "-1s"])
def test_bad_replica_lag_limits(text: str) -> None:
    with pytest.raises(InputError, match="neither a duration"):
        replica_lag_limit(text)


def test_each_kind_s_request_round_trips_its_payload() -> None:
    from archiver.kinds.publish import PublishRequest
    from archiver.kinds.purge import PurgeRequest

    publish = PublishRequest("public.orders", "az://acct/archive")
    assert PublishRequest.from_payload(publish.payload()) == publish
    assert publish.payload() == {"table": "public.orders", "storage_url": "az://acct/archive"}
    purge = PurgeRequest("public.orders", "7 years")
    assert PurgeRequest.from_payload(purge.payload()) == purge
    with pytest.raises(KeyError):
        PurgeRequest.from_payload({"table": "public.orders"})
