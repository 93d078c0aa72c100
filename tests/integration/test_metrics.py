"""`archiver worker --metrics-port P`: after real jobs, /metrics serves their counters."""

from __future__ import annotations

import signal
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from archiver.testing.services import free_port, wait_for_port
from tests.support import run_cli, sql_value, start_worker, wait_until
from tests.support.harness import Harness
from tests.support.ops_jobs import OLD_ROWS, completing_and_failing_jobs, enqueue


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_after_jobs(env: dict[str, str], database_url: str, tmp_path: Path) -> None:
    env = {**env, "ARCHIVER_DELTA": "false"}  # these two jobs' metrics, no publish job's
    done, doomed = completing_and_failing_jobs(env, database_url)
    left = enqueue(env, "events", before="2023-01-01")  # cancelled before any worker runs
    run_cli(env, "cancel", left)

    port = free_port()
    log = tmp_path / "worker.log"
    worker = start_worker(env, "--metrics-port", str(port), log=log)
    try:
        wait_for_port(port, proc=worker)
        finished = "SELECT count(*) FROM background_jobs WHERE status IN ('completed', 'failed')"
        wait_until(lambda: sql_value(database_url, finished) == 2, what="both jobs to end")
        m = scrape(port)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()

    table = (("table", "public.events"),)
    assert m[("archiver_rows_archived_total", table)] == OLD_ROWS
    assert m[("archiver_bytes_archived_total", table)] == sql_value(
        database_url, "SELECT sum(byte_size) FROM archive_files WHERE job_id = $1::uuid", done
    )
    assert m[("archiver_chunk_duration_seconds_count", table)] == 2
    assert m[("archiver_chunk_duration_seconds_sum", table)] > 0
    assert m[("archiver_claim_latency_seconds_count", ())] == 2
    assert m[("archiver_jobs_finished_total", (("outcome", "completed"),))] == 1
    assert m[("archiver_jobs_finished_total", (("outcome", "failed"),))] == 1
    assert m[("archiver_errors_total", (("kind", "InputError"),))] == 1
    for status, count in (("completed", 1), ("failed", 1), ("cancelled", 1), ("queued", 0)):
        assert m[("archiver_jobs", (("status", status),))] == count
    assert m[("archiver_queue_up", ())] == 1
    assert doomed in log.read_text()


def test_metrics_port_in_use(h: Harness) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = h.cli("worker", "--burst", "--metrics-port", str(port))
    assert result.returncode == 1
    assert result.stderr.strip().startswith(
        f"archiver: error: --metrics-port {port}: cannot listen"
    )
