"""`archiver console`: the checks on where it listens, then uvicorn until a signal."""

from __future__ import annotations

import ipaddress
import logging
import signal

from archiver.config import ConfigFile, Settings
from archiver.errors import ConfigError

log = logging.getLogger(__name__)


def parse_bind(bind: str) -> tuple[str, int]:
    """`host:port` (IPv6 in brackets); one line naming the problem otherwise."""
    host, sep, port = bind.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--bind: expected HOST:PORT, got {bind!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def serve(settings: Settings, config: ConfigFile | None, bind: str) -> None:
    """Run the console until SIGTERM or SIGINT."""
    import uvicorn

    from archiver.web.app import create_app

    host, port = parse_bind(bind)
    if not is_loopback(host) and not settings.console_admin_token:
        raise ConfigError(
            f"console: refusing to listen on {host}, beyond this machine, without "
            "ARCHIVER_CONSOLE_ADMIN_TOKEN (bind 127.0.0.1, or set the token)"
        )
    log.info(
        "console on http://%s:%d (%s)",
        host,
        port,
        "actions need the admin token" if settings.console_admin_token else "read-only",
    )
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, config),
            host=host,
            port=port,
            log_config=None,  # archiver's logging (archiver.logs) as every command
            access_log=False,
            proxy_headers=True,
            server_header=False,
        )
    )
    # uvicorn stops on SIGTERM/SIGINT, then raises the signal again for the handler that
    # was there before it: make that one a no-op, so the console exits 0 as the workers do
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    await server.serve()
