"""Where `archiver serve` (and its Iceberg REST catalog) listens and how, checked once
before anything is opened: one line naming the problem when it must not start."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from archiver.config import Settings
from archiver.errors import ConfigError
from archiver.web.middleware import is_loopback
from archiver.web.server import parse_bind


@dataclass(frozen=True)
class Listen:
    """Where serve listens and how: checked once, before anything is opened."""

    host: str
    port: int
    tls: ssl.SSLContext | None


def check(settings: Settings, bind: str) -> Listen:
    """One line naming the problem when serve must not start as configured: no
    password, a half-configured certificate, or a bind beyond loopback without TLS that
    ARCHIVER_SERVE_ALLOW_PLAINTEXT does not allow."""
    host, port = parse_bind(bind)
    if not settings.serve_password and not settings.serve_roles:
        raise ConfigError(
            "serve: nobody could sign in: set ARCHIVER_SERVE_PASSWORD (the configured user), "
            "or ARCHIVER_SERVE_ROLES=true (each person as their own role)"
        )
    cert, key = settings.serve_tls_cert, settings.serve_tls_key
    if bool(cert) != bool(key):
        raise ConfigError(
            "serve: ARCHIVER_SERVE_TLS_CERT and ARCHIVER_SERVE_TLS_KEY go together: set both"
        )
    tls = None
    if cert and key:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            tls.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"serve: the TLS certificate or key cannot be loaded: {exc}"
            ) from None
    elif not is_loopback(host) and not settings.serve_allow_plaintext:
        raise ConfigError(
            f"serve: refusing to listen on {host}, beyond this machine, without TLS: set "
            "ARCHIVER_SERVE_TLS_CERT and ARCHIVER_SERVE_TLS_KEY, or "
            "ARCHIVER_SERVE_ALLOW_PLAINTEXT=true where the network is private"
        )
    return Listen(host, port, tls)
