"""Readers never lose a file under them: every change that takes files out of a table --
a restore, a compaction, a tier change to Archive, a purge -- leaves its files where they
are for the readers' retention (ARCHIVER_READER_RETENTION, 7 days by default), so
delta-rs at every version and pyiceberg at every retained snapshot read exactly what the
table held then, through all of them; an erasure is the exception: its files and the
history before it go at once, and no version or snapshot left yields an erased row. Once
the retention is over the files go (the Archive tier's move then happens), and no
retained Iceberg snapshot names a deleted file."""

from __future__ import annotations

import datetime as dt

import pytest
from deltalake import DeltaTable

from archiver.testing.reference import seed_orders
from archiver.text import counted
from tests.support import delta as delta_check
from tests.support import iceberg as iceberg_check
from tests.support.console import one_page
from tests.support.harness import Harness

RECENT = 2000  # orders of the last days, beside 4,000 of December 2024


@pytest.fixture
def r(h: Harness) -> Harness:
    h = h.with_env(
        ARCHIVER_DELTA="true",
        ARCHIVER_ICEBERG="true",
        ARCHIVER_COMPACT="false",
        ARCHIVER_READER_RETENTION=str(7 * 86400),  # the default, which the harness sets to 0
    )
    seed_orders(h.url, 4000)  # created g minutes before 2025-01-01
    h.sql(
        "INSERT INTO orders (id, customer, created_at, total) "
        "SELECT 100000 + g, md5(g::text)::uuid, now() - interval '10 days' + g * interval '1 minute', g "
        "FROM generate_series(1, $1::int) g",
        RECENT,
    )
    return h


class History:
    """Each Delta version and Iceberg snapshot as it was when current: the ids it held."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.versions: dict[int, set[int]] = {}
        self.snapshots: dict[int, set[int]] = {}

    def now(self) -> None:
        """Record the table's current version and snapshot with the ids they hold."""
        table = delta_check.delta(self.h)
        ids = ids_of(table.to_pyarrow_table(columns=["id"]).column("id").to_pylist())
        self.versions[table.version()] = ids
        iceberg = iceberg_check.table(self.h)
        snapshot = iceberg.current_snapshot().snapshot_id
        self.snapshots[snapshot] = ids_of(
            iceberg.scan(snapshot_id=snapshot, selected_fields=("id",)).to_arrow()["id"].to_pylist()
        )
        assert self.snapshots[snapshot] == ids

    def every_one_reads(self, since_version: int = 0) -> None:
        """Every recorded version from `since_version`, and every snapshot the Iceberg
        table retains, read now exactly as they did."""
        for version, ids in self.versions.items():
            if version < since_version:
                continue
            table = DeltaTable(
                delta_check.uri(self.h, "public.orders"),
                version=version,
                storage_options=delta_check.options(self.h),
            )
            got = table.to_pyarrow_table(columns=["id"]).column("id").to_pylist()
            assert ids_of(got) == ids, f"Delta version {version}"
        iceberg = iceberg_check.table(self.h)
        retained = [s.snapshot_id for s in iceberg.snapshots()]
        for snapshot in retained:
            got = iceberg.scan(snapshot_id=snapshot, selected_fields=("id",)).to_arrow()
            if snapshot in self.snapshots:
                assert ids_of(got["id"].to_pylist()) == self.snapshots[snapshot], snapshot


def ids_of(ids: list[int]) -> set[int]:
    assert len(ids) == len(set(ids)), "a row twice"
    return set(ids)


def ok(h: Harness, *args: str) -> str:
    done = h.cli(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def kept(h: Harness) -> int:
    return int(h.value("SELECT count(*) FROM archive_files WHERE kept_until > now()"))


def test_every_version_and_snapshot_reads_through_each_change(r: Harness) -> None:
    h, seen = r, History(r)
    recent = (dt.datetime.now(dt.UTC) - dt.timedelta(days=5)).isoformat()
    for before in ("2024-12-30", "2025-01-01", recent):
        h.archive("--table", "orders", "--before", before, "--chunk-rows", "700")
        seen.now()
    blobs = len(h.blobs())

    # a restore of a day: its files rewritten, the old ones kept
    ok(h, "restore", "--table", "orders", "--from", "2024-12-30", "--to", "2024-12-31")
    seen.now()
    assert kept(h) > 0 and len(h.blobs()) > blobs
    seen.every_one_reads()

    # a compaction of what is left
    said = ok(h, "compact", "--table", "orders", "--period", "none")
    assert "stay 7 days for readers" in said, said
    seen.now()
    h.drain()  # the workers' sweep and publications delete nothing kept
    seen.every_one_reads()

    # an erasure: its files and the history before it go at once, kept ones too
    erased = 100000 + 7
    ok(h, "erase", "--table", "orders", "--where", f"id = {erased}")
    seen.now()
    erasure = delta_check.delta(h).version()
    assert h.value("SELECT count(*) FROM archive_files WHERE state = 'retired'") == 0
    assert len(iceberg_check.table(h).snapshots()) == 1
    seen.every_one_reads(since_version=erasure)
    assert erased in seen.versions[max(v for v in seen.versions if v < erasure)]
    assert not any(erased in seen.versions[v] for v in seen.versions if v >= erasure)
    for version in range(erasure):  # the history before it is gone, not readable with the row
        with pytest.raises(Exception):  # noqa: B017  (delta-rs: no log entry at that version)
            DeltaTable(
                delta_check.uri(h, "public.orders"),
                version=version,
                storage_options=delta_check.options(h),
            ).to_pyarrow_table(columns=["id"])

    # to Archive: out of the Delta table at once, the blobs move after the retention
    ok(h, "verify", "--table", "public.orders")
    said = ok(h, "tier", "--table", "orders", "--tier", "Archive")
    assert "stay where they are, readable" in said and "moved 0 files to Archive" in said, said
    seen.now()
    assert seen.versions[max(seen.versions)] == set()
    h.drain()
    waiting = "SELECT count(*) FROM archive_files WHERE offline AND tier IS DISTINCT FROM 'Archive'"
    assert h.value(waiting) > 0
    seen.every_one_reads(since_version=erasure)
    held = h.value("SELECT count(*) FROM archive_files WHERE kept_until > now()")
    doctor = h.cli("doctor").stdout
    assert "readers' retention: 7 days (ARCHIVER_READER_RETENTION)" in doctor, doctor
    assert f"{counted(held, 'file')} (" in doctor.split("readers' retention")[1].splitlines()[0]
    status, page = one_page(h, h.tmp, "/archive/public.orders")
    assert status == 200 and f"<dt>kept for readers</dt><dd>{counted(held, 'file')} (" in page, page

    # a purge of the old ones (offline too)
    ok(h, "purge", "--table", "orders", "--older-than", "1 year")
    seen.every_one_reads(since_version=erasure)

    # the retention over: the kept files go, the waiting ones move, old snapshots expire
    h.sql(
        "UPDATE archive_files SET kept_until = now() - interval '1 second' WHERE kept_until IS NOT NULL"
    )
    over = h.with_env(ARCHIVER_READER_RETENTION="0")
    ok(over, "publish", "--table", "orders")
    assert h.value("SELECT count(*) FROM archive_files WHERE state = 'retired'") == 0
    assert h.value(waiting) == 0
    archived = h.value("SELECT count(*) FROM archive_files WHERE offline AND tier = 'Archive'")
    assert archived > 0 and len(h.blobs()) == archived
    iceberg = iceberg_check.table(h)
    assert [s.snapshot_id for s in iceberg.snapshots()] == [iceberg.current_snapshot().snapshot_id]
