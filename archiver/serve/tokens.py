"""How serve's Iceberg REST catalog signs people in: OAuth2 client credentials, the
client id a login role and the secret its password (in the form body, as pyiceberg sends
them, or as HTTP Basic, as DuckDB does), checked against the role's SCRAM verifier as
serve's own sign-in checks it (archiver.serve.signin): a wrong secret answered the same
whether the role exists or not, NOLOGIN and an expired password refused, CONNECT on the
definitions database asked of PostgreSQL in the person's own session. The password is
never kept or logged; a bearer token is a random string this process keeps
TOKEN_SECONDS."""

from __future__ import annotations

import base64
import secrets
import threading
import time
from dataclasses import dataclass
from urllib.parse import unquote

from starlette.responses import JSONResponse

from archiver.serve.signin import SignIn, SignInRefused

TOKEN_SECONDS = 3600


class Refused(Exception):
    """An answer of the REST spec's ErrorModel: its status, type and one line."""

    def __init__(self, status: int, kind: str, message: str, outcome: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.outcome = status, kind, outcome

    def response(self) -> JSONResponse:
        error = {"message": str(self), "type": self.kind, "code": self.status}
        return JSONResponse({"error": error}, status_code=self.status)


@dataclass(frozen=True)
class Person:
    role: str
    everything: bool  # the configured user, who reads every table
    expires: float


class Tokens:
    """The tokens this process gave, and who holds each."""

    def __init__(self, signin: SignIn) -> None:
        self.signin = signin
        self._tokens: dict[str, Person] = {}
        self._lock = threading.Lock()

    def issue(self, user: str, secret: str) -> str:
        """A bearer token for `user` signed in with `secret` (Refused otherwise)."""
        person = self._sign_in(user, secret)
        token = secrets.token_urlsafe(32)
        with self._lock:
            now = time.monotonic()
            for old in [t for t, p in self._tokens.items() if p.expires <= now]:
                del self._tokens[old]
            self._tokens[token] = person
        return token

    def person(self, header: str) -> Person:
        """Who holds the bearer token of an Authorization header (Refused: none, or expired)."""
        scheme, _, token = header.partition(" ")
        with self._lock:
            person = self._tokens.get(token) if scheme.lower() == "bearer" else None
        if person is None or person.expires <= time.monotonic():
            raise Refused(401, "NotAuthorizedException", "a bearer token from /v1/oauth/tokens "
                          "is needed (it may have expired)", "28000")  # fmt: skip
        return person

    def _sign_in(self, user: str, secret: str) -> Person:
        wrong = Refused(401, "invalid_client", "the client id or secret is wrong", "28P01")
        expires = time.monotonic() + TOKEN_SECONDS
        configured = self.signin.configured
        if configured is not None and secrets.compare_digest(
            user.encode(), self.signin.configured_user.encode()
        ):
            if configured.client_key(secret) is None:
                raise wrong
            return Person(user, True, expires)
        role = self.signin.role(user)
        key = role.verifier.client_key(secret)
        if key is None:
            raise wrong
        if not role.can_login:
            raise Refused(
                401, "invalid_client", f'role "{user}" is not permitted to log in', "28000"
            )
        try:  # the person's own session: PostgreSQL's word on CONNECT
            self.signin.session_of(user, role.verifier, key, self.signin.place.database).finish()
        except SignInRefused as exc:
            raise Refused(401, "invalid_client", str(exc), exc.sqlstate) from None
        return Person(user, False, expires)


def client(header: str, form: dict[str, str]) -> tuple[str, str]:
    """(client id, secret) from an Authorization header's HTTP Basic, or the form body."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "basic":
        try:
            user, _, secret = base64.b64decode(value).decode().partition(":")
        except ValueError:
            raise Refused(400, "invalid_request", "malformed Basic credentials", "28000") from None
        return unquote(user), unquote(secret)
    return form.get("client_id", ""), form.get("client_secret", "")
