"""`archiver console` in a real headless Chromium (Debian's, driven by Playwright; no
browser is downloaded) against a real PostgreSQL, Azurite and running workers.
Screenshots of each page go to build/screenshots/ (CI artefacts, not committed)."""

from __future__ import annotations

import http.server
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from archiver.kinds.registry import KINDS
from archiver.testing.reference import seed_orders
from archiver.testing.services import free_port
from tests.support import (
    ROOT,
    archiver_cmd,
    assert_refused,
    outside_loop,
    start_worker,
    wait_until,
)
from tests.support.console import Console, browser, failed_job, job_status, log_in, shot
from tests.support.harness import Harness

__all__ = ["browser"]  # a fixture


@pytest.fixture
def console(h: Harness, tmp_path: Path) -> Iterator[Console]:
    c = Console(h, tmp_path)
    yield c
    c.stop()


def admin(browser: Browser, console: Console, *, phone: bool = False) -> Page:
    return log_in(browser, console.url, phone=phone)


def test_overview_shows_progress_live_and_a_table_pause_stops_the_job(
    h: Harness, console: Console, browser: Browser, tmp_path: Path
) -> None:
    outside_loop(seed_orders, h.url, 12_000)
    (job,) = h.enqueue("--table", "orders", "--before", "2025-01-01", "--chunk-rows", "300")
    slow = {**h.env, "ARCHIVER_FAILPOINTS": "before_commit=sleep:0.3"}
    start_worker(slow, log=tmp_path / "worker.log")
    page = admin(browser, console)
    page.evaluate("window.__sameDocument = true")
    row = page.locator(f"#running tr[data-job='{job}']")
    row.wait_for(timeout=30_000)
    first = float(row.locator("progress").get_attribute("value") or 0)
    wait_until(
        lambda: float(row.locator("progress").get_attribute("value") or 0) > first,
        timeout=30,
        what="the progress bar to move",
    )
    assert page.evaluate("window.__sameDocument") is True  # refreshed in place, not reloaded
    shot(page, "overview")

    page.locator("#by-table tr", has_text="running").locator(
        "button[data-action=pause-table]"
    ).click()
    # the running job stops at its chunk boundary and goes back to the queue, held
    page.wait_for_url(console.url + "/")  # back where the button was
    wait_until(lambda: job_status(h, job) == "queued", timeout=30, what="the job to stop")
    rows = h.value("SELECT progress->>'rows' FROM background_jobs WHERE id = $1::uuid", job)
    assert h.value("SELECT count(*) FROM archive_files WHERE state = 'committed'") * 300 == int(
        rows
    )
    page.goto(console.url + "/")
    page.locator("#paused li", has_text="public.orders").locator("button").click()
    h.wait_for(job, "completed", timeout=120)
    assert "ops-alice" in console.log.read_text()  # the audit line names the actor
    assert "pause table public.orders" in console.log.read_text()


def test_a_failed_job_is_retried_from_its_page_and_completes(
    h: Harness, console: Console, browser: Browser
) -> None:
    job = failed_job(h, seed=2_000)
    page = admin(browser, console)
    page.goto(f"{console.url}/jobs/{job}")
    assert "failpoint before_upload" in page.inner_text("#job")
    shot(page, "job-failed")
    page.click("button[data-action=retry]")
    page.wait_for_url(f"{console.url}/jobs/{job}")
    assert job_status(h, job) == "queued"
    h.drain()
    assert job_status(h, job) == "completed"
    page.reload()
    assert page.inner_text("#job-status") == "completed"
    shot(page, "job-completed")


def test_a_bulk_retry_takes_every_job_the_filter_matches(
    h: Harness, console: Console, browser: Browser
) -> None:
    outside_loop(seed_orders, h.url, 1_000)
    h.sql("CREATE TABLE events (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)")
    h.sql("INSERT INTO events SELECT g, '2020-01-01' FROM generate_series(1, 100) g")
    ours = [failed_job(h), failed_job(h, before="2024-12-31T23:00:00+00:00")]
    other = failed_job(h, "events")
    page = admin(browser, console)
    page.goto(f"{console.url}/jobs?status=failed&table=orders")
    assert page.locator("#jobs tbody tr").count() == 2
    shot(page, "jobs-filtered")
    page.select_option("select[name=action]", "retry")
    page.click("button[data-action=bulk]")
    assert "Retry 2 jobs?" in page.inner_text("h1")
    shot(page, "bulk-confirm")
    page.click("button[data-action=confirm]")
    page.wait_for_url(f"{console.url}/jobs?**")
    assert [job_status(h, j) for j in ours] == ["queued", "queued"]
    assert job_status(h, other) == "failed"
    said = "bulk retry status=failed, table=orders: 2 of 2 jobs by ops-alice from 127.0.0.1"
    assert said in console.log.read_text()
    assert h.value("SELECT target FROM archiver_audit") == "status=failed, table=orders"


