"""One client connection after it authenticated: the simple and extended query
protocols, transactions (read-only, no state but their status and cursors), cursors
(DECLARE / FETCH / CLOSE, and the extended protocol's portals), the session's settings
(SET / SHOW / RESET, DISCARD), and each statement answered where it belongs: a SELECT of
the archive by DuckDB (archiver.serve.selects, in the server's threads), one that reads
only PostgreSQL's catalogs by PostgreSQL (archiver.serve.upstream). Every error is an
ErrorResponse with a SQLSTATE and one line, after which the connection stays usable (a
protocol error closes it: archiver.serve.server)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import struct
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from archiver.errors import ArchiverError, InputError, StorageError, first_line, redact
from archiver.ident import quote_ident
from archiver.serve import binary, statements, text, types, wire
from archiver.serve.audit import ON_BEHALF, Read, ReadAudit
from archiver.serve.columns import Origin
from archiver.serve.privileges import Mirror
from archiver.serve.registry import Registry
from archiver.serve.selects import Result, ServedArchive
from archiver.serve.settings import Reported, SessionSettings
from archiver.serve.statements import REPORTED, SETTINGS, Kind, Statement
from archiver.serve.types import Column
from archiver.serve.upstream import Answer, PersonUpstream, Upstream
from archiver.serve.wire import SqlError

log = logging.getLogger(__name__)

_TYPE_NAMES = [*types.TYPES, *types.ALIASES]
_ROWS_KINDS = (Kind.SELECT, Kind.CATALOG, Kind.FETCH, Kind.SHOW)
_ENCODINGS = {"utf8": "UTF8", "utf-8": "UTF8", "unicode": "UTF8", "sql_ascii": "SQL_ASCII"}


@dataclass
class Prepared:
    """A parsed statement (the extended protocol's Parse)."""

    statement: Statement
    param_oids: list[int]


@dataclass
class Portal:
    """A bound statement, or a cursor: run when first described or executed; its rows
    taken a batch at a time."""

    statement: Statement
    params: list[Any]  # as DuckDB is given them
    formats: list[int]  # of the result columns, as Bind asked
    raw: list[bytes | None] = field(default_factory=list)  # as sent, for PostgreSQL
    param_formats: list[int] = field(default_factory=list)
    param_oids: list[int] = field(default_factory=list)
    result: Result | None = None
    columns: list[Column] = field(default_factory=list)
    rows: Iterator[list[bytes | None]] | None = None
    formatted: bool = False  # the rows are in the formats asked already (PostgreSQL's)
    sent: int = 0
    done: bool = False
    hold: bool = False  # a cursor WITH HOLD: it outlives its transaction
    audited: bool = True  # a read of the archive it runs is recorded (not a Describe's probe)
    read: Read | None = None  # the read it runs, recorded when it ends
    finish: Callable[[Read, str], None] | None = None

    def format_of(self, i: int) -> int:
        if not self.formats:
            return 0
        if len(self.formats) not in (1, len(self.columns)):
            raise SqlError(
                "08P01",
                f"bind message has {len(self.formats)} result formats but query has "
                f"{len(self.columns)} columns",
            )
        return self.formats[0] if len(self.formats) == 1 else self.formats[i]

    def close(self) -> None:
        if self.result is not None:
            self.result.close()
            self.result = None
        if self.read is not None and self.finish is not None:
            self.finish(self.read, "ok")  # closed before its last row: what it sent


class Session:
    """The protocol state of one connection. What it answers is kept until `flush`
    writes it to the client in one piece (as PostgreSQL's backend does: at
    ReadyForQuery, at a Flush, before it waits for a slow reader), `write` the stream's,
    `drain` waiting until the client has taken it."""

    def __init__(
        self,
        archive: ServedArchive,
        upstream: Upstream,
        executor: Executor,
        write: Callable[[bytes], None],
        drain: Callable[[], Awaitable[None]],
        *,
        user: str,
        statement_timeout: float,
        audit: ReadAudit,
        address: str | None = None,
        mirror: Mirror | None = None,
    ) -> None:
        self.archive = archive
        self.upstream = upstream  # a person's own (PersonUpstream), or the shared one
        self.mirror = mirror  # for a person: each read checked as them first
        self.audit = audit
        self.address = address
        self.executor = executor
        self._write = write
        self._drain = drain
        self._out: list[bytes] = []
        self.send = self._out.append
        self.user = user
        values = dict(
            SETTINGS,
            session_authorization=user,
            server_version=archive.definitions.reported_version(),
            server_version_num=archive.definitions.version_num,
            transaction_isolation="repeatable read",
            default_transaction_isolation="read committed",
        )
        self.settings = SessionSettings(values, archive.definitions.money)
        self.statement_timeout = statement_timeout
        self.status = b"I"  # I idle, T in a transaction, E in a failed one
        self.prepared: dict[str, Prepared] = {}
        self.portals: dict[str, Portal] = {}
        self.cursors: dict[str, Portal] = {}
        self.skipping = False  # after an error in the extended protocol, until Sync
        self._running: list[Any] = []  # what the statement running now runs on (to cancel)

    def flush(self) -> None:
        """What was answered so far, written to the client in one piece."""
        if self._out:
            data = b"".join(self._out)
            self._out.clear()
            self._write(data)

    def pending(self) -> int:
        return len(self._out)

    async def drain(self) -> None:
        """Flushed, and waited for while the client reads it (a slow reader holds the
        result back, not memory)."""
        self.flush()
        await self._drain()

    @property
    def registry(self) -> Registry:
        return self.archive.definitions.registry

    async def start(self, parameters: dict[str, str]) -> None:
        """The start-up packet's settings (`options` too: `-c name=value`), each as SET
        takes it: what a RESET returns to."""
        wanted = {
            k.lower(): v
            for k, v in parameters.items()
            if k not in ("user", "database", "options", "replication")
        }
        for option in _options(parameters.get("options", "")):
            name, _, value = option.partition("=")
            if not name:  # as PostgreSQL refuses it
                raise SqlError(
                    "22023", f"invalid command-line argument for server process: {option}"
                )
            wanted[name.replace("-", "_").lower()] = value
        for name, value in wanted.items():
            if name in statements.READ_ONLY_SETTINGS:
                continue
            quoted = "'" + value.replace("'", "''") + "'"
            await self._set(
                Statement(Kind.SET, f"SET {quote_ident(name)} TO {quoted}", name=name, value=value),
                report=False,
            )
        self.settings.started()

    # -- the two protocols --------------------------------------------------------

    async def simple(self, text: str) -> None:
        """A Query message: each statement in order, up to the first error."""
        for part in statements.split(text):
            statement = self._classify(part)
            try:
                if statement.kind == Kind.EMPTY:
                    self.send(wire.EMPTY_QUERY)
                    continue
                portal = Portal(statement, [], [])
                try:
                    await self._start(portal)
                    if portal.result is not None or portal.statement.kind in _ROWS_KINDS:
                        self._describe_rows(portal)
                    await self._send_rows(portal, 0)
                finally:
                    portal.close()
            except SqlError as exc:
                self._fail(exc)
                break
        self.send(wire.ready(self.status))

    async def extended(self, message: wire.Message) -> bool:
        """One extended-protocol message; False when the client asked to end."""
        kind = message.kind
        if kind == b"S":  # Sync
            self.skipping = False
            if self.status == b"I":
                self._close_portals()
            self.send(wire.ready(self.status))
            return True
        if kind == b"H":  # Flush
            return True
        if self.skipping:
            return True
        try:
            read = wire.Reader(message.body)
            if kind == b"P":
                self._parse(read)
            elif kind == b"B":
                self._bind(read)
            elif kind == b"D":
                await self._describe(read)
            elif kind == b"E":
                await self._execute(read)
            elif kind == b"C":
                self._close(read)
            else:
                raise wire.ProtocolError(f"unexpected message type {kind!r}")
        except SqlError as exc:
            self._fail(exc)
            self.skipping = True
        return True

    def _classify(self, part: str) -> Statement:
        return statements.classify(part, self.archive.definitions.catalogs)

    def _fail(self, exc: SqlError) -> None:
        if self.status == b"T":
            self.status = b"E"
        self.send(
            wire.error(
                exc.sqlstate,
                redact(str(exc)),
                detail=exc.detail,
                hint=exc.hint,
                position=exc.position,
            )
        )

    # -- extended protocol messages ----------------------------------------------

    def _parse(self, read: wire.Reader) -> None:
        name, text = read.string(), read.string()
        oids = [read.int32() for _ in range(read.int16())]
        read.end()
        if name and name in self.prepared:
            raise SqlError("42P05", f'prepared statement "{name}" already exists')
        if len(statements.split(text)) > 1:
            raise SqlError("42601", "cannot insert multiple commands into a prepared statement")
        self.prepared[name] = Prepared(self._classify(text), oids)
        self.send(wire.PARSE_COMPLETE)

    def _bind(self, read: wire.Reader) -> None:
        portal_name, name = read.string(), read.string()
        param_formats = [read.int16() for _ in range(read.int16())]
        count = read.int16()
        raw: list[bytes | None] = []
        for _ in range(count):
            size = read.int32()
            raw.append(None if size == -1 else read.take(size))
        formats = [read.int16() for _ in range(read.int16())]
        read.end()
        if len(param_formats) not in (0, 1, count):
            raise SqlError(
                "08P01",
                f"bind message has {len(param_formats)} parameter formats but {count} parameters",
            )
        prepared = self.prepared.get(name)
        if prepared is None:
            raise SqlError("26000", f'prepared statement "{name}" does not exist')
        params = []
        if prepared.statement.kind != Kind.CATALOG:  # PostgreSQL reads them as sent
            oids = self._param_oids(prepared, count)
            for i, data in enumerate(raw):
                fmt = (
                    param_formats[0]
                    if len(param_formats) == 1
                    else (param_formats[i] if param_formats else 0)
                )
                try:
                    params.append(binary.parameter(oids[i], data, fmt == 1))
                except (binary.Unsupported, ValueError, UnicodeDecodeError, struct.error) as exc:
                    raise SqlError("22P02", f"parameter ${i + 1}: {exc}") from None
        if portal_name in self.portals:
            if portal_name:
                raise SqlError("42P03", f'portal "{portal_name}" already exists')
            self.portals.pop(portal_name).close()
        formats_of_params = [param_formats[0]] * count if len(param_formats) == 1 else param_formats
        oids = (prepared.param_oids + [0] * count)[:count]
        self.portals[portal_name] = Portal(
            prepared.statement, params, formats, raw, formats_of_params, oids
        )
        self.send(wire.BIND_COMPLETE)

    def _param_oids(self, prepared: Prepared, count: int) -> list[int]:
        """Each parameter's type: as Parse gave it, else as the statement casts it, else
        text."""
        cast = statements.parameter_types(prepared.statement.text, _TYPE_NAMES)
        oids = []
        for i in range(max(count, len(prepared.param_oids), max(cast, default=0))):
            given = prepared.param_oids[i] if i < len(prepared.param_oids) else 0
            oids.append(given or types.oid_of(cast.get(i + 1, "text")) or types.TEXT.oid)
        return oids

    async def _describe(self, read: wire.Reader) -> None:
        what, name = read.byte(), read.string()
        read.end()
        if what == b"S":
            prepared = self.prepared.get(name)
            if prepared is None:
                raise SqlError("26000", f'prepared statement "{name}" does not exist')
            statement = prepared.statement
            if statement.kind == Kind.CATALOG:
                oids, fields = await self._upstream(
                    self.upstream.describe,
                    statement.text,
                    prepared.param_oids,
                    dict(self.settings.changed),
                )
                self.send(wire.parameter_description(oids))
                columns = [_column(f) for f in fields]
                self.send(
                    wire.row_description(columns, [0] * len(columns)) if fields else wire.NO_DATA
                )
                return
            oids = self._param_oids(prepared, 0)
            self.send(wire.parameter_description(oids))
            if statement.kind not in _ROWS_KINDS:
                self._check(statement)
                self.send(wire.NO_DATA)
                return
            probe = Portal(_described_only(statement), [None] * len(oids), [], audited=False)
            try:
                await self._start(probe)
                self.send(wire.row_description(probe.columns, [0] * len(probe.columns)))
            finally:
                probe.close()
            return
        if what != b"P":
            raise wire.ProtocolError(f"Describe of {what!r}")
        portal = self.portals.get(name) or self.cursors.get(name)  # a cursor is a portal too
        if portal is None:
            raise SqlError("34000", f'portal "{name}" does not exist')
        await self._start(portal)
        if portal.columns or portal.statement.kind in _ROWS_KINDS:
            self._describe_rows(portal)
        else:
            self.send(wire.NO_DATA)

    async def _execute(self, read: wire.Reader) -> None:
        name, limit = read.string(), read.int32()
        read.end()
        portal = self.portals.get(name)
        if portal is None:
            raise SqlError("34000", f'portal "{name}" does not exist')
        await self._start(portal)
        await self._send_rows(portal, max(limit, 0))

    def _close(self, read: wire.Reader) -> None:
        what, name = read.byte(), read.string()
        read.end()
        if what == b"S":
            self.prepared.pop(name, None)
        elif what == b"P":
            portal = self.portals.pop(name, None)
            if portal is not None:
                portal.close()
        else:
            raise wire.ProtocolError(f"Close of {what!r}")
        self.send(wire.CLOSE_COMPLETE)

    # -- running a statement -----------------------------------------------------

    def _check(self, statement: Statement) -> None:
        """Refuse what serve never runs, before anything runs."""
        if statement.kind == Kind.REFUSED:
            raise SqlError(statement.sqlstate, statement.value)
        if statement.kind == Kind.MIXED:
            raise SqlError(
                "0A000",
                "a statement of archiver serve reads the archive or PostgreSQL's catalogs, "
                "not both: ask each in a statement of its own",
            )

    async def _start(self, portal: Portal) -> None:
        """Run the portal's statement once (a SELECT on the archive or on the catalogs,
        or serve's own answer), leaving its rows to be sent."""
        if portal.rows is not None or portal.done:
            return
        statement = portal.statement
        if self.status == b"E" and statement.kind not in (
            Kind.COMMIT,
            Kind.ROLLBACK,
            Kind.ROLLBACK_TO,
        ):
            raise SqlError(
                "25P02",
                "current transaction is aborted, commands ignored until end of transaction block",
            )
        kind = statement.kind
        self._check(statement)
        if kind == Kind.SELECT:
            read = self._begun(portal)
            try:
                self.audit.check()
                relations = await self._check_read(portal) if self.mirror is not None else None
                result = await self._run(statement, portal.params)
            except SqlError as exc:
                if read is not None:
                    read.tables = self.archive.tables_named(statement.text)
                    self.audit.finish(read, exc.sqlstate)
                raise
            result.columns = self._originated(statement, result.columns)
            portal.result, portal.columns = result, result.columns
            portal.rows = self._rows(result)
            if read is not None:
                read.tables = (
                    sorted(f"{s}.{t}" for s, t in relations) if relations else result.tables
                )
                read.columns = result.read
                portal.read, portal.finish = read, self.audit.finish
                portal.rows = self._counted(read, portal.rows)
            return
        if kind == Kind.CATALOG:
            answer = await self._upstream(
                self.upstream.run,
                statement.text,
                portal.raw,
                portal.param_oids,
                portal.param_formats,
                portal.formats,
                dict(self.settings.changed),
            )
            self._answered(portal, answer)
            return
        if kind == Kind.FETCH:
            cursor = self.cursors.get(statement.name)
            if cursor is None:
                raise SqlError("34000", f'cursor "{statement.name}" does not exist')
            portal.columns, portal.formatted = cursor.columns, cursor.formatted
            portal.rows = self._take(cursor, statement.count)
            return
        if kind == Kind.SHOW:
            await self._show(portal, statement.name)
            return
        if kind == Kind.SET:
            await self._set(statement)
        elif kind == Kind.RESET:
            self._report(self.settings.reset(statement.name))
        elif kind == Kind.DECLARE:
            await self._declare(portal, statement)
        else:
            self._session_statement(statement)
        portal.done = True

    def _begun(self, portal: Portal) -> Read | None:
        """The audit's record of the read `portal` runs (None for a Describe's probe)."""
        if not portal.audited:
            return None
        application = self.settings.get("application_name") or None
        behalf = None
        if application is not None and application.startswith(ON_BEHALF):
            behalf = application[len(ON_BEHALF) :] or None
        shown = None
        if self.audit.parameters:
            shown = [None if p is None else str(p) for p in portal.params]
        return Read(self.user, behalf, self.address, application, portal.statement.text, shown)

    def _counted(
        self, read: Read, rows: Iterator[list[bytes | None]]
    ) -> Iterator[list[bytes | None]]:
        """`rows`, counted into `read`, which is recorded as they end (or fail)."""
        read.rows = 0
        try:
            for row in rows:
                read.rows += 1
                yield row
        except SqlError as exc:
            self.audit.finish(read, exc.sqlstate)
            raise
        except Exception as exc:
            self.audit.finish(read, _duckdb_state(exc))
            raise
        self.audit.finish(read, "ok")

    async def _check_read(self, portal: Portal) -> set[tuple[str, str]]:
        """PostgreSQL's check of a read of the archive, in the person's own session:
        the (schema, table) it reads."""
        assert isinstance(self.upstream, PersonUpstream) and self.mirror is not None
        passed = self.upstream.passed(
            portal.statement.text, portal.param_oids, self.settings.changed
        )
        if passed is not None:
            return passed
        count = max(len(portal.raw), len(portal.params))
        read: set[tuple[str, str]] = await self._upstream(
            self.upstream.check_read,
            portal.statement.text,
            portal.raw or [None] * count,
            portal.param_oids,
            portal.param_formats if portal.raw else [],
            dict(self.settings.changed),
            self.mirror.row_security,
        )
        return read

    def _originated(self, statement: Statement, columns: list[Column]) -> list[Column]:
        """The columns, each that plainly is a served table's column said to be it (its
        relation OID and number in the definitions database), as PostgreSQL says it: what
        pgjdbc's ResultSetMetaData reads nullability and names from."""
        origins = statement.origins
        if not origins:
            return columns
        definitions = self.archive.definitions
        if len(origins) == 1 and origins[0] is not None and origins[0][2] is None:
            schema, name, _ = origins[0]
            named: list[Origin | None] = [(schema, name, c.name) for c in columns]
        elif len(origins) == len(columns):
            named = list(origins)
        else:
            return columns
        out = []
        for column, origin in zip(columns, named, strict=True):
            if origin is None or origin[2] is None:
                out.append(column)
                continue
            table, attnum = definitions.origin(origin[0], origin[1], origin[2])
            out.append(dataclasses.replace(column, table=table, attnum=attnum))
        return out

    async def _show(self, portal: Portal, name: str) -> None:
        if name == "all":
            answer = await self._upstream(
                self.upstream.run, "SHOW ALL", [], [], [], [], dict(self.settings.changed)
            )
            for row in answer.rows:  # serve's own settings as serve keeps them
                mine = self.settings.get((row[0] or b"").decode().lower())
                if mine is not None:
                    row[1] = mine.encode()
            self._answered(portal, answer)
            return
        key = "timezone" if name == "time zone" else name
        value = self.settings.get(key)
        if value is not None:
            portal.columns = [Column(REPORTED.get(key, key), 25, -1, "text")]
            rows: list[list[bytes | None]] = [[value.encode()]]
            portal.rows = iter(rows)
            return
        column, value = await self._upstream(self.upstream.show, key, dict(self.settings.changed))
        portal.columns = [Column(column, 25, -1, "text")]
        portal.rows = iter([[value.encode()]])

    async def _set(self, statement: Statement, report: bool = True) -> None:
        """SET: checked and spelled by PostgreSQL; serve's own settings applied to what it
        writes; reported to the client where PostgreSQL reports it."""
        name = statement.name
        if (
            not name
        ):  # SET TRANSACTION …, SET SESSION CHARACTERISTICS …: one snapshot per statement here
            return
        if name in statements.READ_ONLY_SETTINGS:
            raise SqlError("55P02", f'parameter "{name}" cannot be changed')
        if name == "client_encoding":
            encoding = _ENCODINGS.get(statement.value.strip("'\" ").lower())
            if encoding is None:
                raise SqlError(
                    "0A000",
                    f"archiver serve speaks UTF8 (or SQL_ASCII): client_encoding {statement.value!r} refused",
                )
            self._changed(name, encoding, statement.local, report)
            return
        try:
            value = await self._upstream(
                self.upstream.setting, statement.text, name, dict(self.settings.changed)
            )
        except SqlError as exc:
            if exc.sqlstate == "42704" and name in self.archive.engine_settings:
                raise SqlError(
                    "42501",
                    f'SET of "{name}" refused: archiver serve keeps PostgreSQL\'s session '
                    "settings only, and nobody changes its engine's",
                ) from None
            raise
        self._changed(name, value, statement.local, report)

    def _changed(self, name: str, value: str, local: bool, report: bool) -> None:
        in_transaction = self.status != b"I"
        reported = self.settings.set(name, value, local=local, in_transaction=in_transaction)
        if report:
            self._report(reported)

    def _report(self, reported: Reported) -> None:
        for name, value in reported.items():
            self.send(wire.parameter_status(name, value))

    def _end_transaction(self) -> None:
        """COMMIT or ROLLBACK: the cursors that do not outlive it closed, SET LOCAL undone."""
        self.status = b"I"
        self._close_cursors(held_too=False)
        self._report(self.settings.end_transaction())

    async def _declare(self, portal: Portal, statement: Statement) -> None:
        if statement.name in self.cursors:
            raise SqlError("42P03", f'cursor "{statement.name}" already exists')
        if self.status == b"I" and not statement.hold:
            raise SqlError("25P01", "DECLARE CURSOR can only be used in transaction blocks")
        query = self._classify(statement.value)
        self._check(query)
        if query.kind not in (Kind.SELECT, Kind.CATALOG):
            raise SqlError("42601", "DECLARE CURSOR must be FOR a SELECT")
        cursor = Portal(
            query,
            portal.params,
            [],
            portal.raw,
            portal.param_formats,
            portal.param_oids,
            hold=statement.hold,
        )
        await self._start(cursor)
        self.cursors[statement.name] = cursor

    def _answered(self, portal: Portal, answer: Answer) -> None:
        portal.columns = [_column(f) for f in answer.fields]
        portal.rows = iter(answer.rows)
        portal.formatted = True

    def _session_statement(self, statement: Statement) -> None:
        kind = statement.kind
        if kind == Kind.BEGIN:
            self.status = b"T"
        elif kind in (Kind.COMMIT, Kind.ROLLBACK):
            self._end_transaction()
        elif kind == Kind.ROLLBACK_TO:
            self.status = b"T" if self.status != b"I" else b"I"
        elif kind == Kind.DISCARD:
            if statement.name == "ALL":
                if self.status != b"I":
                    raise SqlError("25001", "DISCARD ALL cannot run inside a transaction block")
                self._close_cursors()
                self.prepared.clear()
                self._report(self.settings.reset("all"))
        elif kind == Kind.DEALLOCATE:
            if statement.name:
                if self.prepared.pop(statement.name, None) is None:
                    raise SqlError("26000", f'prepared statement "{statement.name}" does not exist')
            else:
                self.prepared.clear()
        elif kind == Kind.CLOSE:
            if statement.name:
                cursor = self.cursors.pop(statement.name, None)
                if cursor is None:
                    raise SqlError("34000", f'cursor "{statement.name}" does not exist')
                cursor.close()
            else:
                self._close_cursors()

    async def _upstream(self, call: Callable[..., Any], *args: Any) -> Any:
        """A call of the definitions database's, in a thread, its errors PostgreSQL's."""
        loop = asyncio.get_running_loop()
        running: list[Any] = []
        self._running = running
        future = loop.run_in_executor(self.executor, lambda: call(*args, started=running.append))
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.statement_timeout or None)
        except TimeoutError:
            self.cancel()
            with contextlib.suppress(Exception):
                await future
            raise SqlError(
                "57014",
                f"canceling statement due to statement timeout ({self.statement_timeout:g} s)",
            ) from None
        except asyncio.CancelledError:
            self.cancel()
            raise

    async def _run(self, statement: Statement, params: list[Any]) -> Result:
        """A SELECT on the archive, in a thread, interrupted at the statement timeout."""
        loop = asyncio.get_running_loop()
        cursors: list[Any] = []
        self._running = cursors
        future = loop.run_in_executor(
            self.executor, self._blocking_run, statement, params, cursors.append
        )
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.statement_timeout or None)
        except asyncio.CancelledError:  # serve is stopping: the statement ends too
            self.cancel()
            future.add_done_callback(_close_result)
            raise
        except TimeoutError:
            self.cancel()
            with contextlib.suppress(Exception):
                (await future).close()
            raise SqlError(
                "57014",
                f"canceling statement due to statement timeout ({self.statement_timeout:g} s)",
            ) from None

    def _blocking_run(
        self, statement: Statement, params: list[Any], started: Callable[[Any], None]
    ) -> Result:
        try:
            return self.archive.run(statement.text, params, started, statement.names)
        except InputError as exc:
            raise _sql_error(str(exc)) from None
        except StorageError as exc:
            raise SqlError("58030", str(exc)) from None
        except ArchiverError as exc:
            raise SqlError("XX000", str(exc)) from None
        except Exception as exc:  # DuckDB's own error for the statement
            raise SqlError(_duckdb_state(exc), first_line(exc)) from None

    def _rows(self, result: Result) -> Iterator[list[bytes | None]]:
        """The result's rows as each column's PostgreSQL text, a batch at a time."""
        style, registry = self.settings.style, self.registry
        zoned = style.zone.name != "UTC"
        for batch in result.batches():
            columns = []
            for column, i in zip(result.columns, result.shown, strict=True):
                companion = result.companion_of.get(i)
                values = text.text_values(
                    batch.column(i),
                    column,
                    None if companion is None else batch.column(companion),
                    style,
                )
                if zoned and column.zoned:  # a type of its own, archived as its text in UTC
                    values = [
                        None
                        if v is None
                        else registry.rezone(column.oid, v.decode(), style.zone).encode()
                        for v in values
                    ]
                columns.append(values)
            if not columns:
                yield from ([] for _ in range(batch.num_rows))
                continue
            yield from (list(row) for row in zip(*columns, strict=True))

    def _take(self, cursor: Portal, count: int | None) -> Iterator[list[bytes | None]]:
        """FETCH: up to `count` rows of `cursor` (None: all)."""
        assert cursor.rows is not None
        n = 0
        while count is None or n < count:
            row = next(cursor.rows, None)
            if row is None:
                return
            n += 1
            yield row

    def _describe_rows(self, portal: Portal) -> None:
        formats = [portal.format_of(i) for i in range(len(portal.columns))]
        self.send(wire.row_description(portal.columns, formats))

    async def _send_rows(self, portal: Portal, limit: int) -> None:
        """Up to `limit` rows (0: all), then PortalSuspended or the command's tag."""
        if portal.rows is None:
            self.send(wire.command_complete(portal.statement.tag or "SELECT 0"))
            return
        loop = asyncio.get_running_loop()
        rows = portal.rows

        def chunk() -> list[list[bytes | None]]:
            out: list[list[bytes | None]] = []
            while len(out) < 1000 and (not limit or portal.sent + len(out) < limit):
                row = next(rows, None)
                if row is None:
                    break
                out.append(row)
            return out

        while True:
            try:
                batch = await asyncio.wait_for(
                    loop.run_in_executor(self.executor, chunk), self.statement_timeout or None
                )
            except SqlError:
                raise
            except TimeoutError:
                if portal.result is not None:
                    portal.result.interrupt()
                raise SqlError("57014", "canceling statement due to statement timeout") from None
            except Exception as exc:
                raise SqlError(_duckdb_state(exc), first_line(exc)) from None
            for row in batch:
                self.send(wire.data_row(self._formatted(portal, row)))
            await self.drain()  # a slow reader holds the result back, not memory
            portal.sent += len(batch)
            if limit and portal.sent >= limit:
                self.send(wire.PORTAL_SUSPENDED)
                portal.sent = 0
                return
            if len(batch) < 1000:
                break
        kind = portal.statement.kind
        tag = {Kind.FETCH: "FETCH", Kind.SHOW: "SHOW"}.get(kind, "SELECT")
        total = portal.sent
        self.send(wire.command_complete(f"{tag} {total}" if kind != Kind.SHOW else "SHOW"))
        portal.rows = iter(())
        portal.done = True

    def _formatted(self, portal: Portal, row: list[bytes | None]) -> list[bytes | None]:
        if portal.formatted or not portal.formats or not any(portal.formats):
            return row
        out = []
        for i, value in enumerate(row):
            if value is None or portal.format_of(i) == 0:
                out.append(value)
                continue
            column = portal.columns[i]
            try:
                out.append(self.registry.column_binary(column.kind, column.oid, value.decode()))
            except (binary.Unsupported, ValueError, KeyError, IndexError) as exc:
                raise SqlError(
                    "0A000",
                    f"column {column.name!r}: no binary form of {value[:40]!r} ({exc}); ask for it in text format",
                ) from None
        return out

    # -- housekeeping ---------------------------------------------------------------

    def _close_portals(self) -> None:
        for portal in self.portals.values():
            portal.close()
        self.portals.clear()

    def _close_cursors(self, held_too: bool = True) -> None:
        """The cursors, closed (at a transaction's end: those not WITH HOLD)."""
        for name, cursor in list(self.cursors.items()):
            if held_too or not cursor.hold:
                cursor.close()
                del self.cursors[name]

    def cancel(self) -> None:
        """A cancel request: the statement running now is interrupted."""
        for cursor in self._running:
            with contextlib.suppress(Exception):  # closed meanwhile: nothing to interrupt
                cursor.interrupt()

    def close(self) -> None:
        """Everything the connection holds, released (the client went away)."""
        self._close_portals()
        self._close_cursors()
        if isinstance(self.upstream, PersonUpstream):
            self.upstream.close()


