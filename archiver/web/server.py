"""`archiver console`: the checks on where it listens, then uvicorn until a signal."""

from __future__ import annotations

import logging
import signal

from archiver.config import ConfigFile, Settings
from archiver.context import Context
from archiver.errors import ConfigError
from archiver.web.auth import MIN_TOKEN
from archiver.web.middleware import is_loopback

log = logging.getLogger(__name__)


def parse_bind(bind: str) -> tuple[str, int]:
    """`host:port` (IPv6 in brackets); one line naming the problem otherwise."""
    host, sep, port = bind.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--bind: expected HOST:PORT, got {bind!r}")
    return host, int(port)


def check_access(settings: Settings, host: str) -> str:
    """Who will be able to read, in words; one line naming the problem when the settings
    would let nobody in, or everybody in from beyond this machine."""
    s = settings
    tokens = [t for t in (s.console_admin_token, s.console_viewer_token) if t]
    if any(len(t) < MIN_TOKEN for t in tokens):
        raise ConfigError(
            f"console: a token of fewer than {MIN_TOKEN} characters (sessions are signed "
            "with a key derived from it): use a long random one, e.g. `openssl rand -hex 32`"
        )
    if len(tokens) == 2 and tokens[0] == tokens[1]:
        raise ConfigError(
            "console: ARCHIVER_CONSOLE_VIEWER_TOKEN is the admin token: give viewers their own"
        )
    if s.console_proxy_header and not s.console_proxy_addresses:
        raise ConfigError(
            "ARCHIVER_CONSOLE_PROXY_HEADER needs ARCHIVER_CONSOLE_PROXY_ADDRESSES: the "
            "addresses of the proxies whose word it is (anyone else could send the header)"
        )
    if s.console_public_read:
        if s.console_proxy_addresses or s.console_proxy_header:
            raise ConfigError(
                "console: ARCHIVER_CONSOLE_PUBLIC_READ with a reverse proxy would open reading "
                "to whoever reaches the proxy: give readers a credential instead"
            )
        if not is_loopback(host):
            raise ConfigError(
                f"console: refusing to listen on {host}, beyond this machine, with "
                "ARCHIVER_CONSOLE_PUBLIC_READ (anyone could read): bind 127.0.0.1, or "
                "give readers a credential (ARCHIVER_CONSOLE_VIEWER_TOKEN or a proxy's header)"
            )
        return "reading open to whoever reaches it"
    ways = [
        name
        for name, on in (
            ("the viewer token", s.console_viewer_token),
            ("the admin token", s.console_admin_token),
            (f"the {s.console_proxy_header} header of a trusted proxy", s.console_proxy_header),
        )
        if on
    ]
    if not ways:
        raise ConfigError(
            "console: nobody could read it: set ARCHIVER_CONSOLE_VIEWER_TOKEN, "
            "ARCHIVER_CONSOLE_ADMIN_TOKEN or ARCHIVER_CONSOLE_PROXY_HEADER, or "
            "ARCHIVER_CONSOLE_PUBLIC_READ=true to let whoever reaches it read"
        )
    return "reading with " + " or ".join(ways)


async def serve(ctx: Context, config: ConfigFile | None, bind: str, root_path: str) -> None:
    """Run the console until SIGTERM or SIGINT, its pool opened on `ctx`."""
    import uvicorn

    from archiver.web.app import create_app

    host, port = parse_bind(bind)
    settings = ctx.settings
    readers = check_access(settings, host)
    acting = "actions with the admin token" if settings.console_admin_token else "no actions"
    log.info("console on http://%s:%d%s (%s; %s)", host, port, root_path, readers, acting)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(ctx, config),
            host=host,
            port=port,
            root_path=root_path,
            log_config=None,  # archiver's logging (archiver.logs) as every command
            access_log=False,
            proxy_headers=False,  # believed from the proxies' addresses only: web.middleware
            server_header=False,
            # requests still open at a stop (one on a dead flow) get the workers' deadline
            timeout_graceful_shutdown=max(1, int(settings.shutdown_deadline)),
        )
    )
    # uvicorn stops on SIGTERM/SIGINT, then raises the signal again for the handler that
    # was there before it: make that one a no-op, so the console exits 0 as the workers do
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    await server.serve()
