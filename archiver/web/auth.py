"""Who may act: the admin credential, sessions and CSRF tokens, all without server state.

Reading is open to whoever reaches the console (bind it to loopback, or put it behind a
reverse proxy that authenticates). Acting needs the admin credential
(ARCHIVER_CONSOLE_ADMIN_TOKEN): a login with it, under a name the audit log shows,
gives a session cookie signed with a key derived from the credential (HttpOnly,
SameSite=Strict), and every POST carries a CSRF token derived from that session.
Comparisons are constant-time. Changing the credential ends every session.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

SESSION_COOKIE = "archiver_session"
SESSION_SECONDS = 12 * 3600
_NAME = re.compile(r"[\w .@-]{1,64}")


class Auth:
    def __init__(self, admin_token: str | None) -> None:
        self.admin_token = admin_token or ""
        self._key = hashlib.sha256(b"archiver console " + self.admin_token.encode()).digest()

    @property
    def enabled(self) -> bool:
        """Actions are possible at all (an admin credential is configured)."""
        return bool(self.admin_token)

    def accepts(self, token: str) -> bool:
        return self.enabled and hmac.compare_digest(token.encode(), self.admin_token.encode())

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def session(self, actor: str, now: float | None = None) -> str:
        """A session cookie's value for `actor` (a name of word characters, checked)."""
        expires = int((now or time.time()) + SESSION_SECONDS)
        body = f"{expires}.{actor.encode().hex()}"  # nothing a cookie must quote
        return f"{body}.{self._sign(body)}"

    def actor(self, cookie: str | None, now: float | None = None) -> str | None:
        """The name a valid, unexpired session cookie carries; None otherwise."""
        if not self.enabled or not cookie or cookie.count(".") != 2:
            return None
        body, _, signature = cookie.rpartition(".")
        if not hmac.compare_digest(signature.encode(), self._sign(body).encode()):
            return None
        expires, _, name = body.partition(".")
        if not re.fullmatch(r"[0-9]{1,12}", expires) or int(expires) < (now or time.time()):
            return None
        try:
            return bytes.fromhex(name).decode()
        except (ValueError, UnicodeDecodeError):  # signed, so only a key change gets here
            return None

    def csrf(self, cookie: str) -> str:
        return self._sign("csrf " + cookie)

    def csrf_ok(self, cookie: str | None, token: str) -> bool:
        return bool(cookie) and hmac.compare_digest(
            token.encode(), self.csrf(cookie or "").encode()
        )


def valid_name(name: str) -> bool:
    """An operator's name for the audit log: letters, digits, space, `.@-_`."""
    return bool(_NAME.fullmatch(name))
