"""Every job kind by its name: the worker's one registry (archiver.kinds says what a
kind is). A new kind's module gets its line here."""

from __future__ import annotations

from typing import Any

from archiver.errors import ArchiverError
from archiver.kinds import archiving, compact, noop, orphans, publish, purge
from archiver.kinds.kind import Kind
from archiver.model import Job

KINDS: dict[str, Kind[Any]] = {
    k.name: k
    for k in (archiving.KIND, publish.KIND, purge.KIND, compact.KIND, orphans.KIND, noop.KIND)
}


def kind_of(job: Job) -> Kind[Any]:
    """The job's kind; a task_name no kind has fails the attempt, naming it."""
    try:
        return KINDS[job.task_name]
    except KeyError:
        raise ArchiverError(
            f"job {job.id}: no job kind {job.task_name!r} (known: {', '.join(KINDS)})"
        ) from None
