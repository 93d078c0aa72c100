"""The repository's supervisor.conf run by a real supervisord in a scratch directory: the
scheduler, N workers and (optionally) the console, as deploy/ runs them. For the tests
and the soak; only for a checkout (supervisor.conf runs the checkout's .venv)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from archiver.testing.services import ROOT

CONF = ROOT / "supervisor.conf"
BIN = Path(sys.executable).parent


def supervisor_defaults() -> dict[str, str]:
    """Every variable supervisor.conf expands, from deploy/supervisor.env (which sets each)."""
    settings = "\n".join(x for x in CONF.read_text().splitlines() if not x.startswith(";"))
    needed = set(re.findall(r"%\(ENV_(\w+)\)s", settings))
    values = dict(
        line.split("=", 1)
        for line in (ROOT / "deploy" / "supervisor.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    missing = needed - values.keys()
    if missing:
        raise RuntimeError(f"deploy/supervisor.env lacks {missing}")
    return {k: values[k] for k in needed}


def ctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "supervisorctl"), "-c", str(CONF), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def running(env: dict[str, str]) -> list[str]:
    lines = ctl(env, "status").stdout.splitlines()
    return sorted(line.split()[0] for line in lines if " RUNNING " in line)


def pid_of(env: dict[str, str], program: str) -> int | None:
    """The pid of a running program (`archiver:worker-00`), None if it is not running."""
    out = ctl(env, "pid", program).stdout.strip()
    return int(out) if out.isdigit() and out != "0" else None


class Supervisord:
    """supervisord -n for `env` (which names its run and log directories)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [str(BIN / "supervisord"), "-n", "-c", str(CONF)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def stop(self, timeout: float = 60) -> None:
        """supervisorctl shutdown (every program gets SIGTERM), then wait; killed after
        `timeout`."""
        if self.proc is None:
            return
        ctl(self.env, "shutdown")
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None


def wait_running(env: dict[str, str], programs: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while running(env) != sorted(programs):
        if time.monotonic() > deadline:
            raise TimeoutError(f"not all RUNNING after {timeout}s: {ctl(env, 'status').stdout}")
        time.sleep(0.3)
