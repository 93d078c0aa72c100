"""The console's HTTP side: Starlette routes over the queue and catalog, rendered with
Jinja2 (autoescaped), every action through the same jobqueue calls the CLI makes.

Pages render whole on the server; console.js refreshes their `data-live` parts every
two seconds by fetching the page again (no full reload, nothing from the internet).
Every response carries a Content-Security-Policy that allows only the console's own
files, and a Server-Timing header with the time spent answering (the bench reads it).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import Any

import asyncpg
import jinja2
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from archiver import db, text
from archiver.config import ConfigFile, Settings
from archiver.errors import InputError, JobStateError
from archiver.web import pages
from archiver.web.auth import SESSION_COOKIE, SESSION_SECONDS, Auth, valid_name

log = logging.getLogger(__name__)

HERE = Path(str(resources.files("archiver.web")))
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)
BULK_LIMIT = 10_000  # jobs one bulk action changes at most
LOGIN_PAUSE = 1.0  # seconds a refused login waits before it is answered


class BadRequest(HTTPException):
    def __init__(self, detail: str) -> None:
        super().__init__(400, detail)


def create_app(settings: Settings, config: ConfigFile | None = None) -> Starlette:
    auth = Auth(settings.console_admin_token)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True
    )  # every value escaped: table names, errors, payloads come from the database
    templates = Jinja2Templates(env=env)
    templates.env.filters.update(
        size=lambda n: text.size(int(n or 0)),
        ago=pages.ago,
        duration=pages.seconds_text,
        first_line=lambda s: (s or "").strip().splitlines()[0] if (s or "").strip() else "",
    )
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        state["pool"] = await db.create_pool(settings.database_url, size=4)
        try:
            yield
        finally:
            await state["pool"].close()

    def pool() -> asyncpg.Pool:
        return state["pool"]

    def render(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
        cookie = request.cookies.get(SESSION_COOKIE)
        actor = auth.actor(cookie)
        response: Response = templates.TemplateResponse(
            request,
            name,
            {
                **context,
                "actor": actor,
                "can_act": actor is not None,
                "admin_configured": auth.enabled,
                "csrf": auth.csrf(cookie) if actor and cookie else "",
                "now": dt.datetime.now(dt.UTC),
            },
            status_code=status,
        )
        return response

    async def overview(request: Request) -> Response:
        async with pool().acquire() as conn:
            data = await pages.overview(conn, config)
        return render(request, "overview.html", data)

    async def jobs(request: Request) -> Response:
        filters = pages.JobFilter.parse(request.query_params)
        async with pool().acquire() as conn:
            rows = await pages.jobs(conn, filters)
        more = len(rows) > filters.limit
        rows = rows[: filters.limit]
        after = pages.cursor_of(rows[-1]) if more and rows else None
        return render(request, "jobs.html", {"jobs": rows, "filters": filters, "after": after})

    async def job(request: Request) -> Response:
        job_id = _job_id(request.path_params["job_id"])
        async with pool().acquire() as conn:
            try:
                data = await pages.job(conn, job_id)
            except JobStateError:
                raise HTTPException(404, f"no job {job_id}") from None
        return render(request, "job.html", data)

    async def archive(request: Request) -> Response:
        async with pool().acquire() as conn:
            tables = await pages.archive(conn)
        return render(request, "archive.html", {"tables": tables})

    async def table(request: Request) -> Response:
        name = request.path_params["table"]
        async with pool().acquire() as conn:
            data = await pages.table(conn, name, config)
        if data is None:
            raise HTTPException(404, f"no archive of table {name}")
        return render(request, "table.html", data)

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return render(request, "login.html", {"error": ""})
        form = await request.form()
        name, token = str(form.get("name", "")).strip(), str(form.get("token", ""))
        if not auth.enabled:
            return render(request, "login.html", {"error": "this console is read-only"}, 403)
        if not valid_name(name) or not auth.accepts(token):
            log.warning("console: refused login as %r from %s", name[:64], _client(request))
            await asyncio.sleep(LOGIN_PAUSE)  # a guess costs a second
            return render(request, "login.html", {"error": "name or token refused"}, 403)
        log.warning("console: %s logged in from %s", name, _client(request))
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            auth.session(name),
            max_age=SESSION_SECONDS,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def logout(request: Request) -> Response:
        # no session check: an expired session must be able to leave too (SameSite=Strict
        # keeps other sites from logging anyone out)
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    async def _acting(request: Request) -> tuple[str, FormData]:
        """The operator behind a POST, with its form: 403 without a session or CSRF token."""
        form = await request.form()
        cookie = request.cookies.get(SESSION_COOKIE)
        actor = auth.actor(cookie)
        if actor is None:
            raise HTTPException(403, "read-only: log in with the admin token to act")
        if not auth.csrf_ok(cookie, str(form.get("csrf", ""))):
            raise HTTPException(403, "missing or wrong CSRF token")
        return actor, form

    async def job_action(request: Request) -> Response:
        actor, form = await _acting(request)
        job_id = _job_id(request.path_params["job_id"])
        action = request.path_params["action"]
        async with pool().acquire() as conn:
            said = await pages.act_on_job(conn, job_id, action, form)
        _audit(actor, request, f"{action} job {job_id}: {said}")
        return RedirectResponse(f"/jobs/{job_id}", status_code=303)

    async def table_action(request: Request) -> Response:
        actor, _ = await _acting(request)
        name, action = request.path_params["table"], request.path_params["action"]
        async with pool().acquire() as conn:
            said = await pages.act_on_table(conn, name, action)
        _audit(actor, request, f"{action} table {name}: {said}")
        back = str((await request.form()).get("next", "/"))
        # only a path of this console: never another site (`//host`, `https:`)
        return RedirectResponse(back if _local_path(back) else "/", status_code=303)

    async def bulk(request: Request) -> Response:
        actor, form = await _acting(request)
        action = str(form.get("action", ""))
        if action not in pages.BULK_ACTIONS:
            raise BadRequest(f"action: expected one of {', '.join(pages.BULK_ACTIONS)}")
        filters = pages.JobFilter.parse(form, limit=BULK_LIMIT)
        async with pool().acquire() as conn:
            ids = [r["id"] for r in await pages.jobs(conn, filters)][:BULK_LIMIT]
            if form.get("confirm") != "yes":
                return render(
                    request,
                    "confirm.html",
                    {"action": action, "filters": filters, "count": len(ids)},
                )
            changed = await pages.act_on_jobs(conn, ids, action)
        _audit(
            actor, request, f"bulk {action} on {filters.describe()}: {changed} of {len(ids)} jobs"
        )
        return RedirectResponse(f"/jobs?{filters.query()}", status_code=303)

    async def health(_: Request) -> Response:
        async with pool().acquire() as conn:
            await conn.fetchval("SELECT 1")
        return PlainTextResponse("ok")

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        detail = str(exc.detail).splitlines()[0] if exc.detail else "error"
        if request.headers.get("accept", "").startswith("text/html"):
            return render(request, "error.html", {"status": exc.status_code, "detail": detail},
                          exc.status_code)  # fmt: skip
        return PlainTextResponse(detail + "\n", status_code=exc.status_code)

    async def input_error(request: Request, exc: Exception) -> Response:
        return await http_error(request, BadRequest(str(exc)))

    app = Starlette(
        routes=[
            Route("/", overview),
            Route("/jobs", jobs),
            Route("/jobs/bulk", bulk, methods=["POST"]),
            Route("/jobs/{job_id}", job),
            Route("/jobs/{job_id}/{action}", job_action, methods=["POST"]),
            Route("/archive", archive),
            Route("/archive/{table:path}", table),  # a table's name may hold a slash
            Route("/tables/{table:path}/{action}", table_action, methods=["POST"]),
            Route("/login", login, methods=["GET", "POST"]),
            Route("/logout", logout, methods=["POST"]),
            Route("/healthz", health),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ],
        exception_handlers={HTTPException: http_error, InputError: input_error},
        lifespan=lifespan,
    )
    app.add_middleware(_Headers)
    return app


class _Headers:
    """Security headers and Server-Timing on every response (pure ASGI: no buffering)."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                ms = (time.perf_counter() - started) * 1000
                message["headers"] = [
                    *message.get("headers", []),
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin"),
                    (b"x-frame-options", b"DENY"),
                    (b"cache-control", b"no-store"),
                    (b"server-timing", f"app;dur={ms:.1f}".encode()),
                ]
            await send(message)

        await self.app(scope, receive, sending)


def _job_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise BadRequest(f"job id: {raw[:40]!r} is not a UUID") from None


def _local_path(path: str) -> bool:
    return path.startswith("/") and not path.startswith("//") and "\\" not in path


def _client(request: Request) -> str:
    return request.client.host if request.client else "?"


def _audit(actor: str, request: Request, what: str) -> None:
    """One log line per action, naming who did it (the login name) and from where."""
    log.warning("console: %s by %s from %s", what, actor, _client(request))
