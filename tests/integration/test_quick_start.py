"""The README's quick start runs as written: each of its commands, in its order, against
a real PostgreSQL and Azurite, with only the exports' values made the test's."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from archiver.testing.reference import seed_orders
from archiver.testing.services import free_port
from tests.support import ROOT, archiver_cmd, run_cli, start_process, wait_for_text
from tests.support.harness import Harness


def quick_start() -> tuple[list[str], list[list[str]]]:
    """The quick start's exports (the variables' names) and commands (comments cut)."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Quick start\n\n```\n(.*?)```", readme, re.S)
    assert block, "README.md has a quick start block"
    exports, commands = [], []
    for line in block.group(1).splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0] == "export":
            exports.append(words[1].split("=", 1)[0])
        elif words:
            commands.append(words)
    return exports, commands


def test_the_quick_start_runs_as_written(h: Harness, tmp_path: Path) -> None:
    exports, commands = quick_start()
    assert [c[:2] for c in commands][:3] == [
        ["archiver", "migrate"], ["archiver", "enqueue"], ["archiver", "enqueue"]
    ]  # fmt: skip
    seed_orders(h.url, 3_000)
    h.sql("UPDATE orders SET created_at = created_at - interval '2 years'")  # all before 2024
    env = {k: v for k, v in h.env.items() if k.startswith(("PATH", "PYTHON", "HOME", "LANG"))}
    mine = {**h.env, "ARCHIVER_SERVE_PASSWORD": "quick-start-secret"}
    env |= {name: mine[name] for name in exports}  # what the exports set, and nothing else
    env["ARCHIVER_SERVE_BIND"] = f"127.0.0.1:{free_port()}"  # tests run side by side
    serve = None
    try:
        for words in commands:
            assert words[0] == "archiver", words
            if words[1] == "serve":  # runs until stopped: the commands after it use it
                log = tmp_path / "serve.log"
                serve = start_process(archiver_cmd(*words[1:]), env, log)
                wait_for_text(log, "listening on", timeout=60)
                continue
            done = run_cli(env, *words[1:])
            assert done.returncode == 0, (words, done.stdout, done.stderr)
            if words[1:2] == ["enqueue"] and "--dry-run" not in words:
                assert len(done.stdout.split()) == 1, done.stdout  # "queue the job": its id
            if words[1:2] == ["query"] and "--with-live" not in words:
                assert "3000" in done.stdout, done.stdout
        assert h.value("SELECT count(*) FROM orders") == 0
        assert h.value("SELECT count(*) FROM archive.orders_all") == 3_000
    finally:
        if serve is not None:
            serve.terminate()
            serve.wait(30)
