"""`archiver console` started for a test: a real process on a free port (with an admin and
a viewer token unless the test says otherwise), answering /healthz before the test goes
on; Debian's Chromium for the browser tests; and nginx from Debian's packages as the
reverse proxy in front of it, configured as docs/deployment.md shows."""

from __future__ import annotations

import base64
import hashlib
import http.client
import os
import re
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, sync_playwright

from archiver.testing.reference import seed_orders
from archiver.testing.services import free_port
from tests.support import ROOT, archiver_cmd, outside_loop, start_process, start_worker, wait_until
from tests.support.harness import Harness

TOKEN = "console-admin-token-for-tests"
VIEWER_TOKEN = "console-viewer-token-for-tests"
CHROMIUM = "/usr/bin/chromium"
NGINX = "/usr/sbin/nginx"
SHOTS = ROOT / "build" / "screenshots"


class Console:
    def __init__(
        self, h: Harness, tmp: Path, env: dict[str, str] | None = None, *args: str
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / f"console-{self.port}.log"
        tokens = {
            "ARCHIVER_CONSOLE_ADMIN_TOKEN": TOKEN,
            "ARCHIVER_CONSOLE_VIEWER_TOKEN": VIEWER_TOKEN,
        }
        full = {**h.env, **tokens, **(env or {})}
        self.proc = start_process(
            archiver_cmd("console", "--bind", f"127.0.0.1:{self.port}", *args),
            {k: v for k, v in full.items() if v},  # "" unsets
            self.log,
        )
        self._viewer: str | None = None
        wait_until(self._up, timeout=30, what="the console to answer")

    def _up(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()
        return self.health() in (200, 503)  # 503: up, its database away

    def health(self) -> int | None:
        """/healthz's status (200: the database answers; 503: it is away), None when
        the console does not answer within 2 s."""
        return self.health_within(2)

    def health_within(self, seconds: float) -> int | None:
        """/healthz's status, waiting for it at most `seconds` (None: no answer)."""
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=seconds) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            return None

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)

    def login(self, token: str = VIEWER_TOKEN, name: str = "ops-viewer") -> tuple[int, str]:
        """(status, the session cookie's value) of a login with `token`."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        body = urllib.parse.urlencode({"name": name, "token": token})
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        conn.request("POST", "/login", body, headers)
        answer = conn.getresponse()
        conn.close()
        cookie = re.search(r"archiver_session=([^;]+)", answer.getheader("set-cookie") or "")
        return answer.status, cookie.group(1) if cookie else ""

    def get(self, path: str, *, reader: bool = True) -> tuple[int, str]:
        """GET as a logged-in viewer (`reader`), or as nobody."""
        headers = {}
        if reader:
            self._viewer = self._viewer or self.login()[1]
            headers["Cookie"] = f"archiver_session={self._viewer}"
        try:
            request = urllib.request.Request(self.url + path, headers=headers)
            with urllib.request.urlopen(request, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


def one_page(h: Harness, tmp: Path, path: str) -> tuple[int, str]:
    """(status, body) of one page, as a viewer, of a console started for it and stopped."""
    console = Console(h, tmp)
    try:
        return console.get(path)
    finally:
        console.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def log_in(
    browser: Browser, url: str, token: str = TOKEN, name: str = "ops-alice", phone: bool = False
) -> Page:
    """A new browser context logged in at `url` (the console's root) with `token`."""
    size: ViewportSize = {"width": 390, "height": 844} if phone else {"width": 1280, "height": 900}
    page = browser.new_context(viewport=size).new_page()
    page.goto(url + "/login")
    page.fill("input[name=name]", name)
    page.fill("input[name=token]", token)
    page.click("button:text-is('Log in')")
    page.wait_for_url(url + "/")
    return page


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def job_status(h: Harness, job: str) -> str:
    return str(h.value("SELECT status FROM background_jobs WHERE id = $1::uuid", job))


def failed_job(
    h: Harness, table: str = "orders", before: str = "2025-01-01", *, seed: int = 0
) -> str:
    """A job that really failed: its worker's upload raises, one attempt allowed.
    `seed`: first fill the orders table with that many rows."""
    if seed:
        outside_loop(seed_orders, h.url, seed)
    (job,) = h.enqueue("--table", table, "--before", before, "--max-attempts", "1")
    worker = start_worker({**h.env, "ARCHIVER_FAILPOINTS": "before_upload=raise"}, "--burst")
    assert worker.wait(60) == 0
    assert job_status(h, job) == "failed"
    return job


def docs_location_block() -> str:
    """The nginx `location` block docs/deployment.md gives, as the test runs it."""
    page = (ROOT / "docs" / "deployment.md").read_text()
    block = re.search(r"```nginx\n.*?(    location /archiver/ \{\n.*?\n    \})\n.*?```", page, re.S)
    assert block, "docs/deployment.md lost its nginx location block"
    return block.group(1)


class Nginx:
    """nginx on a free loopback port, in front of `upstream` (the console's port), with
    basic authentication for `users` ({name: password}) as the sign-in, and its upstream
    connections made from 127.0.0.2, the address the console is told to trust."""

    def __init__(self, tmp: Path, upstream: int, users: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        root = tmp / f"nginx-{self.port}"
        root.mkdir()
        salt = os.urandom(4)
        (root / "htpasswd").write_text(
            "".join(
                f"{user}:{{SSHA}}{base64.b64encode(hashlib.sha1(pw.encode() + salt).digest() + salt).decode()}\n"
                for user, pw in users.items()
            )
        )
        location = (
            docs_location_block()
            .replace("127.0.0.1:8080", f"127.0.0.1:{upstream}")
            .replace("/etc/nginx/archiver.htpasswd", str(root / "htpasswd"))
        )
        temps = "\n".join(
            f"    {kind}_temp_path {root}/{kind};"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        (root / "nginx.conf").write_text(
            f"""{"user root;" if os.geteuid() == 0 else ""}
worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log {root}/access.log;
{temps}
    server {{
        listen 127.0.0.1:{self.port};
        proxy_bind 127.0.0.2;
{location}
    }}
}}
"""
        )
        self.log = root / "error.log"
        self.proc = subprocess.Popen(
            [NGINX, "-p", str(root), "-c", str(root / "nginx.conf")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._up, timeout=20, what="nginx to answer")

    def _up(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text() if self.log.exists() else ""
        try:
            urllib.request.urlopen(self.url + "/archiver/healthz", timeout=2)
        except urllib.error.HTTPError as exc:
            return exc.code == 401  # the proxy asks who it is: up
        except OSError:
            return False
        return True

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
