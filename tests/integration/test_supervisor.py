"""The repository's supervisor.conf, run by a real supervisord in temp dirs: the scheduler
and N workers RUNNING, a SIGKILLed worker restarted while a job still completes, and a
graceful stop (every process exits 0 on SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from archiver.testing.reference import seed_orders
from archiver.testing.services import free_port
from archiver.testing.supervised import BIN, CONF, ctl, running, supervisor_defaults
from tests.support import run_cli, sql_value, wait_until

pytestmark = pytest.mark.slow  # a real supervisord with a scheduler and two workers


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@pytest.fixture
def supervised(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "archiver.toml"
    config.write_text(
        '[settings]\nscheduler_grace = 60\n\n[[policy]]\nname = "nightly"\ntable = "orders"\n'
        'older_than = "3650 days"\nschedule = "0 2 * * *"\n'
    )
    for name in ("run", "log"):
        (tmp_path / name).mkdir()
    return {
        **env,
        **supervisor_defaults(),
        "ARCHIVER_RUN_DIR": str(tmp_path / "run"),
        "ARCHIVER_LOG_DIR": str(tmp_path / "log"),
        "ARCHIVER_WORKERS": "2",
        "ARCHIVER_STARTSECS": "1",
        "ARCHIVER_STOPWAITSECS": "20",
        "ARCHIVER_SHUTDOWN_DEADLINE": "3",
        "ARCHIVER_CONFIG": str(config),
        "ARCHIVER_CONSOLE_AUTOSTART": "true",
        "ARCHIVER_CONSOLE_VIEWER_TOKEN": "a-viewer-token-long-enough",  # it refuses to start unreadable
        "ARCHIVER_CONSOLE_BIND": f"127.0.0.1:{free_port()}",
        "ARCHIVER_SERVE_AUTOSTART": "true",  # and archiver serve beside it
        "ARCHIVER_SERVE_PASSWORD": "a-serve-password-long-enough",
        "ARCHIVER_SERVE_BIND": f"127.0.0.1:{free_port()}",
    }


def test_supervisor_runs_restarts_and_stops_the_system(
    supervised: dict[str, str], database_url: str, tmp_path: Path
) -> None:
    env = supervised
    seed_orders(database_url, 2_000)
    log_dir = tmp_path / "log"
    daemon = subprocess.Popen(
        [str(BIN / "supervisord"), "-n", "-c", str(CONF)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    everyone = [
        "archiver:scheduler",
        "archiver:worker-00",
        "archiver:worker-01",
        "console",
        "serve",
    ]
    try:
        wait_until(lambda: running(env) == everyone, timeout=60, what="all RUNNING")
        assert ctl(env, "status").returncode == 0
        console = f"http://{env['ARCHIVER_CONSOLE_BIND']}/healthz"
        wait_until(lambda: _answers(console), timeout=30, what="the console to answer")

        killed = int(ctl(env, "pid", "archiver:worker-00").stdout)
        worker_log = log_dir / "worker-00.log"
        before_restart = worker_log.stat().st_size if worker_log.exists() else 0
        os.kill(killed, signal.SIGKILL)
        result = run_cli(env, "enqueue", "--table", "orders", "--before", "2024-12-31")
        assert result.returncode == 0, result.stderr
        job_id = result.stdout.strip()

        def restarted() -> bool:
            """Its new process RUNNING and past its start (supervisord calls it RUNNING a
            second after the spawn: a stop before the worker's signal handlers are in place
            ends it by SIGTERM, not by its graceful stop, and this test checks that)."""
            pid = ctl(env, "pid", "archiver:worker-00").stdout.strip()
            if not (pid.isdigit() and int(pid) not in (0, killed) and running(env) == everyone):
                return False
            with worker_log.open("rb") as log:
                log.seek(before_restart)
                return b"started (concurrency" in log.read()

        wait_until(restarted, timeout=60, what="worker-00 restarted")
        wait_until(
            lambda: (
                sql_value(
                    database_url, "SELECT status FROM background_jobs WHERE id = $1::uuid", job_id
                )
                == "completed"
            ),
            timeout=120,
            what="the job to complete",
        )
        assert (
            sql_value(
                database_url,
                "SELECT count(*) FROM orders WHERE created_at < '2024-12-31'::timestamptz",
            )
            == 0
        )

        stopped = ctl(env, "stop", "all")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert running(env) == []
    finally:
        ctl(env, "shutdown")
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()

    events = (log_dir / "supervisord.log").read_text()
    assert "exited: worker-00 (terminated by SIGKILL; not expected)" in events
    # Graceful: every process exited 0 on SIGTERM, none had to be killed.
    for name in ("scheduler", "worker-00", "worker-01", "console", "serve"):
        assert f"stopped: {name} (exit status 0)" in events, events
    for name in ("worker-00", "worker-01"):
        assert "stopped" in (log_dir / f"{name}.log").read_text().splitlines()[-1]
