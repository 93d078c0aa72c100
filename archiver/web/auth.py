"""Who may read and who may act: credentials, sessions, CSRF tokens and the login
throttle, all without a session store.

Reading needs a credential unless the operator opts out (ARCHIVER_CONSOLE_PUBLIC_READ):
the viewer token (ARCHIVER_CONSOLE_VIEWER_TOKEN), the admin token
(ARCHIVER_CONSOLE_ADMIN_TOKEN), or an identity a trusted reverse proxy vouches for
(see archiver.web.proxy). Acting needs a login with the admin token. A login gives a
session cookie signed with a key derived from the token it was made with (HttpOnly,
SameSite=Strict), so changing a token ends every session made with it; every POST
carries a CSRF token derived from the session. Comparisons are constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

SESSION_COOKIE = "archiver_session"
SESSION_SECONDS = 12 * 3600
ADMIN, VIEWER = "admin", "viewer"
_NAME = re.compile(r"[A-Za-z0-9 .@+_'-]{1,128}")  # ASCII: no lookalike of another name
MIN_TOKEN = 16  # characters: a session's key derives from its token, so guessing one
# from a stolen cookie offline must be hopeless


@dataclass(frozen=True)
class Who:
    """The person behind a request, as far as the console knows them."""

    name: str | None  # the proxy's identity or the login's name; None: nobody known
    role: str | None  # ADMIN, VIEWER (a viewer, or open reading), or None: may not read
    by_proxy: bool = False  # the name came from the reverse proxy
    session: bool = False  # a login's session cookie stands behind it

    @property
    def can_read(self) -> bool:
        return self.role is not None

    @property
    def can_act(self) -> bool:
        return self.role == ADMIN


class Auth:
    def __init__(self, admin_token: str | None, viewer_token: str | None = None) -> None:
        self._tokens = {r: t for r, t in ((ADMIN, admin_token), (VIEWER, viewer_token)) if t}
        self._keys = {
            role: hashlib.sha256(f"archiver console {role} {token}".encode()).digest()
            for role, token in self._tokens.items()
        }

    @property
    def enabled(self) -> bool:
        """A login is possible at all (some token is configured)."""
        return bool(self._tokens)

    @property
    def can_act(self) -> bool:
        return ADMIN in self._tokens

    def role_of(self, token: str) -> str | None:
        """The role a token given at login grants (every token compared: no timing tell)."""
        found = None
        for role, expected in self._tokens.items():
            if hmac.compare_digest(token.encode(), expected.encode()):
                found = role
        return found

    def _sign(self, role: str, text: str) -> str:
        return hmac.new(self._keys[role], text.encode(), hashlib.sha256).hexdigest()

    def session(self, name: str, role: str, now: float | None = None) -> str:
        """A session cookie's value for `name` (checked with valid_name) in `role`."""
        expires = int((now or time.time()) + SESSION_SECONDS)
        body = f"{expires}.{role}.{name.encode().hex()}"  # nothing a cookie must quote
        return f"{body}.{self._sign(role, body)}"

    def who(self, cookie: str | None, now: float | None = None) -> tuple[str, str] | None:
        """(name, role) of a valid, unexpired session cookie; None otherwise."""
        if not cookie or cookie.count(".") != 3:
            return None
        body, _, signature = cookie.rpartition(".")
        expires, role, name = body.split(".")
        if role not in self._keys:
            return None
        if not hmac.compare_digest(signature.encode(), self._sign(role, body).encode()):
            return None
        now = now or time.time()
        if (
            not re.fullmatch(r"[0-9]{1,12}", expires)
            or not now <= int(expires) <= now + SESSION_SECONDS
        ):
            return None  # expired, or minted to outlive a session by someone with the token
        try:
            decoded = bytes.fromhex(name).decode()
        except (ValueError, UnicodeDecodeError):  # signed, so only a key change gets here
            return None
        return (decoded, role) if valid_name(decoded) else None

    def csrf(self, cookie: str) -> str:
        found = self.who(cookie)
        return self._sign(found[1], "csrf " + cookie) if found else ""

    def csrf_ok(self, cookie: str | None, token: str) -> bool:
        expected = self.csrf(cookie or "")
        return bool(expected) and hmac.compare_digest(token.encode(), expected.encode())


def valid_name(name: str) -> bool:
    """An operator's name for the audit log: ASCII letters, digits, space, `.@+_'-`."""
    return bool(_NAME.fullmatch(name))


class LoginThrottle:
    """Refused logins per client address: after `limit` within `window` seconds, every
    login from that address is refused for `lockout` seconds, the right token too. A
    login that succeeds forgets nothing (else a viewer could interleave guesses at the
    admin token with its own logins). Kept in memory by the console process (it forgets
    on restart), for at most `addresses` addresses in each of its two tables, the least
    recently refused or locked dropped first (under a flood of addresses, an early end
    to an old lockout rather than unbounded memory)."""

    def __init__(
        self,
        limit: int = 5,
        window: float = 900.0,
        lockout: float = 900.0,
        addresses: int = 10_000,
    ) -> None:
        self.limit, self.window, self.lockout, self.addresses = limit, window, lockout, addresses
        self._refused: OrderedDict[str, list[float]] = OrderedDict()
        self._locked: OrderedDict[str, float] = OrderedDict()

    def locked_for(self, address: str, now: float | None = None) -> float:
        """Seconds the address is still locked out; 0 when it may try."""
        now = time.monotonic() if now is None else now
        until = self._locked.get(address, 0.0)
        if until <= now:
            self._locked.pop(address, None)
            return 0.0
        return until - now

    def refused(self, address: str, now: float | None = None) -> bool:
        """Count one refused login; True when it locks the address out."""
        now = time.monotonic() if now is None else now
        recent = [t for t in self._refused.pop(address, []) if t > now - self.window]
        recent.append(now)
        if len(recent) >= self.limit:
            self._locked[address] = now + self.lockout
            _bound(self._locked, self.addresses)
            return True
        self._refused[address] = recent
        _bound(self._refused, self.addresses)
        return False


def _bound(table: OrderedDict[str, Any], size: int) -> None:
    while len(table) > size:
        table.popitem(last=False)