def _column(f: Any) -> Column:
    """A column of PostgreSQL's answer, as RowDescription tells it."""
    return Column(f.name, f.oid, f.size, "", typmod=f.typmod, table=f.table, attnum=f.attnum)


def _options(text: str) -> list[str]:
    """The `-c name=value` (or `--name=value`) settings of a start-up `options`."""
    words = text.replace("\\ ", "\0").split()
    out = []
    for i, word in enumerate(words):
        word = word.replace("\0", " ")
        if word == "-c" and i + 1 < len(words):
            continue
        if i and words[i - 1] == "-c":
            out.append(word)
        elif (word.startswith("--") and "=" in word) or (word.startswith("-c") and "=" in word):
            out.append(word[2:])
    return out


def _close_result(future: asyncio.Future[Result]) -> None:
    """The result of a statement nobody waits for any more, released when it arrives."""
    if not future.cancelled() and future.exception() is None:
        with contextlib.suppress(Exception):
            future.result().close()


_REFUSED_WRITES = (
    "INSERT",
    "UPDATE",
    "DELETE",
    "MERGE",
    "CREATE",
    "DROP",
    "ALTER",
    "TRUNCATE",
    "COPY",
    "GRANT",
    "REVOKE",
    "VACUUM",
    "ANALYZE",
    "EXPORT",
    "IMPORT",
    "COMMENT",
    "CHECKPOINT",
    "CALL",
    "UPSERT",
    "REPLACE",
)


