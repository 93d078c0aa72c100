"""The console's HTTP side: Starlette routes over the queue and catalog, rendered with
Jinja2 (autoescaped), every action through the same store calls the CLI makes.

Pages render whole on the server; console.js refreshes their `data-live` parts every
two seconds by fetching the page again (no full reload, nothing from the internet).
Every page needs a reader (archiver.web.auth) and every link carries the root path a
reverse proxy serves the console under (`root` in the templates).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

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
from archiver.config import ConfigFile
from archiver.context import Context
from archiver.errors import (
    DatabaseUnavailable,
    InputError,
    JobStateError,
    error_line,
    first_line,
)
from archiver.ident import as_typed
from archiver.operations import actions
from archiver.store.queue import PgQueue
from archiver.web import pages
from archiver.web.auth import (
    SESSION_COOKIE,
    SESSION_SECONDS,
    VIEWER,
    Auth,
    LoginThrottle,
    Who,
    valid_name,
)
from archiver.web.middleware import (
    FORWARDED,
    PROXY_USER,
    VOUCHING,
    Proxied,
    SecurityHeaders,
    is_loopback,
)

log = logging.getLogger(__name__)

HERE = Path(str(resources.files("archiver.web")))
BULK_LIMIT = 10_000  # jobs one bulk action changes at most
LOGIN_PAUSE = 1.0  # seconds a refused login waits before it is answered
RETRY_AFTER = 5  # seconds a page answered while the database is away waits to ask again
# What a page waits for a statement's answer; on a dead flow asyncpg then waits as long
# again for its cancel before the session goes: a 503 after twice this at most.
PAGE_SECONDS = 10.0
# What the database being away raises: asyncpg's connection errors, a refused or timed
# out connect, the server shutting down or starting up (not every OSError: a missing
# template is no outage)
UNAVAILABLE: tuple[type[BaseException], ...] = (
    DatabaseUnavailable,
    ConnectionError,
    TimeoutError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
    *(e for e in db.CONNECTION_ERRORS if e is not OSError),
)


class BadRequest(HTTPException):
    def __init__(self, detail: str) -> None:
        super().__init__(400, detail)


def environment() -> jinja2.Environment:
    """The pages' templates and their filters."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True
    )  # every value escaped: table names, errors, payloads come from the database
    env.filters.update(
        size=lambda n: text.size(int(n or 0)),
        files=lambda n: text.counted(int(n or 0), "file"),
        ago=pages.ago,
        typed=as_typed,  # a table in PostgreSQL's syntax, as addresses and the CLI take it
        duration=pages.seconds_text,
        first_line=lambda s: (s or "").strip().splitlines()[0] if (s or "").strip() else "",
    )
    return env


def create_app(ctx: Context, config: ConfigFile | None = None) -> Starlette:
    return Console(ctx, config).app()


