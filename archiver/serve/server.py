"""`archiver serve`: once where it listens is checked (archiver.serve.listen), a
PostgreSQL protocol server until SIGTERM: TLS when a certificate is configured, people
signed in by SCRAM-SHA-256 (archiver.serve.signin), a maximum of connections, an idle
timeout, messages of bounded size, and each connection's failures kept to that
connection."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
import signal
import ssl
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from archiver.config import Settings
from archiver.context import Context
from archiver.errors import first_line
from archiver.serve import wire
from archiver.serve.audit import ReadAudit
from archiver.serve.listen import Listen, check
from archiver.serve.privileges import Mirror
from archiver.serve.selects import ServedArchive
from archiver.serve.session import Session
from archiver.serve.signin import SignIn
from archiver.serve.statements import REPORTED
from archiver.serve.upstream import PersonUpstream, Upstream
from archiver.serve.watchdog import WATCHDOG
from archiver.serve.wire import SqlError

log = logging.getLogger(__name__)

MAX_MESSAGE = 1 << 20  # bytes of one message: a statement, or a Bind's parameters
AUTH_SECONDS = 10.0  # for the start-up and the password exchange
STOP_SECONDS = 10.0  # for the connections to end when serve stops, then their sockets go
UPSTREAM_CONNECTIONS = 8  # to the definitions database, shared by the sessions
CLOSE_SECONDS = 5.0  # what serve's stop waits for its sessions to close, twice at most
FLUSH_MESSAGES = 256  # answered messages held at most before they are written


class Server:
    """The listening socket's connections, each a Session after its start-up."""

    def __init__(
        self,
        settings: Settings,
        listen: Listen,
        archive: ServedArchive,
        upstream: Upstream,
        signin: SignIn,
        mirror: Mirror,
        audit: ReadAudit,
    ) -> None:
        self.settings = settings
        self.audit = audit
        self.signin = signin
        self.mirror = mirror
        self.listen = listen
        self.archive = archive
        self.upstream = upstream
        self.executor = ThreadPoolExecutor(
            max_workers=settings.serve_max_connections, thread_name_prefix="serve"
        )
        # each open connection's task, and its socket's writer (aborted if it will not stop)
        self.connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._keys: dict[tuple[int, int], Session] = {}
        self._pids = itertools.count(1)

    async def run(self, stop: asyncio.Event) -> None:
        loop_time = asyncio.get_running_loop().time
        server = await asyncio.start_server(
            self._connection, self.listen.host, self.listen.port, reuse_address=True
        )
        names = ", ".join(f"{s.getsockname()[0]}:{s.getsockname()[1]}" for s in server.sockets)
        log.info(
            "serve: listening on %s (%s, %s, at most %d connections)",
            names,
            "TLS required" if self.listen.tls else "no TLS",
            ", ".join(
                [f"user {self.settings.serve_user}"] * bool(self.settings.serve_password)
                + ["people as their own roles"] * self.signin.enabled
            )
            or "nobody signs in",
            self.settings.serve_max_connections,
        )
        async with server:
            await stop.wait()
            server.close()
            deadline = loop_time() + STOP_SECONDS
            while self.connections and loop_time() < deadline:
                for task in list(self.connections):  # one accepted meanwhile: next pass
                    task.cancel()
                await asyncio.wait(list(self.connections), timeout=deadline - loop_time())
            if self.connections:  # a client that stopped reading, a statement that would not stop
                log.warning(
                    "serve: %d connections still closing after %g s: their sockets aborted",
                    len(self.connections),
                    STOP_SECONDS,
                )
                for writer in self.connections.values():
                    writer.transport.abort()
        self.executor.shutdown(wait=False, cancel_futures=True)
        log.info("serve: stopped")

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        if len(self.connections) >= self.settings.serve_max_connections:
            writer.write(wire.error("53300", "sorry, too many clients already", "FATAL"))
            with contextlib.suppress(Exception):
                await writer.drain()
            writer.close()
            log.warning(
                "serve: %s refused: %d connections open", _peer(peer), len(self.connections)
            )
            return
        self.connections[task] = writer
        session: Session | None = None
        person: PersonUpstream | None = None
        try:
            reader, writer, user, parameters, person = await asyncio.wait_for(
                self._start_up(reader, writer), AUTH_SECONDS
            )
            if user is None:
                return
            session = Session(
                self.archive,
                person or self.upstream,
                self.executor,
                writer.write,
                writer.drain,
                user=user,
                statement_timeout=self.settings.serve_statement_timeout,
                audit=self.audit,
                address=_address(peer),
                mirror=self.mirror if person is not None else None,
            )
            try:
                await session.start(parameters)
            except SqlError as exc:  # a start-up packet's setting refused: fatal, as PostgreSQL
                writer.write(wire.error(exc.sqlstate, str(exc), "FATAL"))
                return
            await self._serve(reader, writer, session)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            pass  # the client went away, or never finished its start-up
        except wire.ProtocolError as exc:
            log.warning("serve: %s: protocol violation: %s", _peer(peer), exc)
            if session is not None:
                session.flush()
            writer.write(wire.error("08P01", str(exc), "FATAL"))
        except ssl.SSLError as exc:
            log.warning("serve: %s: TLS failed: %s", _peer(peer), first_line(exc))
        except asyncio.CancelledError:
            if session is not None:
                session.flush()
            writer.write(
                wire.error("57P01", "terminating connection: archiver serve is stopping", "FATAL")
            )
        except Exception as exc:  # a connection's failure ends that connection alone
            log.error("serve: %s: %s: %s", _peer(peer), type(exc).__name__, first_line(exc))
        finally:
            await self._release(task, writer, session, person)

    async def _release(
        self,
        task: asyncio.Task[Any],
        writer: asyncio.StreamWriter,
        session: Session | None,
        person: PersonUpstream | None,
    ) -> None:
        """A connection's end: its session closed (or, never begun, its person's upstream),
        then its socket. The task stays among the connections until its session is
        released: stopping serve cancels it and waits for it, here too (its client gone),
        and it must still end without being cancelled, or Python 3.11's stream callback
        logs a traceback for it (task.exception() raises)."""
        try:
            if session is None and person is not None:
                person.close()
            if session is not None:
                self._keys = {k: s for k, s in self._keys.items() if s is not session}
                closing = asyncio.get_running_loop().run_in_executor(self.executor, session.close)
                try:
                    await asyncio.shield(closing)
                except asyncio.CancelledError:
                    await closing  # released before the archive closes
            with contextlib.suppress(Exception):
                await writer.drain()
        except asyncio.CancelledError:
            pass
        finally:
            self.connections.pop(task, None)
            writer.close()

    async def _start_up(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[
        asyncio.StreamReader,
        asyncio.StreamWriter,
        str | None,
        dict[str, str],
        PersonUpstream | None,
    ]:
        """TLS if asked and configured, the start-up packet, the password: the user, the
        packet's parameters and a person's own session (None for the configured user),
        or no user (refused, told why; or a cancel request, done)."""
        encrypted = False
        while True:
            code, body = await wire.read_startup(reader)
            if code in (wire.SSL_REQUEST, wire.GSSENC_REQUEST):
                if code == wire.SSL_REQUEST and self.listen.tls and not encrypted:
                    writer.write(b"S")
                    await writer.drain()
                    await writer.start_tls(self.listen.tls)
                    encrypted = True
                else:
                    writer.write(b"N")
                    await writer.drain()
                continue
            if code == wire.CANCEL_REQUEST:
                if len(body) == 8:
                    pid, secret = struct.unpack("!ii", body)
                    session = self._keys.get((pid, secret))
                    if session is not None:
                        session.cancel()
                return reader, writer, None, {}, None
            if code != wire.PROTOCOL_3:
                raise wire.ProtocolError(
                    f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}"
                )
            break
        params = wire.startup_parameters(body)
        user = params.get("user", "")
        if self.listen.tls and not encrypted:
            writer.write(
                wire.error(
                    "28000", "archiver serve requires TLS: connect with sslmode=require", "FATAL"
                )
            )
            return reader, writer, None, {}, None
        peer = _address(writer.get_extra_info("peername"))
        signed = await self.signin.authenticate(reader, writer, user, params, peer, self.executor)
        if signed is None:
            return reader, writer, None, {}, None
        person = None if isinstance(signed, bool) else PersonUpstream(self.upstream, signed)
        return reader, writer, user, params, person

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, session: Session
    ) -> None:
        """A session from its start-up parameters to the client's Terminate (or an
        idle timeout)."""
        pid, secret = next(self._pids), secrets.randbits(31)
        self._keys[(pid, secret)] = session
        for name, shown in REPORTED.items():
            value = session.settings.get(name)
            if value is not None:
                writer.write(wire.parameter_status(shown, value))
        writer.write(wire.backend_key(pid, secret))
        writer.write(wire.ready(session.status))
        await writer.drain()
        try:
            while True:
                message = await asyncio.wait_for(
                    wire.read_message(reader, MAX_MESSAGE), self.settings.serve_idle_timeout or None
                )
                if message.kind == b"X":
                    return
                if message.kind == b"Q":
                    read = wire.Reader(message.body)
                    text = read.string()
                    read.end()
                    await session.simple(text)
                elif message.kind in b"PBDECSH" and len(message.kind) == 1:
                    await session.extended(message)
                else:
                    raise wire.ProtocolError(f"unsupported message type {message.kind!r}")
                # answers wait for Sync, Flush or a simple query (as PostgreSQL's do)
                if message.kind in b"QSH" or session.pending() > FLUSH_MESSAGES:
                    await session.drain()
        except TimeoutError:
            session.flush()
            writer.write(
                wire.error("57P05", "terminating connection due to idle-session timeout", "FATAL")
            )


