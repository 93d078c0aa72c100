"""Who may read the console and who may act, in Debian's Chromium: reading needs a
credential unless opened explicitly, a viewer reads without acting, rotating a token ends
the sessions made with it, refused logins lock an address out, and behind a real nginx
on a sub-path (the configuration docs/deployment.md shows) every link, form, redirect and
static file works and the audit names the person nginx signed in."""

from __future__ import annotations

import http.client
import urllib.parse
from pathlib import Path

from playwright.sync_api import Browser, Page

from tests.support.console import (
    TOKEN,
    VIEWER_TOKEN,
    Console,
    Nginx,
    browser,
    failed_job,
    job_status,
    log_in,
    shot,
)
from tests.support.harness import Harness

__all__ = ["browser"]  # a fixture
POST_WITH_CSRF = """async ([url, csrf]) => (await fetch(url, {method: 'POST',
    body: new URLSearchParams({csrf: csrf || ''})})).status"""


def csrf_of(page: Page) -> str:
    """The CSRF token the page's header holds (its logout form), "" without a session."""
    field = page.locator("header input[name=csrf]")
    return (field.first.get_attribute("value") or "") if field.count() else ""


def test_reading_needs_a_credential_and_a_viewer_reads_without_acting(
    h: Harness, browser: Browser, tmp_path: Path
) -> None:
    job = failed_job(h, seed=500)
    console = Console(h, tmp_path)
    try:
        nobody = browser.new_context().new_page()
        nobody.goto(f"{console.url}/archive")
        nobody.wait_for_url(f"{console.url}/login?next=%2Farchive")
        assert console.get("/jobs", reader=False)[0] == 401  # not a browser: one line
        assert console.get("/healthz", reader=False) == (200, "ok")  # for the monitoring
        viewer = log_in(browser, console.url, VIEWER_TOKEN, "ops-bob")
        assert viewer.inner_text("header .who").startswith("ops-bob viewer")
        viewer.goto(f"{console.url}/jobs/{job}")
        assert "failpoint before_upload" in viewer.inner_text("#job")
        assert viewer.locator("button[data-action]").count() == 0
        url = f"{console.url}/jobs/{job}/retry"
        assert viewer.evaluate(POST_WITH_CSRF, [url, csrf_of(viewer)]) == 403
        admin = log_in(browser, console.url, TOKEN, "ops-alice")
        admin.goto(f"{console.url}/jobs/{job}")
        admin.click("button[data-action=retry]")
        admin.wait_for_url(f"{console.url}/jobs/{job}")
        assert job_status(h, job) == "queued"
        assert "ops-alice" in admin.inner_text("#changes") and "retry" in admin.inner_text(
            "#changes"
        )
    finally:
        console.stop()
    # opened explicitly: whoever reaches it reads, and nobody can log in or act
    opened = Console(h, tmp_path, {"ARCHIVER_CONSOLE_ADMIN_TOKEN": "", "ARCHIVER_CONSOLE_VIEWER_TOKEN": "",
                                   "ARCHIVER_CONSOLE_PUBLIC_READ": "true"})  # fmt: skip
    try:
        page = browser.new_context().new_page()
        page.goto(f"{opened.url}/jobs/{job}")
        assert "queued" in page.inner_text("#job-status")
        assert page.inner_text("header .who").strip() == "read-only"
        assert opened.get("/jobs", reader=False)[0] == 200
    finally:
        opened.stop()


def test_rotating_a_token_ends_the_sessions_made_with_it(
    h: Harness, browser: Browser, tmp_path: Path
) -> None:
    job = failed_job(h, seed=500)
    before = Console(h, tmp_path)
    admin = log_in(browser, before.url, TOKEN, "ops-alice")
    csrf = csrf_of(admin)
    viewer = log_in(browser, before.url, VIEWER_TOKEN, "ops-bob")
    before.stop()
    # the admin token rotated, the viewer's kept (cookies are per host, not per port)
    after = Console(h, tmp_path, {"ARCHIVER_CONSOLE_ADMIN_TOKEN": "the-new-admin-token"})
    try:
        admin.goto(f"{after.url}/jobs/{job}")
        admin.wait_for_url(f"{after.url}/login?next=**")
        url = f"{after.url}/jobs/{job}/retry"
        assert csrf and admin.evaluate(POST_WITH_CSRF, [url, csrf]) == 403
        viewer.goto(f"{after.url}/jobs/{job}")
        assert viewer.inner_text("#job-status") == "failed"  # still reads
        assert job_status(h, job) == "failed"
    finally:
        after.stop()


