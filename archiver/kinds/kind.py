"""What a job kind is to the worker: its request's class and handler (`Kind`), and the
job in progress its handler is handed (`JobRun`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from archiver.context import Context
from archiver.errors import ArchiverError
from archiver.model import Job, Request, Result

R = TypeVar("R")


@dataclass
class JobRun:
    """A job in progress: what the worker's loop and the job's thread share."""

    job: Job
    worker: str  # the name of the worker running it (its leases')
    interrupt: BaseException | None = None  # read by the thread between chunks
    source_pids: list[int] = field(default_factory=list)  # its source backends
    task: asyncio.Task[None] | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Kind(Generic[R]):
    """A job kind: its name (the jobs' task_name), its handler `run` (a Result; awaited
    unless `threaded`: then run in the worker's job thread, for bulk work on its own ADBC
    connections), how a claimed job's payload becomes its request, what runs once its
    run has ended whatever its outcome and before the job is finished in the queue
    (`after`: the queue is never idle while work it queues is owed), and whether it has
    no work at all (`batch`: the claim loop completes such jobs in batches, for the
    bench's queue figures)."""

    name: str
    run: Callable[[Context, JobRun, R], Any]  # a Result, or an awaitable of one
    payload: Callable[[Mapping[str, Any]], R]
    threaded: bool = True
    after: Callable[[Context, Job], Awaitable[object]] | None = None
    batch: bool = False

    @classmethod
    def of(
        cls,
        request: type[Request[R]],
        run: Callable[[Context, JobRun, R], Result | Awaitable[Result]],
        **kw: Any,
    ) -> Kind[R]:
        """The kind of `request`'s jobs, run by `run` (with Kind's other fields)."""
        return cls(request.KIND, run, request.from_payload, **kw)

    def request(self, job: Job) -> R:
        """The job's payload as this kind's request; a malformed one fails the attempt,
        naming the kind and what is wrong."""
        try:
            return self.payload(job.payload)
        except (KeyError, TypeError, ValueError) as exc:
            raise ArchiverError(
                f"job {job.id}: not a {self.name} job's payload ({type(exc).__name__}: {exc})"
            ) from None


def same_storage(kind: str, storage_url: str, ctx: Context) -> None:
    """A job for the files of `storage_url` refused by a worker writing to another."""
    if storage_url != str(ctx.storage().location):
        raise ArchiverError(
            f"{kind}: files on {storage_url}, this worker writes to another storage"
        )
