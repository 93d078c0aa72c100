"""`archiver console` started for a test: a real process on a free port, with an admin
token, answering /healthz before the test goes on."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from archiver.testing.services import free_port
from tests.harness import Harness
from tests.support import archiver_cmd, start_process, wait_until

TOKEN = "console-admin-token-for-tests"


class Console:
    def __init__(self, h: Harness, tmp: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "console.log"
        self.proc = start_process(
            archiver_cmd("console", "--bind", f"127.0.0.1:{self.port}"),
            {**h.env, "ARCHIVER_CONSOLE_ADMIN_TOKEN": TOKEN},
            self.log,
        )
        wait_until(self._up, timeout=30, what="the console to answer")

    def _up(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
