"""Real jobs in every state, for the operator views and commands.

completed: a real worker archives `events` (200 old rows, chunks of 100: two files);
failed: a real worker runs a job whose table was dropped after enqueue (max 1 attempt);
cancelled / queued: enqueued, one cancelled through the CLI; retrying: a failed attempt
with a later run_at, and running: a job a worker holds -- both written with SQL, since
what is tested here is the view, not the queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support import run_cli, sql, start_worker

OLD_ROWS, NEW_ROWS, CUTOFF = 200, 100, "2024-01-01"

EVENTS = """
CREATE TABLE {name} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, body text);
CREATE INDEX ON {name} (created_at);
INSERT INTO {name}
SELECT g, CASE WHEN g <= {old} THEN timestamptz '2023-06-01' + make_interval(hours => g::int)
               ELSE timestamptz '2024-06-01' + make_interval(hours => g::int) END,
       repeat('x', 50)
FROM generate_series(1, {total}) g;
ANALYZE {name};
"""


def make_events(url: str, name: str = "events") -> None:
    sql(url, EVENTS.format(name=name, old=OLD_ROWS, total=OLD_ROWS + NEW_ROWS))


def enqueue(env: dict[str, str], table: str, *extra: str, before: str = CUTOFF) -> str:
    result = run_cli(env, "enqueue", "--table", table, "--before", before, *extra)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[0]


@dataclass
class Jobs:
    completed: str
    failed: str
    cancelled: str
    queued: str
    retrying: str
    running: str


def completing_and_failing_jobs(env: dict[str, str], url: str) -> tuple[str, str]:
    """Two queued jobs: one archives `events` in two chunks, one will fail (its table is
    dropped after enqueue checked it; one attempt allowed)."""
    make_events(url)
    make_events(url, "doomed")
    completed = enqueue(env, "events", "--chunk-rows", "100")
    failed = enqueue(env, "doomed", "--max-attempts", "1")
    sql(url, "DROP TABLE doomed")
    return completed, failed


def jobs_in_every_state(env: dict[str, str], url: str, log: Path) -> Jobs:
    # a queue holding exactly these jobs: no publish job after the completed one
    env = {**env, "ARCHIVER_DELTA": "false"}
    completed, failed = completing_and_failing_jobs(env, url)
    worker = start_worker(env, "--burst", log=log)
    assert worker.wait(timeout=120) == 0, log.read_text()

    make_events(url, "later")
    queued = enqueue(env, "later")
    cancelled = enqueue(env, "later", before="2023-07-01")
    result = run_cli(env, "cancel", cancelled)
    assert result.returncode == 0, result.stderr
    retrying = enqueue(env, "later", before="2023-08-01")
    sql(
        url,
        """UPDATE background_jobs SET attempts = 1, run_at = now() + interval '1 hour',
               last_error = 'OSError: storage went away',
               errors = jsonb_build_array(jsonb_build_object('at', now(), 'attempt', 1,
                        'worker', 'w0', 'error', 'OSError: storage went away'))
           WHERE id = $1::uuid""",
        retrying,
    )
    running = sql(
        url,
        """INSERT INTO background_jobs (task_name, payload, status, attempts, locked_by,
               heartbeat_at, started_at, lock_key, progress)
           VALUES ('archive', '{"table": "public.busy"}', 'running', 1, 'host:1:abc',
               now() - interval '5 seconds', now() - interval '10 seconds', 'table:public.busy',
               '{"rows": 500, "rows_estimated": 1000, "bytes": 4000, "files": 5,
                 "chunks_estimated": 10}')
           RETURNING id::text""",
    )[0][0]
    return Jobs(completed, failed, cancelled, queued, retrying, running)