def _sql_error(message: str) -> SqlError:
    """archiver query's refusal as PostgreSQL says it: a write is 25006 (read-only
    transaction), anything else serve does not run 42501 (insufficient privilege)."""
    text = message.removeprefix("query: ")
    text = text.replace(
        "archiver query only reads (one SELECT); nothing ran",
        "archiver serve only reads (one SELECT)",
    )
    word = text.split(" ", 1)[0].upper()
    if "refused" in text and word in _REFUSED_WRITES:
        return SqlError("25006", f"cannot execute {word} in a read-only transaction: {text}")
    if "refused" in text or "statements given" in text:
        return SqlError("42501", text)
    if text.startswith("Parser Error") or "syntax error" in text:
        return SqlError("42601", text)
    return SqlError("42000", text)


def _duckdb_state(exc: Exception) -> str:
    """The SQLSTATE closest to a DuckDB error's kind."""
    name = type(exc).__name__
    if "configuration parameter" in str(exc):
        return "42704"  # undefined_object, as PostgreSQL says of an unknown setting
    return {
        "CatalogException": "42P01",
        "BinderException": "42703",
        "ParserException": "42601",
        "ConversionException": "22P02",
        "InvalidInputException": "22023",
        "OutOfRangeException": "22003",
        "OutOfMemoryException": "53200",
        "InterruptException": "57014",
        "PermissionException": "42501",
        "IOException": "58030",
        "NotImplementedException": "0A000",
    }.get(name, "XX000")


def _described_only(statement: Statement) -> Statement:
    """A SELECT whose result's columns are wanted, not its rows (a Describe of a
    prepared statement): run with no row to read."""
    if statement.kind != Kind.SELECT:
        return statement
    described = f"SELECT * FROM ({statement.text}) AS described LIMIT 0"
    return Statement(Kind.SELECT, described, names=statement.names)
