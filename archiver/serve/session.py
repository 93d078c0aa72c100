"""One client connection after it authenticated: the simple and extended query
protocols, transactions (read-only, no state but their status and cursors), cursors
(DECLARE / FETCH / CLOSE, and the extended protocol's portals), SET / SHOW, and the
answers to everything else. SELECTs run on archiver.serve.archive in the server's
threads; every error is an ErrorResponse with a SQLSTATE and one line, after which the
connection stays usable (a protocol error closes it: archiver.serve.server)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import struct
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from archiver.errors import ArchiverError, InputError, StorageError, first_line, redact
from archiver.serve import binary, statements, text, types, wire
from archiver.serve.archive import Result, ServedArchive
from archiver.serve.statements import Statement
from archiver.serve.types import Column

log = logging.getLogger(__name__)

_TYPE_NAMES = [*types.TYPES, *types.ALIASES]


class SqlError(Exception):
    """An error the client is told of, with its SQLSTATE."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


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
    params: list[Any]
    formats: list[int]  # of the result columns, as Bind asked
    result: Result | None = None
    columns: list[Column] = field(default_factory=list)
    rows: Iterator[list[bytes | None]] | None = None
    sent: int = 0
    done: bool = False
    hold: bool = False  # a cursor WITH HOLD: it outlives its transaction

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


