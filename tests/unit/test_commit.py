"""The commit strategies and job start against the in-memory catalog, source and storage:
every crash point of steps 5-6, and what the next attempt makes of it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from archiver import failpoints
from archiver.archive.commit import CopyOnly, SameDatabase, SeparateDatabase
from archiver.archive.context import JobContext
from archiver.archive.job import start_job
from archiver.errors import JobStateError, LeaseLost
from archiver.failpoints import FailpointError
from archiver.model import ArchivedFile, ArchiveRequest, FileState, Mode, Progress
from archiver.pgtypes.column import Column
from archiver.source.chunks import ChunkQueries
from archiver.source.crossing import Crossing, Stage
from archiver.source.tables import TableInfo
from archiver.storage.seam import put_file
from archiver.testing.memory import MemoryDatabase, MemoryStorage


@pytest.fixture(autouse=True)
def _no_failpoints() -> Iterator[None]:
    yield
    failpoints.configure("")


def archived(part: int, rows: int = 10, path: str | None = None) -> ArchivedFile:
    return ArchivedFile(
        job_id="j1",
        part=part,
        source_table="public.orders",
        storage_url="az://memory/archive",
        path=path or f"archive/public.orders/job-j1-a001-part-{part:05d}.parquet",
        row_count=rows,
        byte_size=100 * rows,
        md5="md5",
        key_columns=["id"],
        min_key=[str(part * 100)],
        max_key=[str(part * 100 + rows - 1)],
        cutoff_column="created_at",
        min_cutoff_value=None,
        max_cutoff_value=None,
    )


def states(db: MemoryDatabase) -> dict[int, FileState]:
    return {part: state for part, (_, state, _) in db.committed.files.items()}


def test_same_database_commits_file_progress_and_rows_as_one() -> None:
    db = MemoryDatabase()
    strategy = SameDatabase(db, db, db)
    f = archived(1)
    strategy.commit_chunk([f], Progress().after(f))
    assert states(db) == {1: FileState.COMMITTED}
    assert db.committed.progress.rows == 10 and db.commits == 1


@pytest.mark.parametrize("point", ["before_commit"])
def test_same_database_crash_before_commit_leaves_nothing(point: str) -> None:
    db = MemoryDatabase()
    failpoints.configure(f"{point}=raise")
    f = archived(1)
    with pytest.raises(FailpointError):
        SameDatabase(db, db, db).commit_chunk([f], Progress().after(f))
    db.rollback()  # what the chunk does on any error
    assert db.committed.files == {} and db.commits == 0
    assert SameDatabase(db, db, db).reconcile() == []


def test_same_database_lost_lease_records_nothing() -> None:
    db = MemoryDatabase()
    db.committed.held = False
    f = archived(1)
    with pytest.raises(LeaseLost):
        SameDatabase(db, db, db).commit_chunk([f], Progress().after(f))
    assert db.committed.files == {} and db.commits == 0


def test_separate_database_crash_before_source_commit_is_forgotten() -> None:
    source, catalog = MemoryDatabase(), MemoryDatabase()
    failpoints.configure("before_commit=raise")
    f = archived(1)
    with pytest.raises(FailpointError):
        SeparateDatabase(source, catalog).commit_chunk([f], Progress().after(f))
    source.rollback()
    assert states(catalog) == {1: FileState.PENDING}
    failpoints.configure("")
    settled = SeparateDatabase(source, catalog).reconcile()
    assert [(s.part, s.committed) for s in settled] == [(1, False)]
    assert catalog.committed.files == {}


def test_separate_database_crash_after_source_commit_is_confirmed() -> None:
    source, catalog = MemoryDatabase(), MemoryDatabase()
    failpoints.configure("source_committed=raise")
    f = archived(1)
    with pytest.raises(FailpointError):
        SeparateDatabase(source, catalog).commit_chunk([f], Progress().after(f))
    assert states(catalog) == {1: FileState.PENDING}
    settled = SeparateDatabase(source, catalog).reconcile()
    assert [(s.part, s.committed) for s in settled] == [(1, True)]
    assert states(catalog) == {1: FileState.COMMITTED}
    resumed = catalog.committed_progress(Progress(chunk_rows=50))
    assert (resumed.files, resumed.rows, resumed.last_key) == (1, 10, ["109"])


def test_separate_database_refuses_a_transaction_still_in_progress() -> None:
    source, catalog = MemoryDatabase(), MemoryDatabase()
    xid = source.transaction_id()
    catalog.add_pending(archived(1), xid)
    catalog.commit()
    with pytest.raises(JobStateError, match="in progress"):
        SeparateDatabase(source, catalog).reconcile()
    assert states(catalog) == {1: FileState.PENDING}


def test_separate_database_happy_path_confirms_and_checkpoints() -> None:
    source, catalog = MemoryDatabase(), MemoryDatabase()
    f = archived(1)
    SeparateDatabase(source, catalog).commit_chunk([f], Progress().after(f))
    assert states(catalog) == {1: FileState.COMMITTED}
    assert catalog.committed.progress.files == 1 and source.commits == 1


def test_copy_records_in_its_own_transaction() -> None:
    source, catalog = MemoryDatabase(), MemoryDatabase()
    f = archived(1)
    CopyOnly(source, catalog).commit_chunk([f], Progress().after(f))
    assert states(catalog) == {1: FileState.COMMITTED} and source.commits == 0


def _job(catalog: MemoryDatabase, storage: MemoryStorage, attempt: int) -> JobContext:
    key = Column("id", "bigint", "int8")
    cutoff = Column("created_at", "date", "date")
    table = TableInfo("public", "orders", (key, cutoff), (key,))
    request = ArchiveRequest("public.orders", "created_at", "2024-01-01T00:00:00+00:00", Mode.MOVE)
    return JobContext(
        "j1",
        attempt,
        request,
        ChunkQueries(table, cutoff),
        source=None,  # type: ignore[arg-type]  # not reached: the saved progress has a chunk size
        storage=storage,
        catalog=catalog,
        commit=SeparateDatabase(catalog, catalog),
        workdir=Path("."),
    )


def test_start_job_reconciles_resumes_and_sweeps(tmp_path: Path) -> None:
    catalog, storage = MemoryDatabase(), MemoryStorage()
    job1 = _job(catalog, storage, attempt=1)
    local = tmp_path / "f.parquet"
    local.write_bytes(b"rows")
    done, lost, stale = (job1.object_name(p) for p in (1, 2, 3))
    for name in (done, lost, stale):
        put_file(storage, name, local)
    f1 = archived(1, path=done)
    SeparateDatabase(catalog, catalog).commit_chunk([f1], Progress(chunk_rows=10).after(f1))
    catalog.add_pending(archived(2, path=lost), "999")  # its source transaction aborted
    catalog.commit()
    catalog.statuses["999"] = "aborted"
    job2 = _job(catalog, storage, attempt=2)
    mine = job2.object_name(4)
    put_file(storage, mine, local)

    progress = start_job(job2, Progress(chunk_rows=10, rows_estimated=500))

    assert (progress.files, progress.rows, progress.rows_estimated) == (1, 10, 500)
    assert progress.last_key == ["109"]
    assert states(catalog) == {1: FileState.COMMITTED}
    # the aborted part's upload and attempt 1's uncatalogued one are gone; the rest stay
    assert sorted(storage.objects) == sorted([done, mine])


def test_a_chunk_taken_again_names_its_files_after_the_rolled_back_ones(tmp_path: Path) -> None:
    """A chunk rolled back waiting for a lock after some of its files were uploaded (an
    aggregate's children): the uploads go, and the chunk taken again numbers its files
    after them, since storage refuses a name written before."""
    from archiver.archive.chunk import _discard_uploads
    from archiver.errors import StorageError

    catalog, storage = MemoryDatabase(), MemoryStorage()
    job = _job(catalog, storage, attempt=1)
    local = tmp_path / "f.parquet"
    local.write_bytes(b"rows")
    first = job.next_part()
    put_file(storage, job.object_name(first), local)  # uploaded, then the chunk rolled back
    with pytest.raises(StorageError, match="archiver never overwrites"):
        put_file(storage, job.object_name(first), local)
    assert job.next_part() == first + 1
    _discard_uploads(job, first)
    assert storage.objects == {}


class _Failing(MemoryDatabase):
    """A source whose COMMIT fails when asked to."""

    def __init__(self, fails: str) -> None:
        super().__init__()
        self.fails = fails

    def commit(self) -> None:
        if self.fails == "commit":
            raise RuntimeError("commit")
        super().commit()


@pytest.mark.parametrize(
    ("fails", "stage", "source"),
    [
        ("record", Stage.OPEN, "in progress"),
        ("commit", Stage.RECORDED, "in progress"),
        ("apply", Stage.COMMITTED, "committed"),
        ("", Stage.APPLIED, "committed"),
    ],
)
def test_a_crossing_says_how_far_it_got(fails: str, stage: Stage, source: str) -> None:
    """What a failure at each step leaves, as the restore reads it (archiver.restore's
    _failure): nothing recorded, a record the source's fate decides, or the source
    committed with the record not applied."""
    db, xids = _Failing(fails), []

    def record(xid: str) -> None:
        xids.append(xid)
        if fails == "record":
            raise RuntimeError("record")

    def apply() -> None:
        if fails == "apply":
            raise RuntimeError("apply")

    crossing = Crossing(db, record, apply, "before_commit", "source_committed")
    with pytest.raises(RuntimeError, match=fails) if fails else contextlib.nullcontext():
        crossing.commit()
    assert crossing.stage is stage
    assert db.transaction_status(xids[0]) == source
