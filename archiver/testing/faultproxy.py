"""A TCP proxy that misbehaves on command, between a service and its server (PostgreSQL,
the blob store), for the network fault tests and the soak.

What it does to the flows through it, while both ends stay up:

- `freeze()`: every flow open now stops carrying bytes, both ways, for good, and is never
  closed -- what a NAT, a firewall or a load balancer that forgot a flow does to it. New
  flows pass (the forgotten flow's successor gets a new mapping).
- `pause(seconds)`: every flow, open and new, carries nothing for `seconds`, then
  carries on with what was held.
- `reset()`: every open flow is closed with a TCP reset.
- `refuse(True)`: new connections are reset as they arrive; `refuse(False)` lets them in.
- `slow(seconds)`: each chunk of bytes waits `seconds` before it is passed on.
- `heal()`: no pause, no refusal, no slowness (frozen flows stay frozen).

Its limit: it is a process of this machine, so its kernel acknowledges what it stops
passing on. A frozen flow is silent to the application (no byte arrives) but TCP
keepalive probes and unacknowledged data are answered by this machine's kernel, so the
tests here exercise the services' own bounds (statement and request timeouts, bounded
stops), not the kernel's keepalive and TCP_USER_TIMEOUT, which only a dropped packet
reaches.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

CHUNK = 64 * 1024


@dataclass(eq=False)
class _Flow:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    frozen: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class FaultProxy:
    """`FaultProxy(host, port)`: listens on 127.0.0.1:`self.port` (a free port) and passes
    each connection on to host:port, in a thread of its own, until `close()`."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.flows: set[_Flow] = set()
        self.paused_until = 0.0
        self.refusing = False
        self.delay = 0.0
        self.accepted = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    # -- faults, called from any thread ---------------------------------------------------

    def freeze(self) -> int:
        """Freeze every open flow for good; how many were frozen."""
        return int(self._call(self._freeze))

    def pause(self, seconds: float) -> None:
        self.paused_until = time.monotonic() + seconds

    def reset(self) -> int:
        """Reset every open flow; how many were reset."""
        return int(self._call(self._reset))

    def refuse(self, on: bool = True) -> None:
        self.refusing = on

    def slow(self, seconds: float) -> None:
        self.delay = seconds

    def heal(self) -> None:
        self.paused_until, self.refusing, self.delay = 0.0, False, 0.0

    def close(self) -> None:
        self._call(self._shutdown)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def open_flows(self) -> int:
        return len(self.flows)

    # -- the loop ---------------------------------------------------------------------------

    def _call(self, fn: Any) -> Any:
        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._accept, "127.0.0.1", 0)
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:  # every flow's task ended and the loop closed: nothing left to collect
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.run_until_complete(asyncio.sleep(0))
            self._loop.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.refusing:
            _reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return
        flow = _Flow(writer, up_writer)
        self.flows.add(flow)
        flow.tasks = [
            asyncio.create_task(self._pump(flow, reader, up_writer)),
            asyncio.create_task(self._pump(flow, up_reader, writer)),
        ]
        await asyncio.gather(*flow.tasks, return_exceptions=True)
        self.flows.discard(flow)
        for end in (writer, up_writer):
            with contextlib.suppress(Exception):
                end.close()

    async def _pump(
        self, flow: _Flow, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                while flow.frozen or time.monotonic() < self.paused_until:
                    if flow.frozen:
                        await asyncio.Event().wait()  # for good: the flow is forgotten
                    await asyncio.sleep(max(0.0, self.paused_until - time.monotonic()))
                if self.delay:
                    await asyncio.sleep(self.delay)
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            if not flow.frozen:  # one side ended: so does the other
                for task in flow.tasks:
                    task.cancel()

    def _freeze(self) -> int:
        for flow in self.flows:
            flow.frozen = True
        return len(self.flows)

    def _reset(self) -> int:
        flows = list(self.flows)
        for flow in flows:
            for task in flow.tasks:
                task.cancel()
            _reset(flow.client)
            _reset(flow.server)
        return len(flows)

    def _shutdown(self) -> None:
        self._server.close()
        for flow in list(self.flows):
            for task in flow.tasks:
                task.cancel()
            for end in (flow.client, flow.server):
                end.transport.abort()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST: SO_LINGER on with a zero timeout."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@contextlib.contextmanager
def proxied(host: str, port: int) -> Iterator[FaultProxy]:
    proxy = FaultProxy(host, port)
    try:
        yield proxy
    finally:
        proxy.close()
