"""What the CLI prints: aligned tables for people, JSON for scripts, a job's live progress.

Formatting only; the figures come from the operator views (sql/003_ops_views.sql)
through store/jobs.py, so psql and the CLI always agree.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import decimal
import json
import time
import uuid
from collections.abc import Sequence
from typing import Any, TextIO

import asyncpg

from archiver.model import FINISHED, Job, Status
from archiver.store import jobs
from archiver.text import duration, size

Columns = Sequence[tuple[str, str]]  # (key, header)

# asyncpg hands PostgreSQL's -infinity and infinity over as these values (the
# catalog records a file whose rows have no cutoff value, a child's, as -infinity..infinity)
_INFINITIES: dict[dt.date, str] = {
    dt.datetime.min: "-infinity",
    dt.datetime.max: "infinity",
    dt.date.min: "-infinity",
    dt.date.max: "infinity",
}


def _json_default(value: Any) -> Any:
    if isinstance(value, uuid.UUID | decimal.Decimal):
        return str(value) if isinstance(value, uuid.UUID) else float(value)
    if isinstance(value, dt.datetime | dt.date):
        return _INFINITIES.get(value) or value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def dumps(value: Any) -> str:
    """JSON for scripts: ids and times as ISO strings, intervals as seconds."""
    return json.dumps(value, indent=2, default=_json_default)


def cell(key: str, value: Any) -> str:
    """One value as a person reads it, by its type and its column's name."""
    if value is None:
        return "-"
    if key.endswith("bytes") or key.startswith("bytes"):
        return size(value)
    if key.endswith("_seconds") and key != "rows_per_second":
        return duration(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float | decimal.Decimal):
        return f"{value:,.1f}"
    if isinstance(value, dt.datetime):
        infinity = _INFINITIES.get(value)
        return infinity or value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    text = str(value).replace("\n", " ")
    if key == "last_error" and len(text) > 60:  # `show ID` prints it whole
        return text[:59] + "…"
    return text