def test_refused_logins_lock_the_address_out_not_the_others(
    h: Harness, browser: Browser, tmp_path: Path
) -> None:
    # a proxy on loopback tells the client's address (X-Forwarded-For)
    console = Console(h, tmp_path, {"ARCHIVER_CONSOLE_PROXY_ADDRESSES": "127.0.0.1"})
    try:

        def client(address: str) -> Page:
            context = browser.new_context(extra_http_headers={"X-Forwarded-For": address})
            page = context.new_page()
            page.goto(f"{console.url}/login")
            return page

        def attempt(page: Page, token: str) -> int:
            page.fill("input[name=name]", "mallory")
            page.fill("input[name=token]", token)
            with page.expect_response(lambda r: r.request.method == "POST") as answer:
                page.click("button:text-is('Log in')")
            return answer.value.status

        guesser = client("198.51.100.7")
        assert [attempt(guesser, f"guess-{i}") for i in range(5)] == [403] * 5
        assert attempt(guesser, TOKEN) == 429  # the right token too, now
        assert "too many refused logins from 198.51.100.7" in guesser.inner_text("#login-error")
        shot(guesser, "login-locked-out")
        other = client("198.51.100.8")
        assert attempt(other, TOKEN) == 303  # another address logs in
        log = console.log.read_text()
        said = "refused login as a typed name of 7 characters from 198.51.100.7 (locked out"
        refusals = [line for line in log.splitlines() if "refused login" in line]
        assert said in log and not any("mallory" in line for line in refusals)  # or a token
        assert TOKEN not in log and "guess-" not in log
    finally:
        console.stop()


