"""What the crash, signal, outage and queue-life tests share: the reference rows' cutoff,
a job of them, and how to stop a worker."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.support import (
    Process,
    archiver_cmd,
    run_cli,
    sql,
    start_process,
    start_worker,
    wait_for_text,
)

CUTOFF = "2024-12-25"  # with 20,000 seeded rows: 9,920 rows older


def old_ids(url: str, cutoff: str = CUTOFF) -> set[int]:
    return {r["id"] for r in sql(url, f"SELECT id FROM orders WHERE created_at < '{cutoff}'")}


def enqueue(env: dict[str, str], *extra: str, cutoff: str = CUTOFF) -> str:
    result = run_cli(
        env, "enqueue", "--table", "orders", "--before", cutoff, "--chunk-rows", "2000", *extra
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def blob_etags(connection_string: str, container: str) -> dict[str, str]:
    from azure.storage.blob import BlobServiceClient

    client = BlobServiceClient.from_connection_string(connection_string).get_container_client(
        container
    )
    return {b.name: b.etag for b in client.list_blobs() if "/_delta_log/" not in b.name}


def frozen_mid_upload(env: dict[str, str], log: Path) -> Process:
    """A worker stopped (SIGSTOP) while it uploads a file, until its lease runs out and
    another worker rescues its job; SIGCONT thaws it."""
    worker = start_worker({**env, "ARCHIVER_FAILPOINTS": "upload_staged=sleep:1"}, log=log)
    wait_for_text(log, "failpoint upload_staged reached")
    worker.send_signal(signal.SIGSTOP)
    return worker


def stop(proc: Process, timeout: float = 30) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout)


def kill_command_at(env: dict[str, str], point: str, log: Path, *args: str) -> None:
    """`archiver ARGS` SIGKILLed where it reaches failpoint `point`."""
    proc = start_process(archiver_cmd(*args), {**env, "ARCHIVER_FAILPOINTS": f"{point}=pause"}, log)
    wait_for_text(log, f"failpoint {point} reached")
    proc.kill()
    proc.wait(10)
