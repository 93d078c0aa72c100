"""The operator commands: status, jobs, show (their --json parsed), enqueue --dry-run
(changes nothing) and enqueue --wait (non-zero when the job fails)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from archiver import terminal
from archiver.model import Job
from tests.support import ROOT, archiver_cmd, run_cli, sql_value, start_worker, wait_until
from tests.support.harness import Harness
from tests.support.ops_jobs import CUTOFF, OLD_ROWS, enqueue, jobs_in_every_state, make_events


def cli_json(env: dict[str, str], *args: str) -> Any:
    result = run_cli(env, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.slow
def test_status_jobs_show(h: Harness) -> None:
    jobs = jobs_in_every_state(h.env, h.url, h.tmp / "worker.log")

    status = cli_json(h.env, "status")
    summary = {(r["source_table"], r["status"]): r for r in status["status_summary"]}
    assert summary[("public.events", "completed")]["rows_archived"] == OLD_ROWS
    assert summary[("public.later", "queued")]["jobs"] == 2
    assert [r["id"] for r in status["running_jobs"]] == [jobs.running]
    assert status["running_jobs"][0]["progress_pct"] == 50.0
    assert {r["id"] for r in status["failed_jobs"]} == {jobs.failed, jobs.retrying}
    assert status["archive_summary"][0]["files"] == 2

    text = h.cli("status")
    assert text.returncode == 0, text.stderr
    for needle in ("jobs:", "running:", "failing:", "archived:", "public.events", "50.0"):
        assert needle in text.stdout

    listed = cli_json(h.env, "jobs", "--limit", "100")
    assert {j["id"] for j in listed} == set(vars(jobs).values())
    assert [j["id"] for j in cli_json(h.env, "jobs", "--status", "failed")] == [jobs.failed]
    later = cli_json(h.env, "jobs", "--table", "later", "--limit", "2")
    assert [j["source_table"] for j in later] == ["public.later"] * 2
    assert [j["id"] for j in later] == [jobs.retrying, jobs.cancelled]  # newest first
    assert cli_json(h.env, "jobs", "--table", "public.events")[0]["rows"] == OLD_ROWS

    shown = cli_json(h.env, "show", jobs.completed)
    assert (
        shown["job"]["status"] == "completed"
        and shown["job"]["payload"]["table"] == "public.events"
    )
    assert shown["job"]["progress"]["rows"] == OLD_ROWS
    assert [f["part"] for f in shown["files"]] == [1, 2]
    assert sum(f["row_count"] for f in shown["files"]) == OLD_ROWS
    failed = cli_json(h.env, "show", jobs.failed)
    assert failed["job"]["attempts"] == 1 and failed["job"]["errors"][0]["attempt"] == 1
    assert "doomed" in failed["job"]["last_error"] and failed["files"] == []

    text = h.cli("show", jobs.completed)
    assert text.returncode == 0, text.stderr
    assert "200 of ~200 rows (100%)" in text.stdout and "part-00002.parquet" in text.stdout

    missing = h.cli("show", "00000000-0000-0000-0000-000000000000")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "archiver: error: no job 00000000-0000-0000-0000-000000000000"


def test_dry_run_changes_nothing(h: Harness) -> None:
    make_events(h.url)
    before = h.value("SELECT md5(string_agg(e::text, ',' ORDER BY id)) FROM events e")
    result = h.cli(
        "enqueue", "--table", "events", "--before", CUTOFF, "--chunk-rows", "50", "--dry-run"
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "nothing was queued" in out
    # 300 rows, 200 older: the planner's estimate from ANALYZE's histogram, not 300
    estimate = re.search(r"rows to move   ~([\d,]+) ", out)
    assert estimate and abs(int(estimate[1].replace(",", "")) - OLD_ROWS) <= 10, out
    assert "chunks         4 of up to 50 rows" in out
    assert "uses an index  yes" in out
    assert re.search(r"parquet size   ~[\d.]+ k?B ", out), out  # from the statistics

    after = h.value("SELECT md5(string_agg(e::text, ',' ORDER BY id)) FROM events e")
    assert after == before
    assert h.value("SELECT count(*) FROM background_jobs") == 0
    assert h.value("SELECT count(*) FROM archive_files") == 0
    from azure.storage.blob import BlobServiceClient

    service = BlobServiceClient.from_connection_string(h.azurite.connection_string)
    assert not service.get_container_client(h.container).exists()


def test_dry_run_lists_delete_triggers(h: Harness) -> None:
    """A move's dry run names the row-level DELETE triggers that will fire for each moved
    row (constraint and ENABLE ALWAYS ones too); statement-level, insert-only, disabled,
    replica-only and foreign-key triggers are not listed (but the replica-only ones are
    where sessions default to session_replication_role = replica), and a copy lists none."""
    h.sql(
        """
        CREATE TABLE counters (n bigint); INSERT INTO counters VALUES (0);
        CREATE TABLE kinds (id int PRIMARY KEY);
        CREATE TABLE audit (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            created_at timestamptz NOT NULL, kind int REFERENCES kinds);
        CREATE FUNCTION count_down() RETURNS trigger LANGUAGE plpgsql
            AS $$BEGIN UPDATE counters SET n = n - 1; RETURN OLD; END$$;
        CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
        CREATE TRIGGER "Count down" BEFORE DELETE ON audit
            FOR EACH ROW EXECUTE FUNCTION count_down();
        CREATE TRIGGER changed AFTER UPDATE OR DELETE ON audit
            FOR EACH ROW EXECUTE FUNCTION noop();
        ALTER TABLE audit ENABLE ALWAYS TRIGGER changed;
        CREATE CONSTRAINT TRIGGER checked AFTER DELETE ON audit DEFERRABLE
            FOR EACH ROW EXECUTE FUNCTION noop();
        CREATE TRIGGER per_statement AFTER DELETE ON audit
            FOR EACH STATEMENT EXECUTE FUNCTION noop();
        CREATE TRIGGER inserted AFTER INSERT ON audit FOR EACH ROW EXECUTE FUNCTION noop();
        CREATE TRIGGER disabled AFTER DELETE ON audit FOR EACH ROW EXECUTE FUNCTION noop();
        ALTER TABLE audit DISABLE TRIGGER disabled;
        CREATE TRIGGER on_replica AFTER DELETE ON audit FOR EACH ROW EXECUTE FUNCTION noop();
        ALTER TABLE audit ENABLE REPLICA TRIGGER on_replica;
        INSERT INTO audit (created_at) SELECT TIMESTAMPTZ '2023-01-01' + i * interval '1 day'
            FROM generate_series(1, 100) i;
        ANALYZE audit;
        """,
    )
    dry_run = ("enqueue", "--table", "audit", "--before", "2023-02-01", "--dry-run")
    move = h.cli(*dry_run)
    assert move.returncode == 0, move.stderr
    listed = [line for line in move.stdout.splitlines() if line.startswith("delete trigger")]
    assert listed == [
        "delete trigger public.audit: Count down (BEFORE, for each row)",
        "delete trigger public.audit: changed (AFTER, for each row)",
        "delete trigger public.audit: checked (AFTER, for each row)",
    ], move.stdout
    assert move.stdout.endswith("each fires once per moved row, inside its chunk's transaction\n")
    copy = h.cli(*dry_run, "--mode", "copy")
    assert copy.returncode == 0, copy.stderr
    assert "trigger" not in copy.stdout, copy.stdout
    # a database whose sessions replay replication fires the replica and ALWAYS ones
    database = h.value("SELECT current_database()")
    h.sql(f'ALTER DATABASE "{database}" SET session_replication_role = replica')
    replica = h.cli(*dry_run)
    listed = [line for line in replica.stdout.splitlines() if line.startswith("delete trigger")]
    assert listed == [
        "delete trigger public.audit: changed (AFTER, for each row)",
        "delete trigger public.audit: on_replica (AFTER, for each row)",
    ], replica.stdout


def test_job_progress_is_estimated_from_the_cutoff(h: Harness) -> None:
    make_events(h.url)
    job = enqueue(h.env, "events", "--chunk-rows", "80")
    log = h.tmp / "worker.log"
    assert start_worker(h.env, "--burst", log=log).wait(timeout=120) == 0, log.read_text()
    chunk_lines = [line for line in log.read_text().splitlines() if "chunk " in line]
    assert len(chunk_lines) == 3 and all(job in line for line in chunk_lines)
    # while running: the planner's estimate of rows older than the cutoff, not the
    # table's 300 rows, and the chunk count from it
    first = re.search(r"chunk 1 of ~(\d+), .*\(80 of ~(\d+) rows done\)", chunk_lines[0])
    assert first and first[1] == "3" and abs(int(first[2]) - OLD_ROWS) <= 10, chunk_lines[0]
    progress = cli_json(h.env, "show", job)["job"]["progress"]
    assert (progress["rows"], progress["files"]) == (OLD_ROWS, 3)
    # once done, the estimates are replaced by the counts
    assert (progress["rows_estimated"], progress["chunks_estimated"]) == (OLD_ROWS, 3)


def test_wait_exits_zero_when_completed(
    env: dict[str, str], database_url: str, tmp_path: Path
) -> None:
    make_events(database_url)
    log = tmp_path / "worker.log"
    worker = start_worker(env, log=log)
    try:
        result = run_cli(
            env, "enqueue", "--table", "events", "--before", CUTOFF, "--chunk-rows", "50", "--wait"
        )
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    assert result.returncode == 0, result.stderr + log.read_text()
    job = result.stdout.strip()
    assert sql_value(
        database_url, "SELECT status FROM background_jobs WHERE id = $1::uuid", job
    ) == ("completed")
    lines = result.stderr.splitlines()  # not a terminal: a plain line per change
    assert any("rows/s" in line and "ETA" in line for line in lines)
    assert lines[-1].startswith(f"job {job} completed: 200 of ~"), lines[-1]


def test_wait_exits_non_zero_when_the_job_fails(h: Harness) -> None:
    make_events(h.url, "doomed")
    waiting = subprocess.Popen(
        archiver_cmd(
            "enqueue", "--table", "doomed", "--before", CUTOFF, "--max-attempts", "1", "--wait"
        ),
        env=h.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    wait_until(
        lambda: h.value("SELECT count(*) FROM background_jobs") == 1,
        what="the job to be queued",
    )
    h.sql("DROP TABLE doomed")  # after enqueue checked it: the job will fail
    log = h.tmp / "worker.log"
    assert start_worker(h.env, "--burst", log=log).wait(timeout=120) == 0, log.read_text()
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 1, err
    job = out.strip()
    assert err.splitlines()[-1].startswith(f"archiver: error: job {job} failed: ")
    assert "doomed" in err.splitlines()[-1]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_redraws_one_line_on_a_terminal(h: Harness) -> None:
    job = Job.from_row(
        h.sql(
            """INSERT INTO background_jobs (task_name, status, progress)
               VALUES ('archive', 'running', '{"rows": 250, "rows_estimated": 1000, "bytes": 2500000}')
               RETURNING *""",
        )[0]
    )
    out = Terminal()
    bar = terminal.ProgressBar(out)
    bar.draw(job)
    bar.draw(job)
    bar.close()
    text = out.getvalue()
    assert text.count("\r") == 2 and text.endswith("\n") and text.count("\n") == 1
    assert "[######..................]  25%  250 rows  2.5 MB" in text


def test_output_into_a_reader_that_stopped_is_not_an_error(h: Harness) -> None:
    """`archiver jobs | head -1` once head has exited: no "database error: Broken pipe"
    (as it said before), no traceback; the status a shell reports for Unix tools there."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before archiver writes its first line
    try:
        result = subprocess.run(
            archiver_cmd("jobs"), env=h.env, stdout=write, stderr=subprocess.PIPE, text=True,
            cwd=ROOT, timeout=60,
        )  # fmt: skip
    finally:
        os.close(write)
    assert (result.returncode, result.stderr) == (141, "")
