"""Object names: the one place that says where a job's files go.

`<schema.table>/job-<id>-a<attempt>-part-<part>.parquet`, under the storage's prefix. The
attempt is a fencing token: a worker that lost its job while paused mid-upload writes its
own attempt's name, never the one of the worker that took the job over. It is the job's
claim count (background_jobs.claims), which only grows; not `attempts`, the retry
budget, which a graceful hand-back gives back and `archiver retry` starts again.
"""

from __future__ import annotations

import re

_ATTEMPT = re.compile(r"-a(\d+)-part-\d+\.parquet$")
_REWRITE = re.compile(r"^rewrite-\d+-")
_OPERATION = re.compile(r"/(?:rewrite-(\d+)-[^/]*|compact-(\d+)-\d+\.parquet)$")
_JOB = re.compile(r"/job-([0-9a-f-]{36})-a\d+-part-\d+\.parquet$")


def file_name(table: str, job_id: str, attempt: int, part: int) -> str:
    return f"{job_prefix(table, job_id)}a{attempt:03d}-part-{part:05d}.parquet"


def job_prefix(table: str, job_id: str | None = None) -> str:
    """Every file of `table`, or of one job of it, starts with this."""
    return f"{table}/" + (f"job-{job_id}-" if job_id else "")


def attempt_of(name: str) -> int | None:
    """The attempt that wrote `name`; None for a name archiver did not make."""
    match = _ATTEMPT.search(name)
    return int(match.group(1)) if match else None


def rewritten_name(name: str, operation: int) -> str:
    """Where archive operation `operation` (archiver.ledger) writes the rows of `name` it
    keeps: beside it, `rewrite-<operation>-` before its own name (an earlier rewrite's
    prefix replaced). A new name: a file is never overwritten."""
    folder, _, base = name.rpartition("/")
    return f"{folder}/rewrite-{operation}-{_REWRITE.sub('', base)}"


def rewrite_prefix(table: str, operation: int) -> str:
    """Every file operation `operation` rewrites of `table` starts with this."""
    return f"{table}/rewrite-{operation}-"


def merged_name(table: str, operation: int, part: int) -> str:
    """Where compaction `operation` writes part `part` of its merge (a file of `table`)."""
    return f"{table}/compact-{operation}-{part:05d}.parquet"


def operation_prefixes(table: str, operation: int) -> list[str]:
    """Every file ledger operation `operation` may write of `table` starts with one of
    these (its rewrites, its merge)."""
    return [rewrite_prefix(table, operation), f"{table}/compact-{operation}-"]


def writer_of(name: str) -> str | None:
    """Who wrote `name`: its job's id, "op:<id>" for a ledger operation's rewrite or
    merge (as the query of writers at work names them), None for a name archiver does
    not make."""
    if (operation := operation_of(name)) is not None:
        return f"op:{operation}"
    match = _JOB.search(name)
    return match.group(1) if match else None


def split_writers(writers: list[str]) -> tuple[list[str], list[int]]:
    """`writers` (writer_of) as the query of writers at work takes them: the jobs' ids,
    the operations' ids."""
    job_ids = sorted({w for w in writers if not w.startswith("op:")})
    operations = sorted({int(w[3:]) for w in writers if w.startswith("op:")})
    return job_ids, operations


def operation_of(name: str) -> int | None:
    """The ledger operation that wrote `name` (a rewrite, a merge); None for a job's."""
    match = _OPERATION.search(name)
    return int(match.group(1) or match.group(2)) if match else None


# A table folder's subfolders of its table formats' own objects, not archived files: the
# Delta log's, and the Iceberg table's metadata (archiver.iceberg).
FORMAT_FOLDERS = ("_delta_log/", "metadata/")


def is_format_object(rest: str) -> bool:
    """Whether `rest`, an object's name under its table's folder, is a table format's."""
    return rest.startswith(FORMAT_FOLDERS)
