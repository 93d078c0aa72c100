"""The noop kind: a job with no work, for benchmarks and health checks of the queue
itself. The claim loop completes claimed no-op jobs in batches, without a thread."""

from __future__ import annotations

from typing import Any

from archiver.context import Context
from archiver.kinds.kind import JobRun, Kind
from archiver.model import Progress

NAME = "noop"


def nothing(ctx: Context, run: JobRun, request: None) -> Progress:
    return Progress()


def _no_request(payload: Any) -> None:
    return None


KIND = Kind(NAME, nothing, _no_request, batch=True)
