"""What wraps every request: the reverse proxy's word, believed only from its addresses,
and the security headers on every response (both pure ASGI: nothing buffered)."""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from archiver.config import IPNetwork
from archiver.web.auth import valid_name

log = logging.getLogger(__name__)

PROXY_USER = "archiver.proxy_user"  # the scope key of the identity the proxy vouches for
VOUCHING = "archiver.vouching"  # True: a trusted proxy that names users sent it; only its
# identity counts then (a missing or unusable one: nobody)
FORWARDED = "archiver.forwarded"  # True: some proxy, trusted or not, passed it on
_FORWARDING = (b"x-forwarded-for", b"forwarded", b"x-real-ip")
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)
ASGIApp = Callable[..., Awaitable[None]]


class Proxied:
    """A request whose connection comes from a trusted proxy carries the client's
    address (X-Forwarded-For), scheme (X-Forwarded-Proto) and, when a header is named,
    the user the proxy authenticated. From any other address those headers are ignored:
    whoever reaches the port directly cannot claim to be someone."""

    def __init__(self, app: ASGIApp, proxies: Iterable[IPNetwork], header: str | None) -> None:
        self.app, self.proxies = app, tuple(proxies)
        self.header = header.lower().encode() if header else None

    def trusted(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.proxies)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope = dict(scope)
            scope[PROXY_USER], scope[VOUCHING] = None, False
            scope[FORWARDED] = any(name in _FORWARDING for name, _ in scope["headers"])
            peer = (scope.get("client") or ("", 0))[0]
            if self.proxies and self.trusted(peer):
                self._believe(scope)
        await self.app(scope, receive, send)

    def _believe(self, scope: dict[str, Any]) -> None:
        values: dict[bytes, list[str]] = {}
        for name, value in scope["headers"]:
            values.setdefault(name, []).append(value.decode("latin-1"))
        hops = [_address(h) for v in values.get(b"x-forwarded-for", []) for h in v.split(",")]
        # the client is the last hop no trusted proxy added (as uvicorn reads it); a hop
        # that is no address ends the chain there (the proxy's own address stands)
        for hop in reversed(hops):
            if hop is None:
                break
            if not self.trusted(hop):
                scope["client"] = (hop, 0)
                break
        proto = values.get(b"x-forwarded-proto", [""])[-1].strip().lower()
        if proto in ("http", "https"):
            scope["scheme"] = proto
        if self.header is None:
            return
        scope[VOUCHING] = True
        users = values.get(self.header, [])
        if len(users) == 1 and valid_name(user := users[0].strip()):
            scope[PROXY_USER] = user
        elif users:  # two of them, or no name the audit log can hold: nobody
            log.warning("console: ignored the proxy's identity header (%d values)", len(users))


def _address(hop: str) -> str | None:
    """An X-Forwarded-For hop as an address: `1.2.3.4`, `1.2.3.4:5678` (Azure App
    Service's form), `2001:db8::1` or `[2001:db8::1]:443`; None if it is none."""
    hop = hop.strip()
    if hop.startswith("["):
        hop = hop[1:].partition("]")[0]
    elif hop.count(":") == 1:
        hop = hop.partition(":")[0]
    try:
        return str(ipaddress.ip_address(hop))
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class SecurityHeaders:
    """Security headers and Server-Timing (the time spent answering) on every response."""

    def __init__(self, app: ASGIApp) -> None:
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