def table(rows: Sequence[dict[str, Any]], columns: Columns) -> str:
    """Rows as aligned text columns under a header."""
    lines = [tuple(header for _, header in columns)]
    lines += [tuple(cell(key, row.get(key)) for key, _ in columns) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


STATUS_SECTIONS: dict[str, tuple[str, Columns]] = {
    "status_summary": (
        "jobs",
        [
            ("source_table", "table"),
            ("status", "status"),
            ("jobs", "jobs"),
            ("oldest_queued_seconds", "oldest queued"),
            ("rows_archived", "rows"),
            ("bytes_archived", "bytes"),
        ],
    ),
    "running_jobs": (
        "running",
        [
            ("id", "job"),
            ("source_table", "table"),
            ("worker", "worker"),
            ("heartbeat_age_seconds", "heartbeat"),
            ("progress_pct", "%"),
            ("rows_done", "rows"),
            ("rows_per_second", "rows/s"),
            ("eta_seconds", "eta"),
            ("throttled_reason", "waiting on"),
        ],
    ),
    "failed_jobs": (
        "failing",
        [
            ("id", "job"),
            ("source_table", "table"),
            ("status", "status"),
            ("attempts", "attempts"),
            ("next_retry", "next retry"),
            ("last_error", "last error"),
        ],
    ),
    "archive_summary": (
        "archived",
        [
            ("source_table", "table"),
            ("files", "files"),
            ("rows", "rows"),
            ("bytes", "bytes"),
            ("oldest_value", "from"),
            ("newest_value", "to"),
        ],
    ),
}

STATUS_SECTIONS["paused"] = (
    "paused",
    [
        ("kind", "paused"),
        ("source_table", "table"),
        ("job_id", "job"),
        ("jobs", "jobs"),
        ("paused_at", "since"),
    ],
)

JOB_COLUMNS: Columns = [
    ("id", "job"),
    ("source_table", "table"),
    ("status", "status"),
    ("attempts", "attempts"),
    ("rows", "rows"),
    ("bytes", "bytes"),
    ("created_at", "created"),
    ("last_error", "last error"),
]

FILE_COLUMNS: Columns = [
    ("part", "part"),
    ("row_count", "rows"),
    ("byte_size", "bytes"),
    ("state", "state"),
    ("path", "path"),
]


FAILED_SHOWN = 50  # store/jobs.sql's failed_jobs LIMIT


def status_report(report: dict[str, list[dict[str, Any]]]) -> str:
    if not report["status_summary"]:
        return "no jobs"
    parts = []
    for name, (title, columns) in STATUS_SECTIONS.items():
        if report[name]:
            parts.append(f"{title}:\n{table(report[name], columns)}")
        if name == "failed_jobs" and len(report[name]) >= FAILED_SHOWN:
            parts[-1] += f"\n(the newest {FAILED_SHOWN}: `archiver jobs --status failed` lists all)"
    return "\n\n".join(parts)


def progress_text(progress: dict[str, Any]) -> str:
    """'24,000 of ~55,193 rows (43%), 1.9 MB, chunk 2 of ~3'."""
    rows, estimated = int(progress.get("rows", 0)), int(progress.get("rows_estimated", 0))
    text = f"{rows:,} of ~{estimated:,} rows" if estimated else f"{rows:,} rows"
    if estimated:
        text += f" ({min(100, 100 * rows // estimated)}%)"
    text += f", {size(progress.get('bytes', 0))}"
    if progress.get("chunks_estimated"):
        text += f", chunk {progress.get('files', 0)} of ~{progress['chunks_estimated']}"
    return text


def _dead_tuples_text(progress: dict[str, Any]) -> str:
    """What a completed move left for vacuum: dead row versions, and whether it ran VACUUM."""
    if "dead_tuples" not in progress:
        return "-"
    vacuumed = progress.get("vacuum_seconds")
    return f"{progress['dead_tuples']:,} at completion" + (
        f", after VACUUM (ANALYZE) ({vacuumed:.1f}s)" if vacuumed is not None else ", no VACUUM run"
    )


def job_report(job: Job, files: list[dict[str, Any]]) -> str:
    fields = [
        ("job", str(job.id)),
        ("status", f"{job.status} (attempt {job.attempts} of {job.max_attempts})"),
        ("payload", json.dumps(job.payload)),
        ("progress", progress_text(job.progress)),
        ("dead tuples", _dead_tuples_text(job.progress)),
        ("worker", cell("", job.locked_by)),
        ("created", cell("", job.created_at)),
        ("started", cell("", job.started_at)),
        ("heartbeat", cell("", job.heartbeat_at)),
        ("finished", cell("", job.finished_at)),
        ("next run", cell("", job.run_at) if job.status == Status.QUEUED else "-"),
        ("cancel asked", cell("", job.cancel_requested_at)),
        ("paused", cell("", job.paused_at)),
        ("limits", json.dumps(job.limits) if job.limits else "-"),
        (
            "throttled",
            f"{job.throttled_reason} since {cell('', job.throttled_since)}"
            if job.throttled_reason
            else "-",
        ),
        ("last error", job.last_error or "-"),
    ]
    lines = [f"{name:<13}{value}" for name, value in fields]
    for error in reversed(job.errors):
        lines.append(
            f"  attempt {error.get('attempt')} at {error.get('at')} "
            f"on {error.get('worker')}: {error.get('error')}"
        )
    lines.append("")
    lines.append(table(files, FILE_COLUMNS) if files else "no files written")
    return "\n".join(lines)


class ProgressBar:
    """A job's progress on one line: redrawn in place on a terminal, or printed as a new
    line whenever it changes when the output is a file or a pipe."""

    def __init__(self, out: TextIO, width: int = 24) -> None:
        self.out, self.width = out, width
        self.tty = out.isatty()
        self.first: tuple[float, int] | None = None  # (monotonic time, rows) first seen
        self.last_seen: tuple[int, str] | None = None  # (rows, status) last printed

    def line(self, job: Job) -> str:
        p = job.progress
        rows, estimated = int(p.get("rows", 0)), int(p.get("rows_estimated", 0))
        now = time.monotonic()
        if self.first is None:
            self.first = (now, rows)
        seconds, rows_seen = now - self.first[0], rows - self.first[1]
        rate = rows_seen / seconds if seconds > 0 and rows_seen > 0 else None
        done = min(1.0, rows / estimated) if estimated else 0.0
        filled = int(done * self.width)
        eta = (estimated - rows) / rate if rate and estimated > rows else None
        return (
            f"[{'#' * filled}{'.' * (self.width - filled)}] {done:4.0%}  {rows:,} rows  "
            f"{size(p.get('bytes', 0))}  {f'{rate:,.0f}' if rate else '-'} rows/s  "
            f"ETA {duration(eta)}  {job.status}"
            + (f" (waiting on {job.throttled_reason})" if job.throttled_reason else "")
        )

    def draw(self, job: Job) -> None:
        text = self.line(job)
        seen = (int(job.progress.get("rows", 0)), job.status)
        if self.tty:
            self.out.write("\r" + text + "\x1b[K")
            self.out.flush()
        elif seen != self.last_seen:
            print(text, file=self.out, flush=True)
        self.last_seen = seen

    def close(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()


async def wait_for_job(
    conn: asyncpg.Connection, job_id: uuid.UUID, out: TextIO, interval: float = 0.5
) -> Job:
    """Poll the job until it ends, drawing its progress; returns its final row."""
    bar = ProgressBar(out)
    try:
        while True:
            job = await jobs.get_job(conn, job_id)
            bar.draw(job)
            if job.status in FINISHED:
                return job
            await asyncio.sleep(interval)
    finally:
        bar.close()


def plan_report(plan: dict[str, Any], cutoff: str, mode: str) -> str:
    """What `enqueue --dry-run` prints."""
    verb = str(mode)
    index = (f"yes ({', '.join(plan['indexes'])})" if plan["uses_index"] else "no") + (
        ", with a sequential scan of the table" if plan["sequential_scan"] else ""
    )
    fields = [
        ("table", plan["table"]),
        (f"rows to {verb}", f"~{plan['rows']:,} (planner estimate, older than {cutoff})"),
        ("parquet size", f"~{size(plan['parquet_bytes'])} (zstd, rough)"),
        ("plan", plan.get("plan_reason") or "chunks in key order"),
        ("chunks", f"{plan['chunks']:,} of up to {plan['chunk_rows']:,} rows"),
        ("uses an index", index),
    ]
    fields += [("warning", w) for w in plan.get("warnings", [])]
    then = "dropped" if plan.get("partition_action") == "drop" else "detached"
    for p in plan.get("partitions", []):
        how = f"whole: archived, then {then}" if p["whole"] else "by rows"
        fields.append(
            ("partition", f"{p['partition']}: {how} (~{p['rows']:,} rows, {size(p['bytes'])})")
        )
    for child in plan.get("children", []):
        missing = child["unindexed_keys"]
        fields.append(
            (
                "with children",
                f"{child['table']}: ~{child['rows']:,} rows"
                + (
                    f"; no index leads with the columns of {', '.join(missing)}: every chunk "
                    "scans it (create one)"
                    if missing
                    else ""
                ),
            )
        )
    triggers = plan.get("delete_triggers", [])
    for t in triggers:
        fields.append(
            ("delete trigger", f"{t['table']}: {t['name']} ({t['timing']}, for each row)")
        )
    if triggers:
        whole = any(p["whole"] for p in plan.get("partitions", []))
        fields.append(
            (
                "",
                "each fires once per moved row, inside its chunk's transaction"
                + (" (not for the partitions taken whole)" if whole else ""),
            )
        )
    return "dry run: nothing was queued, read or written\n" + "\n".join(
        f"{name:<15}{value}" for name, value in fields
    )