def test_a_visitor_cannot_act_and_a_post_needs_the_csrf_token(
    h: Harness, console: Console, browser: Browser
) -> None:
    job = failed_job(h, seed=1_000)
    visitor = browser.new_context().new_page()
    visitor.goto(f"{console.url}/jobs/{job}")
    visitor.wait_for_url(f"{console.url}/login?next=%2Fjobs%2F{job}")  # reading needs a login
    assert visitor.locator("#job").count() == 0
    status = visitor.evaluate(
        "async (u) => (await fetch(u, {method: 'POST', body: new URLSearchParams({csrf: 'x'})})).status",
        f"{console.url}/jobs/{job}/retry",
    )
    assert status == 403
    # logged in, but a POST without the token (same origin) is refused too
    page = admin(browser, console)
    page.goto(f"{console.url}/jobs/{job}")
    status = page.evaluate(
        "async (u) => (await fetch(u, {method: 'POST', body: new URLSearchParams({})})).status",
        f"{console.url}/jobs/{job}/retry",
    )
    assert status == 403
    # and from another site, a form that posts to the console: refused, nothing changes
    evil = free_port()
    form = (
        f"<form id=f method=post action='{console.url}/jobs/{job}/retry'>"
        "<input name=csrf value=guess></form><script>document.getElementById('f').submit()</script>"
    )

    class Evil(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(form.encode())

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", evil), Evil)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with page.expect_response(f"{console.url}/jobs/{job}/retry") as answer:
            page.goto(f"http://127.0.0.1:{evil}/")
        assert answer.value.status == 403
    finally:
        server.shutdown()
        server.server_close()
    assert job_status(h, job) == "failed"
    shot(page, "refused")


def test_hostile_names_render_as_text_and_no_secret_reaches_a_page(
    h: Harness, console: Console, browser: Browser
) -> None:
    name = "<script>alert(1)</script>"
    h.sql(f'CREATE TABLE "{name}" (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)')
    h.sql(f"INSERT INTO \"{name}\" SELECT g, '2020-01-01' FROM generate_series(1, 50) g")
    job = h.archive("--table", f'"{name}"', "--before", "2025-01-01")
    page = admin(browser, console, phone=True)
    dialogs: list[str] = []

    def dialog(d: Any) -> None:
        dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", dialog)
    for path, shot_name in (("/", "overview-phone"), ("/jobs", "jobs"), (f"/jobs/{job}", "job"),
                            ("/archive", "archive")):  # fmt: skip
        page.goto(console.url + path)
        assert name in page.inner_text("main"), path
        shot(page, shot_name)
    page.click(f"a:text-is('public.{name}')")
    assert name in page.inner_text("h1")
    shot(page, "table")
    assert not dialogs
    secret = h.env["AZURE_STORAGE_CONNECTION_STRING"].split("AccountKey=")[1].split(";")[0]
    for path in ("/", "/jobs", f"/jobs/{job}", "/archive", "/login"):
        assert secret not in console.get(path)[1]


def test_the_job_filter_offers_and_answers_every_kind(h: Harness, console: Console) -> None:
    """The jobs page's task filter offers every kind archiver.kinds registers, and lists
    each kind's jobs alone (an operator can list the compaction and orphan sweep jobs)."""
    for name in KINDS:
        h.sql("INSERT INTO background_jobs (task_name, status) VALUES ($1, 'cancelled')", name)
    status, page = console.get("/jobs")
    select = re.search(r'<select name="task">(.*?)</select>', page, re.S)
    assert status == 200 and select, page
    assert re.findall(r"<option[^>]*>([^<]*)</option>", select.group(1)) == ["any", *KINDS]
    for name in KINDS:
        status, page = console.get(f"/jobs?task={name}")
        listed = re.findall(r"</a></td><td>([^<]*)</td>", page)
        assert status == 200 and listed == [name], (name, status, listed)


def test_bad_parameters_are_one_line_and_a_console_nobody_could_read_does_not_start(
    h: Harness, console: Console
) -> None:
    for path, said in (
        ("/jobs?status=bogus", "status: 'bogus', expected one of"),
        ("/jobs?from=yesterday", "from: 'yesterday' is not a date"),
        ("/jobs?after=nope", "after: 'nope' is not a page cursor"),
        ("/jobs/not-a-uuid", "job id: 'not-a-uuid' is not a UUID"),
    ):
        status, body = console.get(path)
        assert status == 400 and body.strip().count("\n") == 0 and said in body, (path, body)
    assert console.get("/jobs/00000000-0000-0000-0000-000000000000")[0] == 404
    env = {k: v for k, v in h.env.items() if not k.startswith("ARCHIVER_CONSOLE")}

    def console_with(bind: str, **settings: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            archiver_cmd("console", "--bind", bind), env={**env, **settings},
            capture_output=True, text=True, timeout=30, cwd=ROOT,
        )  # fmt: skip

    # nobody could read it; everybody could, from beyond this machine: refused at start
    assert_refused(console_with(f"127.0.0.1:{free_port()}"), "nobody could read it")
    wide = console_with(f"0.0.0.0:{free_port()}", ARCHIVER_CONSOLE_PUBLIC_READ="true")
    assert_refused(wide, "beyond this machine", "ARCHIVER_CONSOLE_PUBLIC_READ")
