"""The tests' fork server (archiver/testing/forkserver.py): a forked `archiver` behaves as a fresh
one where the tests can tell -- output, exit status, environment, signals."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from archiver.testing.forkserver import SERVER, start_time
from tests.support import ROOT, archiver_cmd, run_cli

pytestmark = pytest.mark.skipif(
    os.environ.get("ARCHIVER_TEST_FORKSERVER") == "0", reason="the fork server is off"
)


def fresh(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(archiver_cmd(*args), env=env, capture_output=True, text=True, cwd=ROOT)


def test_a_forked_command_says_and_exits_as_a_fresh_one() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARCHIVER_", "DATABASE_"))}
    assert SERVER.serves(archiver_cmd("jobs"), env)
    for args in (["--help"], ["jobs"], ["enqueue", "--table", "orders", "--before", "soon"]):
        forked, ordinary = run_cli(env, *args), fresh(env, *args)
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            ordinary.returncode,
            ordinary.stdout,
            ordinary.stderr,
        ), args
    said = run_cli(env, "jobs").stderr  # the environment is the request's, not the server's
    assert "ARCHIVER_DATABASE_URL" in said
    unreachable = run_cli(
        {**env, "ARCHIVER_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/x"}, "jobs"
    )
    assert unreachable.returncode != 0 and "ARCHIVER_DATABASE_URL" not in unreachable.stderr


def test_a_forked_process_dies_of_the_signal_it_is_sent() -> None:
    # a server that takes the connection and never answers: `jobs` waits for its reply
    # (an unroutable address answered "rejected SSL upgrade" at once on one machine)
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        env = {**os.environ, "ARCHIVER_DATABASE_URL": f"postgresql://nobody@127.0.0.1:{port}/x"}
        proc = SERVER.start(archiver_cmd("jobs"), env, ROOT, 2, 2)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
        assert proc.poll() == -signal.SIGKILL


def test_a_process_started_with_other_interpreter_settings_is_not_forked() -> None:
    env = dict(os.environ)
    assert SERVER.serves(archiver_cmd("jobs"), env)
    for name, value in (("PYTHONHASHSEED", "7"), ("TZ", "Asia/Tokyo"), ("MALLOC_ARENA_MAX", "2")):
        other = {**env, name: value}
        assert start_time(other) != start_time(env)
        assert not SERVER.serves(archiver_cmd("jobs"), other), name
    assert not SERVER.serves([sys.executable, "-m", "bench.run"], env)
