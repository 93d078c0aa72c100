"""Logs: a line per job state change and per chunk, with the job id; JSON lines when
ARCHIVER_LOG_FORMAT=json; and no secret in any line a worker or the CLI writes."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import pytest

from archiver.logs import RedactingFormatter
from archiver.testing.services import AZURITE_KEY, free_port
from tests.support import ROOT, archiver_cmd, run_cli
from tests.support.ops_jobs import completing_and_failing_jobs, enqueue

PASSWORD = "Pa55-w0rd-never-logged"


def with_password(url: str) -> str:
    # the test server trusts local connections, so any password is accepted
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@")


def assert_clean(text: str, as_json: bool) -> list[dict[str, Any] | str]:
    assert PASSWORD not in text and AZURITE_KEY not in text
    lines = [line for line in text.splitlines() if line.strip()]
    return [json.loads(line) for line in lines] if as_json else list(lines)


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_worker_and_cli_logs(
    env: dict[str, str], database_url: str, tmp_path: Path, log_format: str
) -> None:
    env = {
        **{k: v for k, v in env.items() if k != "ARROW_DEFAULT_MEMORY_POOL"},
        "ARCHIVER_DATABASE_URL": with_password(database_url),
        "ARCHIVER_LOG_FORMAT": log_format,
    }
    as_json = log_format == "json"
    done, failed = completing_and_failing_jobs(env, database_url)
    cancelled = enqueue(env, "events", before="2023-01-01")

    outputs = [run_cli(env, "cancel", cancelled)]
    log = tmp_path / "worker.log"
    with log.open("w") as out:  # -v: debug records too
        worker = subprocess.run(
            archiver_cmd("-v", "worker", "--burst", "--metrics-port", str(free_port())),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            timeout=120,
        )
    assert worker.returncode == 0, log.read_text()
    # Arrow's pool: malloc unless the operator chose one, empty counting as unset (no job
    # is left: these workers start and stop)
    for chosen, used in (("mimalloc", "mimalloc"), ("", "system")):
        started = run_cli({**env, "ARROW_DEFAULT_MEMORY_POOL": chosen}, "worker", "--burst")
        assert started.returncode == 0 and f"Arrow memory pool {used})" in started.stderr
    outputs += [run_cli(env, "-v", *args) for args in (["status"], ["jobs"], ["show", failed])]
    # errors that carry the secrets: an unreachable database, an unreachable blob endpoint
    closed = f"127.0.0.1:{free_port()}"
    served = urlsplit(database_url).netloc.rpartition("@")[2]  # whichever server the run uses
    bad_db = {**env, "ARCHIVER_DATABASE_URL": with_password(database_url).replace(served, closed)}
    outputs.append(run_cli(bad_db, "-v", "status"))
    bad_blob = {
        **env,
        "AZURE_STORAGE_CONNECTION_STRING": env["AZURE_STORAGE_CONNECTION_STRING"].replace(
            env["AZURE_STORAGE_CONNECTION_STRING"].split("BlobEndpoint=http://")[1].split("/")[0],
            closed,
        ),
    }
    outputs.append(run_cli(bad_blob, "worker", "--burst"))
    assert outputs[-2].returncode == 1 and "***" in outputs[-2].stderr  # redacted, not absent
    assert outputs[-1].returncode == 1

    for result in outputs:
        assert_clean(result.stdout, as_json=False)
        # stderr of the CLI: log records (JSON in json mode) and the final one-line error
        for line in result.stderr.splitlines():
            assert PASSWORD not in line and AZURITE_KEY not in line
            if as_json and not line.startswith("archiver: error:") and line.startswith("{"):
                json.loads(line)

    records = assert_clean(log.read_text(), as_json)
    messages = [cast(dict[str, Any], r)["message"] if as_json else r for r in records]
    for job, needles in (
        (done, ["claimed", "chunk 1 of", "chunk 2 of", "completed"]),
        (failed, ["claimed", "attempt 1 failed", "now failed"]),
    ):
        mine = [m for m in messages if f"job {job}:" in m]
        for needle in needles:
            assert sum(needle in m for m in mine) == 1, (needle, mine)
    assert not any(f"job {cancelled}:" in m and "claimed" in m for m in messages)
    assert sum("started (concurrency 1, Arrow memory pool system)" in m for m in messages) == 1


def test_formatter_redacts_messages_and_tracebacks() -> None:
    secret_url = f"postgresql://app:{PASSWORD}@db.example:5432/app"
    conn_str = f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={AZURITE_KEY};"
    try:
        raise RuntimeError(f"cannot use {conn_str}")
    except RuntimeError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "archiver", logging.ERROR, __file__, 1, "connecting to %s", (secret_url,), exc_info
    )
    for as_json in (True, False):
        text = RedactingFormatter(as_json).format(record)
        assert PASSWORD not in text and AZURITE_KEY not in text
        assert "AccountKey=***" in text and "app:***@db.example" in text
        if as_json:
            entry = json.loads(text)
            assert entry["message"] == "connecting to postgresql://app:***@db.example:5432/app"
            assert "RuntimeError" in entry["exception"]