class Console:
    """One console process: its settings and policies, its tokens and login throttle,
    its templates and (from the lifespan on) its pool; each route a method."""

    def __init__(self, ctx: Context, config: ConfigFile | None) -> None:
        settings = ctx.settings
        self.ctx, self.settings, self.config = ctx, settings, config
        self.auth = Auth(settings.console_admin_token, settings.console_viewer_token)
        self.throttle = LoginThrottle()  # in this process: one console per deployment
        self.templates = Jinja2Templates(env=environment())
        self._pool: asyncpg.Pool | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self, _: Starlette) -> AsyncIterator[None]:
        # lazy: a console started while PostgreSQL is away answers 503 until it is back,
        # rather than exit with a traceback (and, restarted by supervisord, give up)
        self._pool = await self.ctx.open_pool(size=4, lazy=True, command_timeout=PAGE_SECONDS)
        try:
            yield
        finally:
            await self.ctx.aclose()

    @property
    def pool(self) -> asyncpg.Pool:
        assert self._pool is not None, "the console's lifespan opens its pool"
        return self._pool

    def who(self, request: Request) -> Who:
        """The person behind a request: their session, else the proxy's word, else
        nobody (who may read only where the operator opened reading, and only from this
        machine: a request some proxy passed on may come from anywhere)."""
        vouching, vouched = request.scope.get(VOUCHING), request.scope.get(PROXY_USER)
        session = self.auth.who(request.cookies.get(SESSION_COOKIE))
        if session and vouching and session[0] != vouched:
            session = None  # someone else's session in this browser, or nobody named
        if session:
            return Who(session[0], session[1], by_proxy=bool(vouching), session=True)
        if vouched:
            return Who(vouched, VIEWER, by_proxy=True)
        opened = self.settings.console_public_read and not request.scope.get(FORWARDED)
        return Who(None, VIEWER if opened and is_loopback(_client(request)) else None)

    def render(
        self, request: Request, name: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        cookie = request.cookies.get(SESSION_COOKIE)
        person = self.who(request)
        response: Response = self.templates.TemplateResponse(
            request,
            name,
            {
                **context,
                "who": person,
                "can_act": person.can_act,
                "login_possible": self.auth.enabled,
                "names_by_proxy": bool(self.settings.console_proxy_header),
                "csrf": self.auth.csrf(cookie) if cookie and person.session else "",
                "root": request.scope.get("root_path", ""),
                "now": dt.datetime.now(dt.UTC),
            },
            status_code=status,
        )
        return response

    def reading(self, handler: Callable[[Request], Awaitable[Response]]) -> Callable[..., Any]:
        """A page only a reader sees: anyone else is sent to the login page."""

        async def guarded(request: Request) -> Response:
            if not self.who(request).can_read:
                if not request.headers.get("accept", "").startswith("text/html"):
                    return PlainTextResponse("log in to read this console\n", status_code=401)
                path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(_to(request, "/login?" + urlencode({"next": path})), 303)
            return await handler(request)

        return guarded

    async def overview(self, request: Request) -> Response:
        async with self.pool.acquire() as conn:
            data = await pages.overview(conn, self.config)
        return self.render(request, "overview.html", data)

    async def jobs(self, request: Request) -> Response:
        filters = pages.JobFilter.parse(request.query_params)
        async with self.pool.acquire() as conn:
            rows = await pages.job_page(conn, filters)
        more = len(rows) > filters.limit
        rows = rows[: filters.limit]
        after = pages.cursor_of(rows[-1]) if more and rows else None
        page = {"jobs": rows, "filters": filters, "after": after, "statuses": pages.STATUSES,
                "tasks": pages.task_names(), "bulk_actions": actions.BULK_ACTIONS}  # fmt: skip
        return self.render(request, "jobs.html", page)

    async def job(self, request: Request) -> Response:
        job_id = _job_id(request.path_params["job_id"])
        async with self.pool.acquire() as conn:
            try:
                data = await pages.job(conn, job_id)
            except JobStateError:
                raise HTTPException(404, f"no job {job_id}") from None
        return self.render(request, "job.html", data)

    async def archive(self, request: Request) -> Response:
        async with self.pool.acquire() as conn:
            tables = await pages.archive(conn)
        return self.render(request, "archive.html", {"tables": tables})

    async def table(self, request: Request) -> Response:
        name = request.path_params["table"]
        async with self.pool.acquire() as conn:
            data = await pages.table(conn, name, self.config)
        if data is None:
            raise HTTPException(404, f"no archive of table {name}")
        data["reader_retention"] = text.period(self.settings.reader_retention)
        return self.render(request, "table.html", data)

    async def reads(self, request: Request) -> Response:
        role = request.query_params.get("role") or None
        table = request.query_params.get("table") or None
        async with self.pool.acquire() as conn:
            rows = await pages.reads(conn, role, table)
        return self.render(request, "reads.html", {"reads": rows, "role": role, "table": table})

    async def login(self, request: Request) -> Response:
        back = _back(request, str(request.query_params.get("next", "")))
        if request.method == "GET":
            return self.render(request, "login.html", {"error": "", "next": back})
        form = await request.form()
        vouched, client = request.scope.get(PROXY_USER), _client(request)
        name, token = vouched or str(form.get("name", "")).strip(), str(form.get("token", ""))
        if not self.auth.enabled:
            said = {"error": "no login: this console has no tokens", "next": back}
            return self.render(request, "login.html", said, 403)
        if self.settings.console_proxy_header and not vouched:  # never a name typed instead
            header = self.settings.console_proxy_header
            said = {"error": f"log in through the proxy that names you ({header})", "next": back}
            return self.render(request, "login.html", said, 403)
        if wait := self.throttle.locked_for(client):
            error = f"too many refused logins from {client}: try again in {wait / 60:.0f} min"
            response = self.render(request, "login.html", {"error": error, "next": back}, 429)
            response.headers["retry-after"] = str(int(wait) + 1)
            return response
        role = self.auth.role_of(token)
        if not valid_name(name) or role is None:
            locked = self.throttle.refused(client)
            then = f" (locked out for {self.throttle.lockout / 60:.0f} min)" if locked else ""
            shown = repr(name) if vouched else f"a typed name of {len(name)} characters"
            log.warning("console: refused login as %s from %s%s", shown, client, then)  # a
            # typed "name" may be a token pasted in the wrong field: never logged
            await asyncio.sleep(LOGIN_PAUSE)  # a guess costs a second
            said = {"error": "name or token refused", "next": back}
            return self.render(request, "login.html", said, 403)
        log.warning("console: %s logged in as %s from %s", name, role, client)
        response = RedirectResponse(back, status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            self.auth.session(name, role),
            max_age=SESSION_SECONDS,
            path=_to(request, "/"),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def logout(self, request: Request) -> Response:
        # a session's logout carries its CSRF token (a cross-site POST would not); an
        # expired or foreign cookie may always leave
        cookie = request.cookies.get(SESSION_COOKIE)
        if self.auth.who(cookie) and not self.auth.csrf_ok(
            cookie, str((await request.form()).get("csrf", ""))
        ):
            raise HTTPException(403, "missing or wrong CSRF token")
        response = RedirectResponse(_to(request, "/"), status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=_to(request, "/"))
        return response

    async def _acting(self, request: Request) -> tuple[actions.Actor, FormData]:
        """The operator behind a POST (who, from where), with its form: 403 without an
        admin session or without its CSRF token."""
        form = await request.form()
        person = self.who(request)
        if not person.can_act:
            raise HTTPException(403, "read-only: log in with the admin token to act")
        if not self.auth.csrf_ok(request.cookies.get(SESSION_COOKIE), str(form.get("csrf", ""))):
            raise HTTPException(403, "missing or wrong CSRF token")
        return actions.Actor(str(person.name), _client(request)), form

    async def job_action(self, request: Request) -> Response:
        actor, form = await self._acting(request)
        job_id = _job_id(request.path_params["job_id"])
        action = request.path_params["action"]
        async with self.pool.acquire() as conn, conn.transaction():
            said = await pages.act_on_job(conn, job_id, action, form, actor)
        _said(actor, action, f"job {job_id}", said)
        return RedirectResponse(_to(request, f"/jobs/{job_id}"), status_code=303)

    async def table_action(self, request: Request) -> Response:
        actor, _ = await self._acting(request)
        name, action = request.path_params["table"], request.path_params["action"]
        async with self.pool.acquire() as conn, conn.transaction():
            said, table = await pages.act_on_table(conn, name, action, actor)
        _said(actor, action, f"table {table}", said)
        back = _back(request, str((await request.form()).get("next", "")))
        return RedirectResponse(back, 303)

    async def bulk(self, request: Request) -> Response:
        actor, form = await self._acting(request)
        action = str(form.get("action", ""))
        if action not in actions.BULK_ACTIONS:
            raise BadRequest(f"action: expected one of {', '.join(actions.BULK_ACTIONS)}")
        filters = pages.JobFilter.parse(form, limit=BULK_LIMIT)
        async with self.pool.acquire() as conn:
            ids = [r["id"] for r in await pages.job_page(conn, filters)][:BULK_LIMIT]
            if form.get("confirm") != "yes":
                return self.render(
                    request,
                    "confirm.html",
                    {"action": action, "filters": filters, "count": len(ids)},
                )
            said = await actions.on_jobs(PgQueue(conn), ids, action, actor, filters.describe())
        _said(actor, f"bulk {action}", filters.describe(), said)
        return RedirectResponse(_to(request, f"/jobs?{filters.query()}"), status_code=303)

    async def health(self, _: Request) -> Response:
        async with self.pool.acquire() as conn:
            await conn.fetchval("SELECT 1")
        return PlainTextResponse("ok")

    async def http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        detail = str(exc.detail).splitlines()[0] if exc.detail else "error"
        if request.headers.get("accept", "").startswith("text/html"):
            return self.render(request, "error.html", {"status": exc.status_code, "detail": detail},
                          exc.status_code)  # fmt: skip
        return PlainTextResponse(detail + "\n", status_code=exc.status_code)

    async def input_error(self, request: Request, exc: Exception) -> Response:
        return await self.http_error(request, BadRequest(str(exc)))

    async def unavailable(self, request: Request, exc: Exception) -> Response:
        """The database away (restarting, unreachable): 503, not a traceback and a 500;
        an HTML page reloads itself every few seconds, so it is back when the database is
        (the pool reconnects by itself)."""
        log.warning("database unavailable: %s", error_line(exc))
        detail = f"database unavailable ({first_line(exc)}); retrying every {RETRY_AFTER} s"
        headers = {"Retry-After": str(RETRY_AFTER)}
        if request.headers.get("accept", "").startswith("text/html"):
            page = {"status": 503, "detail": detail, "retry": RETRY_AFTER}
            response = self.render(request, "error.html", page, 503)
            response.headers.update(headers)
            return response
        return PlainTextResponse(detail + "\n", status_code=503, headers=headers)

    def app(self) -> Starlette:
        app = Starlette(
            routes=[
                Route("/", self.reading(self.overview)),
                Route("/jobs", self.reading(self.jobs)),
                Route("/jobs/bulk", self.bulk, methods=["POST"]),
                Route("/jobs/{job_id}", self.reading(self.job)),
                Route("/jobs/{job_id}/{action}", self.job_action, methods=["POST"]),
                Route("/archive", self.reading(self.archive)),
                Route("/archive/{table:path}", self.reading(self.table)),  # may hold a slash
                Route("/reads", self.reading(self.reads)),
                Route("/tables/{table:path}/{action}", self.table_action, methods=["POST"]),
                Route("/login", self.login, methods=["GET", "POST"]),
                Route("/logout", self.logout, methods=["POST"]),
                Route("/healthz", self.health),
                Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
            ],
            exception_handlers={
                HTTPException: self.http_error,
                InputError: self.input_error,
                **dict.fromkeys(UNAVAILABLE, self.unavailable),
            },
            lifespan=self.lifespan,
        )
        app.add_middleware(SecurityHeaders)
        proxies, header = self.settings.console_proxy_addresses, self.settings.console_proxy_header
        app.add_middleware(Proxied, proxies=proxies, header=header)  # last: it runs first
        return app


def _said(actor: actions.Actor, action: str, target: str, said: str) -> None:
    """One log line per action (its archiver_audit row is operations.actions'), naming
    who and from where."""
    log.warning("console: %s %s: %s by %s from %s", action, target, said, actor.who,
                actor.address)  # fmt: skip


def _job_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise BadRequest(f"job id: {raw[:40]!r} is not a UUID") from None


def _local_path(path: str) -> bool:
    return path.startswith("/") and not path.startswith("//") and "\\" not in path


def _back(request: Request, path: str) -> str:
    """Where to send the browser back to: a path of this console under its root path,
    never another site (`//host`, `https:`) nor another application on the host."""
    home = _to(request, "/")
    return path if _local_path(path) and path.startswith(home) else home


def _to(request: Request, path: str) -> str:
    """A path of this console as the browser sees it: under the proxy's root path."""
    return str(request.scope.get("root_path", "")) + path


def _client(request: Request) -> str:
    return request.client.host if request.client else "?"
