"""The statements that read only PostgreSQL's catalogs (or no table), answered by
PostgreSQL itself: the definitions database (archiver.serve.definitions), as its reader,
each statement in a read-only transaction of its own carrying the session's settings,
its parameters, types and result formats passed through as the client sent them and its
answer passed back as the server gave it: PostgreSQL's own answer, whatever the client
asks, the cluster's shared relations narrowed to serve's own (archiver.serve.narrowing)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from psycopg import pq
from psycopg.pq import DiagnosticField, ExecStatus
from psycopg.pq.abc import PGconn, PGresult

from archiver.ident import quote_ident
from archiver.serve.definitions import Definitions
from archiver.serve.narrowing import narrowed
from archiver.serve.privileges import (
    MIRROR_SECONDS,
    RowSecurity,
    check_row_security,
    plan_of,
    relations_read,
)
from archiver.serve.watchdog import WATCHDOG
from archiver.serve.wire import SqlError

# What a statement on the definitions database waits past its statement timeout before
# its session is taken for one on a dead flow (the server cancels it at the timeout).
ANSWER_MARGIN = 5.0


@dataclass(frozen=True)
class Field:
    """One column of RowDescription, as PostgreSQL describes it."""

    name: str
    table: int
    attnum: int
    oid: int
    size: int
    typmod: int


@dataclass
class Answer:
    fields: list[Field]
    rows: list[list[bytes | None]]
    tag: str
    formats: list[int]  # of each field, as sent


class Upstream:
    """Connections to the definitions database as its reader, shared by the sessions:
    each statement borrows one for its transaction."""

    def __init__(self, definitions: Definitions, size: int, statement_timeout: float) -> None:
        self.definitions = definitions
        self.size = size
        self.statement_timeout = statement_timeout
        self._idle: list[PGconn] = []
        self._open = 0
        self._ready = threading.Condition()
        self.version = (
            f"PostgreSQL {definitions.server_version.split()[0]} (archiver serve: the archive "
            "read by DuckDB, its catalogs by the definitions database)"
        )

    def close(self) -> None:
        with self._ready:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.finish()

    @contextmanager
    def _borrowed(self) -> Iterator[PGconn]:
        with self._ready:
            while not self._idle and self._open >= self.size:
                self._ready.wait()
            conn = self._idle.pop() if self._idle else None
            if conn is None:
                self._open += 1
        try:
            if conn is None:
                conn = pq.PGconn.connect(self.definitions.place.conninfo().encode())
                if conn.status != pq.ConnStatus.OK:
                    said: str | bytes = conn.get_error_message()
                    message = (
                        said.decode(errors="replace") if isinstance(said, bytes) else said
                    ).strip()
                    conn.finish()
                    conn = None
                    raise SqlError(
                        "08006", f"serve: the definitions database cannot be reached: {message}"
                    )
            yield conn
        finally:
            with self._ready:
                if (
                    conn is not None
                    and conn.status == pq.ConnStatus.OK
                    and conn.transaction_status == pq.TransactionStatus.IDLE
                ):
                    self._idle.append(conn)
                else:
                    self._open -= 1
                    if conn is not None:
                        conn.finish()
                self._ready.notify()

    @contextmanager
    def _transaction(
        self, settings: dict[str, str], started: Callable[[Any], None]
    ) -> Iterator[PGconn]:
        """A read-only transaction (one snapshot) carrying the session's settings, its
        waits bounded by the statement timeout and a margin (watchdog: a dead flow)."""
        bound = self.statement_timeout + ANSWER_MARGIN if self.statement_timeout else 0
        with (
            self._borrowed() as conn,
            WATCHDOG.watch(conn.socket, bound, "a statement on the definitions database"),
        ):
            started(_Cancel(conn))
            setup = ["BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"]
            timeout = f"{int(self.statement_timeout * 1000)}" if self.statement_timeout else "0"
            for name, value in {**settings, "statement_timeout": timeout}.items():
                setup.append(
                    f"SELECT pg_catalog.set_config({_literal(conn, name)}, {_literal(conn, value)}, true)"
                )
            _check(conn.exec_("; ".join(setup).encode()))
            try:
                yield conn
            finally:
                if conn.status == pq.ConnStatus.OK:
                    conn.exec_(b"ROLLBACK")

    def run(
        self,
        text: str,
        params: Sequence[bytes | None],
        param_oids: Sequence[int],
        param_formats: Sequence[int],
        result_formats: Sequence[int],
        settings: dict[str, str],
        started: Callable[[Any], None],
    ) -> Answer:
        """The answer to one statement (`text`, the client's), its parameters as sent."""
        self.definitions.refresh()
        sent = narrowed(text, self.version).encode()
        with self._transaction(settings, started) as conn, _positioned(sent != text.encode()):
            wanted = set(result_formats) or {0}
            results = {}
            for fmt in sorted(wanted):  # mixed formats: the statement twice, in one snapshot
                results[fmt] = _check(
                    conn.exec_params(
                        sent,
                        list(params),
                        list(param_oids) or None,
                        list(param_formats) or None,
                        fmt,
                    )
                )
            first = results[min(wanted)]
            fields = _fields(first)
            formats = _formats(result_formats, len(fields))
            rows = [
                [results[formats[c]].get_value(r, c) for c in range(len(fields))]
                for r in range(first.ntuples)
            ]
            tag = (first.command_status or b"").decode()
            return Answer(fields, rows, tag, formats)

    def describe(
        self,
        text: str,
        param_oids: Sequence[int],
        settings: dict[str, str],
        started: Callable[[Any], None],
    ) -> tuple[list[int], list[Field]]:
        """A statement's parameters' types and its result's columns, as PostgreSQL
        infers them."""
        self.definitions.refresh()
        with self._transaction(settings, started) as conn:
            _check(
                conn.prepare(b"", narrowed(text, self.version).encode(), list(param_oids) or None)
            )
            found = _check(conn.describe_prepared(b""))
            params = [found.param_type(i) for i in range(found.nparams)]
            fields = _fields(found)
            return params, fields

    def setting(
        self, statement: str, name: str, settings: dict[str, str], started: Callable[[Any], None]
    ) -> str:
        """What `statement` (a SET of `name`) sets it to, as PostgreSQL spells the
        value; PostgreSQL's error where it refuses it. Nothing is kept."""
        with self._transaction(settings, started) as conn:
            _check(conn.exec_(statement.encode()))
            res = _check(
                conn.exec_params(
                    b"SELECT pg_catalog.current_setting($1)", [name.encode()], None, None, 0
                )
            )
            value = res.get_value(0, 0)
            return "" if value is None else value.decode()

    def show(
        self, name: str, settings: dict[str, str], started: Callable[[Any], None]
    ) -> tuple[str, str]:
        """SHOW `name`: (the column's name, the value), as PostgreSQL answers it."""
        answer = self.run(f"SHOW {quote_ident(name)}", [], [], [], [], settings, started)
        value = answer.rows[0][0] if answer.rows else None
        return answer.fields[0].name, "" if value is None else value.decode()


class PersonUpstream(Upstream):
    """One person's own session on the definitions database (archiver.serve.signin): the
    catalog statements of their connection run there, as them, and so does the check of
    each statement that reads the archive."""

    def __init__(self, shared: Upstream, conn: PGconn) -> None:
        super().__init__(shared.definitions, 1, shared.statement_timeout)
        self._conn: PGconn | None = conn
        # a statement's verdict, kept as long as the grants it rests on may be stale
        # anyway (the mirror's pass): a prepared lookup is checked once a pass, not each run
        self._passed: dict[tuple[Any, ...], tuple[float, set[tuple[str, str]]]] = {}

    @contextmanager
    def _borrowed(self) -> Iterator[PGconn]:
        conn = self._conn
        if conn is None or conn.status != pq.ConnStatus.OK:
            raise SqlError(
                "08006", "serve: your session on the definitions database was lost: connect again"
            )
        yield conn

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.finish()

    def passed(
        self, text: str, param_oids: Sequence[int], settings: dict[str, str]
    ) -> set[tuple[str, str]] | None:
        """What `check_read` found of the statement within the mirror's pass, if it did:
        asked on the event loop, so that a statement checked already costs no thread."""
        passed = self._passed.get(_verdict_key(text, param_oids, settings))
        return passed[1] if passed is not None and passed[0] > time.monotonic() else None

    def check_read(
        self,
        text: str,
        params: Sequence[bytes | None],
        param_oids: Sequence[int],
        param_formats: Sequence[int],
        settings: dict[str, str],
        row_security: dict[tuple[str, str], RowSecurity],
        started: Callable[[Any], None],
    ) -> set[tuple[str, str]]:
        """PostgreSQL's check of a statement that reads the archive, as this person:
        `EXPLAIN` of it (PostgreSQL's 42501 where a table or a column it reads is not
        theirs), then the live tables' row security; the (schema, table) it reads."""
        key = _verdict_key(text, param_oids, settings)
        now = time.monotonic()
        passed = self._passed.get(key)
        if passed is not None and passed[0] > now:
            return passed[1]
        prefix = "EXPLAIN (VERBOSE, FORMAT JSON) "
        with self._transaction(settings, started) as conn:
            try:
                res = _check(conn.exec_params((prefix + text).encode(), list(params),
                                              list(param_oids) or None,
                                              list(param_formats) or None, 0))  # fmt: skip
            except SqlError as exc:
                if exc.position is not None and exc.position.isdigit():
                    exc.position = str(max(1, int(exc.position) - len(prefix)))
                raise
            read = relations_read(plan_of([[res.get_value(0, 0)]]))

            def exempt(rls: RowSecurity) -> bool:
                found = _check(conn.exec_params(
                    _EXEMPT, [rls.owner.encode(), b"t" if rls.forced else b"f"], None, None, 0))  # fmt: skip
                return found.get_value(0, 0) == b"t"

            check_row_security(read, row_security, exempt)
        if len(self._passed) >= VERDICTS:
            self._passed.clear()
        self._passed[key] = (now + MIRROR_SECONDS, read)
        return read


VERDICTS = 256  # statements a person's session keeps the verdict of


def _verdict_key(text: str, param_oids: Sequence[int], settings: dict[str, str]) -> tuple[Any, ...]:
    return (text, tuple(param_oids), tuple(sorted(settings.items())))


# Row security does not apply to BYPASSRLS roles, nor to the table's owner (a member of
# the owner's role counts) unless it is forced; a superuser passes both.
_EXEMPT = (
    b"SELECT r.rolbypassrls OR r.rolsuper OR (pg_catalog.pg_has_role(current_user, $1::name, "
    b"'USAGE') AND NOT $2::bool) FROM pg_catalog.pg_roles r WHERE r.rolname = current_user"
)


@contextmanager
def _positioned(rewritten: bool) -> Iterator[None]:
    """An error's position is in the client's text only where serve sent that text."""
    try:
        yield
    except SqlError as exc:
        if rewritten:
            exc.position = None
        raise


class _Cancel:
    """A running statement's cancel: PostgreSQL's cancel request for its connection."""

    def __init__(self, conn: PGconn) -> None:
        self._cancel = conn.get_cancel()

    def interrupt(self) -> None:
        self._cancel.cancel()


def _fields(res: PGresult) -> list[Field]:
    """A result's columns, as its RowDescription said them."""
    return [
        Field((res.fname(i) or b"").decode(), res.ftable(i), res.ftablecol(i), res.ftype(i),
              res.fsize(i), res.fmod(i))
        for i in range(res.nfields)
    ]  # fmt: skip


def _formats(asked: Sequence[int], count: int) -> list[int]:
    if not asked:
        return [0] * count
    if len(asked) == 1:
        return [asked[0]] * count
    return list(asked[:count]) + [0] * (count - len(asked))


def _literal(conn: PGconn, value: str) -> str:
    return bytes(pq.Escaping(conn).escape_literal(value.encode())).decode()


def _check(res: PGresult | None) -> PGresult:
    if res is None:
        raise SqlError("08006", "serve: the definitions database went away")
    if res.status in (ExecStatus.FATAL_ERROR, ExecStatus.NONFATAL_ERROR, ExecStatus.BAD_RESPONSE):

        def field(code: DiagnosticField) -> str | None:
            value = res.error_field(code)
            return None if value is None else value.decode(errors="replace")

        if field(DiagnosticField.SQLSTATE) is None:  # no server's answer: the session's flow broke
            raise SqlError("08006", "serve: the session on the definitions database was lost: "
                           "connect again")  # fmt: skip
        raise SqlError(
            field(DiagnosticField.SQLSTATE) or "XX000",
            field(DiagnosticField.MESSAGE_PRIMARY) or "error",
            field(DiagnosticField.MESSAGE_DETAIL),
            field(DiagnosticField.MESSAGE_HINT),
            field(DiagnosticField.STATEMENT_POSITION),
        )
    return res