class Session:
    """The protocol state of one connection; `send` queues bytes for the client,
    `drain` waits until it has taken them."""

    def __init__(
        self,
        archive: ServedArchive,
        executor: Executor,
        send: Callable[[bytes], None],
        drain: Callable[[], Awaitable[None]],
        *,
        user: str,
        statement_timeout: float,
    ) -> None:
        self.archive = archive
        self.executor = executor
        self.send = send
        self.drain = drain  # waits while the client reads what was sent
        self.user = user
        self.settings = dict(statements.SETTINGS, session_authorization=user)
        self.statement_timeout = statement_timeout
        self.status = b"I"  # I idle, T in a transaction, E in a failed one
        self.prepared: dict[str, Prepared] = {}
        self.portals: dict[str, Portal] = {}
        self.cursors: dict[str, Portal] = {}
        self.skipping = False  # after an error in the extended protocol, until Sync
        self._running: list[Any] = []  # the DuckDB cursors of the statement running now

    # -- the two protocols --------------------------------------------------------

    async def simple(self, text: str) -> None:
        """A Query message: each statement in order, up to the first error."""
        for part in statements.split(text):
            statement = statements.classify(part)
            try:
                if statement.kind == "empty":
                    self.send(wire.EMPTY_QUERY)
                    continue
                portal = Portal(statement, [], [])
                try:
                    await self._start(portal)
                    if portal.result is not None or portal.statement.kind in ("fetch", "show"):
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

    def _fail(self, exc: SqlError) -> None:
        if self.status == b"T":
            self.status = b"E"
        self.send(wire.error(exc.sqlstate, redact(str(exc))))

    # -- extended protocol messages ----------------------------------------------

    def _parse(self, read: wire.Reader) -> None:
        name, text = read.string(), read.string()
        oids = [read.int32() for _ in range(read.int16())]
        read.end()
        if name and name in self.prepared:
            raise SqlError("42P05", f'prepared statement "{name}" already exists')
        statement = statements.classify(text)
        if len(statements.split(text)) > 1:
            raise SqlError("42601", "cannot insert multiple commands into a prepared statement")
        self.prepared[name] = Prepared(statement, oids)
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
        oids = self._param_oids(prepared, count)
        params = []
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
        self.portals[portal_name] = Portal(prepared.statement, params, formats)
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
            oids = self._param_oids(prepared, 0)
            self.send(wire.parameter_description(oids))
            if prepared.statement.kind not in ("select", "fetch", "show"):
                self.send(wire.NO_DATA)
                return
            probe = Portal(_described_only(prepared.statement), [None] * len(oids), [])
            try:
                await self._start(probe)
                self.send(
                    wire.row_description(
                        [(c.name, c.oid, c.size) for c in probe.columns], [0] * len(probe.columns)
                    )
                )
            finally:
                probe.close()
            return
        if what != b"P":
            raise wire.ProtocolError(f"Describe of {what!r}")
        portal = self.portals.get(name) or self.cursors.get(name)  # a cursor is a portal too
        if portal is None:
            raise SqlError("34000", f'portal "{name}" does not exist')
        await self._start(portal)
        if portal.columns or portal.statement.kind in ("select", "fetch", "show"):
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

    async def _start(self, portal: Portal) -> None:
        """Run the portal's statement once (a SELECT on the archive, or serve's own
        answer), leaving its rows to be sent."""
        if portal.rows is not None or portal.done:
            return
        statement = portal.statement
        if self.status == b"E" and statement.kind not in ("commit", "rollback", "rollback_to"):
            raise SqlError(
                "25P02",
                "current transaction is aborted, commands ignored until end of transaction block",
            )
        kind = statement.kind
        if kind == "select" and "typeinfo_tree" in statement.text and portal.params:
            oids = portal.params[0] if isinstance(portal.params[0], list) else []
            portal.columns = types.INTROSPECTION_COLUMNS
            portal.rows = iter(types.introspected(oids))
            return
        if kind == "select":
            result = await self._run(statement.text, portal.params)
            portal.result, portal.columns = result, result.columns
            portal.rows = self._rows(result)
            return
        if kind == "fetch":
            cursor = self.cursors.get(statement.name)
            if cursor is None:
                raise SqlError("34000", f'cursor "{statement.name}" does not exist')
            portal.columns = cursor.columns
            portal.rows = self._take(cursor, statement.count)
            return
        if kind == "show":
            key = statement.name
            rows: list[list[bytes | None]]
            if key == "all":
                rows = [[k.encode(), v.encode()] for k, v in sorted(self.settings.items())]
                portal.columns = [Column("name", 25, -1, "text"), Column("setting", 25, -1, "text")]
            elif key in self.settings:
                rows = [[self.settings[key].encode()]]
                portal.columns = [Column(key, 25, -1, "text")]
            else:
                raise SqlError("42704", f'unrecognized configuration parameter "{key}"')
            portal.rows = iter(rows)
            return
        self._session_statement(portal, statement)
        if kind == "declare":
            if statement.name in self.cursors:
                raise SqlError("42P03", f'cursor "{statement.name}" already exists')
            if self.status == b"I" and not re.search(r"\bWITH\s+HOLD\b", statement.text, re.I):
                raise SqlError("25P01", "DECLARE CURSOR can only be used in transaction blocks")
            result = await self._run(statement.value, portal.params)
            hold = bool(
                re.search(
                    r"\bWITH\s+HOLD\b", statement.text[: statement.text.upper().find(" FOR ")], re.I
                )
            )
            cursor = Portal(Statement("select", statement.value), portal.params, [], hold=hold)
            cursor.result, cursor.columns, cursor.rows = result, result.columns, self._rows(result)
            self.cursors[statement.name] = cursor
        portal.done = True

    def _session_statement(self, portal: Portal, statement: Statement) -> None:
        kind = statement.kind
        if kind == "begin":
            self.status = b"T"
        elif kind in ("commit", "rollback"):
            self.status = b"I"
            self._close_cursors(held_too=False)
        elif kind == "rollback_to":
            self.status = b"T" if self.status != b"I" else b"I"
        elif kind == "set":
            name = statement.name
            if name and name not in statements.SETTINGS:
                raise SqlError(
                    "42501",
                    f'SET of "{name}" refused: archiver serve keeps PostgreSQL\'s session '
                    "settings only, and nobody changes its engine's",
                )
            if name in statements.READ_ONLY_SETTINGS:
                raise SqlError("55P02", f'parameter "{name}" cannot be changed')
            if name:
                self.settings[name] = statement.value
        elif kind == "reset":
            if statement.name == "all":
                self.settings.update(statements.SETTINGS)
            elif statement.name in statements.SETTINGS:
                self.settings[statement.name] = statements.SETTINGS[statement.name]
        elif kind == "discard":
            self._close_cursors()
            self.prepared.clear()
        elif kind == "deallocate":
            if statement.name:
                self.prepared.pop(statement.name, None)
            else:
                self.prepared.clear()
        elif kind == "close":
            if statement.name:
                cursor = self.cursors.pop(statement.name, None)
                if cursor is None:
                    raise SqlError("34000", f'cursor "{statement.name}" does not exist')
                cursor.close()
            else:
                self._close_cursors()

    async def _run(self, sql: str, params: list[Any]) -> Result:
        """A SELECT on the archive, in a thread, interrupted at the statement timeout."""
        loop = asyncio.get_running_loop()
        cursors: list[Any] = []
        self._running = cursors
        future = loop.run_in_executor(
            self.executor, self._blocking_run, sql, params, cursors.append
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

    def _blocking_run(self, sql: str, params: list[Any], started: Callable[[Any], None]) -> Result:
        try:
            return self.archive.run(sql, params, started)
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
        for batch in result.batches():
            columns = []
            for column, i in zip(result.columns, result.shown, strict=True):
                companion = result.companion_of.get(i)
                columns.append(
                    text.text_values(
                        batch.column(i),
                        column,
                        None if companion is None else batch.column(companion),
                    )
                )
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
        self.send(wire.row_description([(c.name, c.oid, c.size) for c in portal.columns], formats))

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
        tag = {"fetch": "FETCH", "show": "SHOW"}.get(kind, "SELECT")
        total = portal.sent
        self.send(wire.command_complete(f"{tag} {total}" if kind != "show" else "SHOW"))
        portal.rows = iter(())
        portal.done = True

    def _formatted(self, portal: Portal, row: list[bytes | None]) -> list[bytes | None]:
        if not portal.formats or not any(portal.formats):
            return row
        out = []
        for i, value in enumerate(row):
            if value is None or portal.format_of(i) == 0:
                out.append(value)
                continue
            try:
                out.append(binary.binary_value(portal.columns[i], value))
            except (binary.Unsupported, ValueError) as exc:
                raise SqlError(
                    "0A000",
                    f"column {portal.columns[i].name!r}: {exc}; ask for it in text format",
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


def _close_result(future: asyncio.Future[Result]) -> None:
    """The result of a statement nobody waits for any more, released when it arrives."""
    if not future.cancelled() and future.exception() is None:
        with contextlib.suppress(Exception):
            future.result().close()


_REFUSED_WRITES = ("INSERT", "UPDATE", "DELETE", "MERGE", "CREATE", "DROP", "ALTER", "TRUNCATE",
                   "COPY", "GRANT", "REVOKE", "VACUUM", "ANALYZE", "EXPORT", "IMPORT", "COMMENT",
                   "CHECKPOINT", "CALL", "UPSERT", "REPLACE")  # fmt: skip


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
    if statement.kind != "select":
        return statement
    return Statement("select", f"SELECT * FROM ({statement.text}) AS described LIMIT 0")