def _address(peer: object) -> str | None:
    """The client's address, as the audit records it."""
    return str(peer[0]) if isinstance(peer, tuple) and peer else None


def _peer(peer: object) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


async def serve(ctx: Context, bind: str, rest_bind: str | None = None) -> None:
    """Run `archiver serve` until SIGTERM or SIGINT, with its Iceberg REST catalog where
    `rest_bind` says (archiver.serve.rest). Its sessions are its own, held as long as it
    runs: the catalog's (the files, archiver.serve.definitions), the definitions
    server's (libpq, archiver.serve.upstream) and DuckDB's reads of the storage
    (archiver.serve.selects)."""
    settings = ctx.settings
    listen = check(settings, bind)
    rest_listen = None
    if rest_bind:
        from archiver.serve.rest import checked

        rest_listen = checked(settings, rest_bind, check)
    archive = await asyncio.to_thread(ServedArchive, settings, settings.storage_location())
    upstream = Upstream(
        archive.definitions,
        min(settings.serve_max_connections, UPSTREAM_CONNECTIONS),
        settings.serve_statement_timeout,
    )
    audit = ReadAudit(settings.database_url, settings.audit_parameters)
    audit.start()
    people = SignIn(archive.definitions.place, settings, audit)
    mirror = Mirror(archive.definitions, settings.effective_source_url)
    if settings.serve_roles:  # the grants mirrored for attach too, whoever may sign in
        await asyncio.to_thread(people.start)
        await asyncio.to_thread(mirror.start)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        running = [Server(settings, listen, archive, upstream, people, mirror, audit).run(stop)]
        if rest_listen is not None:
            from archiver.serve.rest import run_rest

            running.append(run_rest(rest_listen, settings, people, mirror, audit, stop))
        await asyncio.gather(*running)
    finally:
        await _close(audit, mirror, people, upstream, archive)


async def _close(*parts: Any) -> None:
    """Close serve's parts in order (the audit's last reads written first), bounded: what
    still waits on a dead flow after CLOSE_SECONDS has its socket shut (watchdog), and
    after as long again serve exits without it."""

    def close_all() -> None:
        for part in parts:
            part.close()

    closing = asyncio.ensure_future(asyncio.to_thread(close_all))
    done, _ = await asyncio.wait({closing}, timeout=CLOSE_SECONDS)
    if not done:
        log.warning("serve: %d sessions still closing after %gs: shut", WATCHDOG.shut_all(),
                    CLOSE_SECONDS)  # fmt: skip
        done, _ = await asyncio.wait({closing}, timeout=CLOSE_SECONDS)
    if not done:
        log.warning("serve: stopped with sessions still closing on dead flows")
        logging.shutdown()
        os._exit(0)  # a thread blocked in a driver's close is not waited for
    closing.result()
