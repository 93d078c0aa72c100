"""archiver serve's Iceberg REST catalog (ARCHIVER_SERVE_ICEBERG_REST, `serve
--iceberg-rest`): the REST spec's read side over the archive's Iceberg tables (the JDBC
catalog in the queue database, archiver.iceberg), for engines that speak only REST.

- Sign-in: OAuth2 client credentials at `/v1/oauth/tokens`, a login role and its
  password, checked as serve checks them (archiver.serve.tokens); the configured user
  signs in too, and reads every table.
- Authorization: a person lists and loads the tables they may read whole -- SELECT on the
  table and USAGE on its schema, as the definitions database carries the live tables'
  grants (archiver.serve.privileges) -- asked at every request, so a REVOKE is in force
  within the mirror's pass. A person granted some columns only is refused (files cannot
  hide a column), and so is one the live table's row security applies to.
- Credentials: a load asking for vended credentials gets a read-only (read, list)
  container SAS that expires within the hour (archiver.serve.vending). A flat
  namespace account cannot scope a SAS below its container, so one is vended only to a
  person who may read every table of the catalog (docs/iceberg-rest.md), and every SAS
  vended is made void when one of its holders no longer may (archiver.serve.revoking).
- Every token, load and refusal is a row of archive_reads (door `iceberg-rest`).
- Writes are refused: archiver alone writes its Iceberg tables."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote

import psycopg
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from archiver.config import Settings
from archiver.db import query
from archiver.errors import ConfigError, first_line
from archiver.serve.audit import Read, ReadAudit
from archiver.serve.privileges import Mirror
from archiver.serve.revoking import Revoker
from archiver.serve.signin import SignIn
from archiver.serve.tokens import TOKEN_SECONDS, Person, Refused, Tokens, client
from archiver.serve.vending import NotVended, Vending
from archiver.serve.watchdog import WATCHDOG

log = logging.getLogger(__name__)

DOOR = "iceberg-rest"
QUERY_SECONDS = 5.0  # a privilege check on the definitions database, at most
ENDPOINTS = [
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials",
]


class RestCatalog:
    """The REST catalog's state: its tokens, its session on the definitions database and
    the Iceberg catalog; `app` is the ASGI application."""

    def __init__(
        self, settings: Settings, signin: SignIn, mirror: Mirror, audit: ReadAudit
    ) -> None:
        from archiver.iceberg.catalog import open_catalog

        self.settings, self.signin, self.mirror, self.audit = settings, signin, mirror, audit
        self.catalog = open_catalog(settings)
        self.tokens = Tokens(signin)
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self.vending = Vending(settings, audit.url)
        configured = signin.configured_user if signin.configured else None
        self.revoker = Revoker(self.vending, audit, DOOR, self._first_lost, configured)
        self.app = Starlette(
            routes=self._routes(),
            exception_handlers={Refused: lambda _, exc: exc.response()},
        )

    def close(self) -> None:
        self.revoker.close()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        with contextlib.suppress(Exception):
            self.catalog.engine.dispose()

    def _routes(self) -> list[Route]:
        base = "/v1/namespaces"
        reads = [
            ("/v1/config", self.config, ["GET"]),
            ("/v1/oauth/tokens", self.token, ["POST"]),
            (base, self.namespaces, ["GET"]),
            (base + "/{namespace}", self.namespace, ["GET", "HEAD"]),
            (base + "/{namespace}/tables", self.tables, ["GET"]),
            (base + "/{namespace}/tables/{table}", self.load, ["GET", "HEAD"]),
            (base + "/{namespace}/tables/{table}/credentials", self.credentials, ["GET"]),
        ]
        writes = [
            base + p
            for p in (
                "",
                "/{namespace}",
                "/{namespace}/properties",
                "/{namespace}/tables",
                "/{namespace}/tables/{table}",
                "/{namespace}/register",
            )
        ]
        writes += ["/v1/tables/rename", "/v1/transactions/commit"]  # fmt: skip
        return [Route(path, call, methods=methods) for path, call, methods in reads] + [
            Route(path, self.refuse_write, methods=["POST", "PUT", "DELETE"]) for path in writes
        ]

    # -- the endpoints (run in starlette's threads: each asks PostgreSQL) -----------------

    def config(self, request: Request) -> Response:
        self._who(request)
        return JSONResponse({"defaults": {}, "overrides": {}, "endpoints": ENDPOINTS})

    async def token(self, request: Request) -> Response:
        """OAuth2 client credentials; refusals in OAuth's own error form."""
        read = self._read(request, "anonymous", "POST /v1/oauth/tokens")
        try:
            form = {k: str(v) for k, v in (await request.form()).items()}
            user, secret = client(request.headers.get("authorization", ""), form)
            read.role = user or "anonymous"
            if form.get("grant_type") != "client_credentials":
                raise Refused(400, "unsupported_grant_type", "only client_credentials is "
                              "granted here", "28000")  # fmt: skip
            token = await run_in_threadpool(self.tokens.issue, user, secret)
        except Refused as exc:
            self.audit.finish(read, exc.outcome)
            return JSONResponse({"error": exc.kind, "error_description": str(exc)},
                                status_code=exc.status)  # fmt: skip
        self.audit.finish(read, "ok")
        return JSONResponse({
            "access_token": token,
            "token_type": "bearer",
            "expires_in": TOKEN_SECONDS,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        })  # fmt: skip

    def namespaces(self, request: Request) -> Response:
        person = self._who(request)
        names = sorted({ns for ns, _ in self._readable(person)})
        return JSONResponse({"namespaces": [[n] for n in names]})

    def namespace(self, request: Request) -> Response:
        person = self._who(request)
        namespace = _namespace(request)
        if not any(ns == namespace for ns, _ in self._readable(person)):
            raise Refused(
                404, "NoSuchNamespaceException", f"namespace {namespace} does not exist", "3F000"
            )
        if request.method == "HEAD":
            return Response(status_code=204)
        return JSONResponse({"namespace": [namespace], "properties": {}})

    def tables(self, request: Request) -> Response:
        person = self._who(request)
        namespace = _namespace(request)
        names = sorted(t for ns, t in self._readable(person) if ns == namespace)
        return JSONResponse({"identifiers": [{"namespace": [namespace], "name": t} for t in names]})

    def load(self, request: Request) -> Response:
        return self._table(request, credentials_only=False)

    def credentials(self, request: Request) -> Response:
        return self._table(request, credentials_only=True)

    def refuse_write(self, request: Request) -> Response:
        person = self._who(request)
        read = self._read(request, person.role, f"{request.method} {request.url.path}")
        self.audit.finish(read, "42501")
        raise Refused(403, "ForbiddenException", "archiver's Iceberg tables are written by "
                      "archiver alone: this catalog reads", "42501")  # fmt: skip

    # -- what they share --------------------------------------------------------------

    def _table(self, request: Request, *, credentials_only: bool) -> Response:
        person = self._who(request)
        namespace, name = _namespace(request), unquote(request.path_params["table"])
        table = f"{namespace}.{name}"
        read = self._read(request, person.role, f"{request.method} {request.url.path}")
        read.tables = [table]
        try:
            tables = self._verdicts(person)
            catalogued = self._iceberg_tables()
            if table not in tables or (namespace, name) not in catalogued:
                raise Refused(404, "NoSuchTableException", f"table {table} does not exist", "42P01")
            self._check(person, table, tables[table])
            if request.method == "HEAD":
                self.audit.finish(read, "ok")
                return Response(status_code=204)
            delegated = "vended-credentials" in request.headers.get(
                "x-iceberg-access-delegation", ""
            )
            credentials = []
            if delegated or credentials_only:
                credentials = self._vended(person, tables, catalogued)
            if credentials_only:
                body: dict[str, Any] = {"storage-credentials": credentials}
            else:
                loaded = self.catalog.load_table((namespace, name))
                body = {
                    "metadata-location": loaded.metadata_location,
                    "metadata": _metadata_json(loaded.metadata),
                    "config": credentials[0]["config"] if credentials else {},
                    "storage-credentials": credentials,
                }
        except Refused as exc:
            self.audit.finish(read, exc.outcome)
            raise
        except Exception:
            self.audit.finish(read, "XX000")  # the catalog or the storage failed it
            raise
        self.audit.finish(read, "ok")
        return JSONResponse(body)

    def _who(self, request: Request) -> Person:
        return self.tokens.person(request.headers.get("authorization", ""))

    def _verdicts(self, person: Person) -> dict[str, tuple[bool, bool]]:
        """schema.table -> (may read it whole, may read some of it), by the definitions
        database's grants."""
        role = None if person.everything else person.role
        with self._session() as conn:
            rows = conn.execute(query("rest_grants"), {"role": role}).fetchall()
        return {f"{r[0]}.{r[1]}": (r[2], r[3]) for r in rows}

    def _check(self, person: Person, table: str, verdict: tuple[bool, bool]) -> None:
        whole, some = verdict
        name = table.split(".", 1)[1]
        if not whole:
            said = (": you may read some of its columns only, and a client given its files "
                    "reads them all") if some else ""  # fmt: skip
            raise Refused(
                403, "ForbiddenException", f"permission denied for table {name}{said}", "42501"
            )
        rls = self.mirror.row_security.get(tuple(table.split(".", 1)))  # type: ignore[arg-type]
        if rls is not None and not person.everything:
            with self._session() as conn:
                row = conn.execute(query("rest_row_security_exempt"), {"role": person.role, "owner": rls.owner,
                                            "forced": rls.forced}).fetchone()  # fmt: skip
            if not (row and row[0]):
                raise Refused(403, "ForbiddenException", f"permission denied for table {name}: "
                              "row security applies to you on the live table, and its files "
                              "cannot apply its policies", "42501")  # fmt: skip

    def _iceberg_tables(self) -> list[tuple[str, str]]:
        """(namespace, name) of each Iceberg table of the catalog."""
        return [
            (".".join(ident[:-1]), ident[-1])
            for namespace in self.catalog.list_namespaces()
            for ident in self.catalog.list_tables(namespace)
        ]

    def _readable(self, person: Person) -> list[tuple[str, str]]:
        """(namespace, name) of each Iceberg table the person may load."""
        verdicts = self._verdicts(person)
        return [t for t in self._iceberg_tables() if _whole(verdicts, t)]

    def _vended(
        self, person: Person, verdicts: dict[str, tuple[bool, bool]],
        catalogued: list[tuple[str, str]],
    ) -> list[dict[str, Any]]:  # fmt: skip
        """A read-only SAS of the archive's container, for one who may read every table
        of it (a SAS cannot be narrower here); one line saying why not otherwise. The
        person is a holder of it until it expires."""
        denied = [t for t in catalogued if not _whole(verdicts, t)]
        if denied and self.settings.storage_location().scheme == "az":
            raise Refused(403, "ForbiddenException", "no credentials vended: a SAS of this "
                          "account cannot be narrower than its container, which holds "
                          f"{len(denied)} table(s) you may not read", "42501")  # fmt: skip
        try:
            credentials = self.vending.credentials()
        except NotVended as exc:
            raise Refused(403, "ForbiddenException", str(exc), "42501") from None
        if credentials and not person.everything:
            self.revoker.held(person.role)
        return credentials

    def _first_lost(self, roles: list[str]) -> tuple[str, str] | None:
        """The first of `roles` who may no longer hold a SAS of the container, and why
        (the revoker's question, archiver.serve.revoking); the catalog listed once."""
        catalogued = self._iceberg_tables()
        for role in roles:
            with self._session() as conn:
                row = conn.execute(query("rest_signs_in"), {"role": role}).fetchone()
            if not (row and row[0]):
                return role, f"{role} may no longer sign in"
            person = Person(role, False, 0.0)
            verdicts = self._verdicts(person)
            for table in catalogued:
                name = ".".join(table)
                try:
                    self._check(person, name, verdicts.get(name, (False, False)))
                except Refused as exc:
                    return role, f"{role}: {exc}"
        return None

    @contextlib.contextmanager
    def _session(self) -> Iterator[psycopg.Connection[Any]]:
        """archiver's session on the definitions database (one, for the privilege checks)."""
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self.signin.place.conninfo(), autocommit=True,
                                                 connect_timeout=int(QUERY_SECONDS))  # fmt: skip
                with WATCHDOG.watch(
                    self._conn.pgconn.socket, QUERY_SECONDS, "a REST privilege check"
                ):
                    yield self._conn
            except psycopg.Error as exc:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                log.warning("serve: the REST catalog's privilege check failed: %s", first_line(exc))
                raise Refused(503, "ServiceUnavailableException", "the catalog's grants cannot "
                              "be read just now: try again", "58000") from None  # fmt: skip

    def _read(self, request: Request, role: str, what: str) -> Read:
        client = request.client
        return Read(role, None, f"{client.host}:{client.port}" if client else None,
                    request.headers.get("user-agent"), what, door=DOOR)  # fmt: skip