def test_behind_nginx_on_a_sub_path_links_work_and_actions_name_the_signed_in_person(
    h: Harness, browser: Browser, tmp_path: Path
) -> None:
    job = failed_job(h, seed=500)
    h.sql("CREATE TABLE events (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)")
    h.sql("INSERT INTO events SELECT g, '2020-01-01' FROM generate_series(1, 100) g")
    h.archive("--table", "events", "--before", "2025-01-01")
    console = Console(
        h, tmp_path,
        {"ARCHIVER_CONSOLE_PROXY_HEADER": "X-Forwarded-User",
         "ARCHIVER_CONSOLE_PROXY_ADDRESSES": "127.0.0.2", "ARCHIVER_CONSOLE_VIEWER_TOKEN": ""},
        "--root-path", "/archiver",
    )  # fmt: skip
    nginx = Nginx(tmp_path, console.port, {"alice": "alice-pw", "bob": "bob-pw"})
    base = nginx.url + "/archiver"
    try:
        alice_context = browser.new_context(
            http_credentials={"username": "alice", "password": "alice-pw"}
        )
        alice = alice_context.new_page()
        alice.goto(base + "/")
        assert alice.inner_text("#who") == "alice"  # nginx signed her in: she reads
        assert alice.locator("button[data-action]").count() == 0  # acting needs the token
        # every link, form and asset of every page is under the sub-path, and answers
        seen: set[str] = set()
        for path in ("/", "/jobs", f"/jobs/{job}", "/archive", "/archive/public.events", "/login"):
            alice.goto(base + path)
            assert alice.evaluate("document.styleSheets[0].cssRules.length") > 0, path
            refs = alice.evaluate(
                """() => [...document.querySelectorAll('a[href], link[href], script[src], form[action]')]
                   .map(e => e.getAttribute('href') || e.getAttribute('src') || e.getAttribute('action'))"""
            )
            assert refs and all(r.startswith("/archiver/") for r in refs), (path, refs)
            seen.update(r for r in refs if "/login" not in r and "/logout" not in r)
        for ref in sorted(seen):
            if not ref.rstrip("/").endswith(("/retry", "/pause", "/resume", "/bulk")):
                assert alice.request.get(nginx.url + ref).status == 200, ref
        alice.goto(base + "/")
        alice.click("nav a:text-is('Jobs')")
        alice.wait_for_url(base + "/jobs")
        # she logs in to act: the proxy names her, the token is all she gives
        alice.click("text=Log in to act")
        alice.wait_for_url(base + "/login")
        assert alice.inner_text("#proxy-name") == "alice"
        assert alice.locator("input[name=name]").count() == 0
        alice.fill("input[name=token]", TOKEN)
        alice.click("button:text-is('Log in')")
        alice.wait_for_url(base + "/")
        alice.goto(f"{base}/jobs/{job}")
        alice.click("button[data-action=retry]")
        alice.wait_for_url(f"{base}/jobs/{job}")
        assert job_status(h, job) == "queued"
        assert "alice" in alice.inner_text("#changes")
        shot(alice, "behind-nginx")
        [row] = h.sql("SELECT actor, via, address, action, target FROM archiver_audit")
        # the client's address is the one nginx saw (its own is 127.0.0.2)
        assert dict(row) == {"actor": "alice", "via": "console", "address": "127.0.0.1",
                             "action": "retry", "target": f"job {job}"}  # fmt: skip
        assert f"retry job {job}: queued again by alice from 127.0.0.1" in console.log.read_text()
        alice.goto(base + "/")
        alice.locator("#by-table tr", has_text="queued").locator(
            "button[data-action=pause-table]"
        ).click()
        alice.wait_for_url(base + "/")  # the redirect back stays under the sub-path
        assert h.value("SELECT count(*) FROM archiver_paused_tables") == 1
        # her cookie in bob's browser does not make bob an admin, nor her
        bob_context = browser.new_context(
            http_credentials={"username": "bob", "password": "bob-pw"}
        )
        bob_context.add_cookies(alice_context.cookies())  # type: ignore[arg-type]
        bob = bob_context.new_page()
        bob.goto(f"{base}/jobs/{job}")
        assert bob.inner_text("#who") == "bob" and bob.locator("button[data-action]").count() == 0
        url = f"{base}/jobs/{job}/cancel"
        assert bob.evaluate(POST_WITH_CSRF, [url, csrf_of(alice)]) == 403
        # straight to the console's port, the identity header is nobody's word
        direct = http.client.HTTPConnection("127.0.0.1", console.port, timeout=10)
        direct.request("GET", "/jobs", headers={"X-Forwarded-User": "alice", "Accept": "text/html"})
        answer = direct.getresponse()
        direct.close()
        assert answer.status == 303
        assert (answer.getheader("location") or "").startswith("/archiver/login?next=")
        # nor may anyone there log in under a name of their own choosing
        direct = http.client.HTTPConnection("127.0.0.1", console.port, timeout=10)
        form = urllib.parse.urlencode({"name": "alice", "token": TOKEN})
        direct.request(
            "POST", "/login", form, {"Content-Type": "application/x-www-form-urlencoded"}
        )
        answer = direct.getresponse()
        assert answer.status == 403 and "log in through the proxy" in answer.read().decode()
        direct.close()
        # a logout without her session's CSRF token (another site's form) changes nothing
        assert alice.evaluate(POST_WITH_CSRF, [f"{base}/logout", ""]) == 403
        # logging out leaves her a reader, under the sub-path
        alice.click("header button:text-is('Log out')")
        alice.wait_for_url(base + "/")
        assert (
            alice.inner_text("#who") == "alice" and alice.locator("text=Log in to act").count() == 1
        )
        assert job_status(h, job) == "queued"
    finally:
        nginx.stop()
        console.stop()