def _namespace(request: Request) -> str:
    return unquote(request.path_params["namespace"]).replace("\x1f", ".")


def _whole(verdicts: dict[str, tuple[bool, bool]], table: tuple[str, str]) -> bool:
    return verdicts.get(".".join(table), (False, False))[0]


def _metadata_json(metadata: Any) -> Any:
    import json

    return json.loads(metadata.model_dump_json())


def checked(settings: Settings, bind: str, check: Callable[[Settings, str], Any]) -> Any:
    """Where the REST catalog listens, checked as serve's own address is (`check`); one
    line naming the REST catalog's setting otherwise."""
    if not settings.iceberg:
        raise ConfigError("serve: the Iceberg REST catalog needs the archive's Iceberg tables: "
                          "set ARCHIVER_ICEBERG=true")  # fmt: skip
    try:
        return check(settings, bind)
    except ConfigError as exc:
        named = "--iceberg-rest (ARCHIVER_SERVE_ICEBERG_REST):"
        raise ConfigError(str(exc).replace("--bind:", named)) from None


async def run_rest(listen: Any, settings: Settings, signin: SignIn, mirror: Mirror,
                   audit: ReadAudit, stop: Any) -> None:  # fmt: skip
    """The REST catalog served by uvicorn where `listen` says (TLS as serve's), until
    `stop`; serve's own signal handlers stay (uvicorn's are not installed)."""
    import asyncio

    import uvicorn

    class Quiet(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    rest = await asyncio.to_thread(RestCatalog, settings, signin, mirror, audit)
    config = uvicorn.Config(
        rest.app, host=listen.host, port=listen.port, log_config=None, access_log=False,
        ssl_certfile=settings.serve_tls_cert if listen.tls else None,
        ssl_keyfile=settings.serve_tls_key if listen.tls else None,
        timeout_graceful_shutdown=5, lifespan="off",
    )  # fmt: skip
    server = Quiet(config)
    task = asyncio.ensure_future(server.serve())
    waiting = asyncio.ensure_future(stop.wait())
    try:
        while not (server.started or task.done() or stop.is_set()):
            await asyncio.sleep(0.05)
        if server.started:
            log.info("serve: the Iceberg REST catalog listening on %s:%d (%s)", listen.host,
                     listen.port, "TLS required" if listen.tls else "no TLS")  # fmt: skip
        done, _ = await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()  # it could not listen: say why
            return
        log.info("serve: the Iceberg REST catalog stopping")
        server.should_exit = True
        await task
    finally:
        waiting.cancel()
        await asyncio.to_thread(rest.close)
