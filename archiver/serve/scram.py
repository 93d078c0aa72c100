"""SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL runs it, the server's side. libpq
sends an empty user name in its first message (`n=,r=…`: PostgreSQL takes the user from
the start-up packet), which scramp's server refuses, so the exchange is here; the
password is prepared as PostgreSQL prepares it (SASLprep, scramp's, where it applies)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

ITERATIONS = 4096  # PostgreSQL's scram_iterations default


class ScramError(Exception):
    """The client's messages are malformed, or its proof is wrong."""


@dataclass(frozen=True)
class Verifier:
    """What the server keeps of a password: never the password."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def of(cls, password: str, iterations: int = ITERATIONS) -> Verifier:
        salt = secrets.token_bytes(16)
        salted = _salted(password, salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        server_key = hmac.digest(salted, b"Server Key", "sha256")
        return cls(salt, iterations, hashlib.sha256(client_key).digest(), server_key)

    def client_key(self, password: str) -> bytes | None:
        """The client's key `password` gives, where it is this verifier's password (a
        password sent whole, over TLS: the REST catalog's client secret); else None."""
        key = hmac.digest(_salted(password, self.salt, self.iterations), b"Client Key", "sha256")
        return key if hmac.compare_digest(hashlib.sha256(key).digest(), self.stored_key) else None

    @classmethod
    def parse(cls, secret: str | None) -> Verifier | None:
        """A verifier as PostgreSQL stores one (`SCRAM-SHA-256$<iterations>:<salt>$<stored
        key>:<server key>`), or None for anything else (no password, an md5 hash)."""
        if not secret or not secret.startswith("SCRAM-SHA-256$"):
            return None
        try:
            _, head, keys = secret.split("$")
            iterations, salt = head.split(":")
            stored, server = keys.split(":")
            return cls(
                base64.b64decode(salt, validate=True),
                int(iterations),
                base64.b64decode(stored, validate=True),
                base64.b64decode(server, validate=True),
            )
        except ValueError:
            return None

    @classmethod
    def mock(cls, key: bytes, user: str) -> Verifier:
        """A verifier no password matches, the same for `user` at each attempt (its salt
        derived from `key`): a role that does not exist, or may not sign in this way, is
        asked the same questions as one that does (PostgreSQL's mock authentication)."""
        salt = hmac.digest(key, user.encode(), "sha256")[:16]
        return cls(salt, ITERATIONS, secrets.token_bytes(32), secrets.token_bytes(32))

    def postgres_secret(self) -> str:
        """The verifier as PostgreSQL stores one (pg_authid.rolpassword): `ALTER ROLE …
        PASSWORD` with it sets the password without the password reaching the server's
        statement log."""

        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        return (
            f"SCRAM-SHA-256${self.iterations}:{b64(self.salt)}$"
            f"{b64(self.stored_key)}:{b64(self.server_key)}"
        )


def _salted(password: str, salt: bytes, iterations: int) -> bytes:
    """SaltedPassword of RFC 5802, the password prepared as PostgreSQL prepares it."""
    from scramp.utils import saslprep

    try:
        prepared = saslprep(password)
    except Exception:  # PostgreSQL uses the raw password where SASLprep fails
        prepared = password
    return hashlib.pbkdf2_hmac("sha256", prepared.encode(), salt, iterations)


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ScramError(f"malformed attribute {part[:20]!r}")
        out.setdefault(key, value)
    return out


class Exchange:
    """One client's exchange: first(client_first) -> server_first, then
    final(client_final) -> server_final, or ScramError."""

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier
        self._bare = ""
        self._server_first = ""
        self._nonce = ""
        self._header = ""
        self.client_key = b""  # the client's key, recovered from its proof once checked

    def first(self, client_first: str) -> str:
        flag, sep, rest = client_first.partition(",")
        if flag not in ("n", "y") or not sep:
            raise ScramError("channel binding is not offered here (use n or y)")
        authzid, sep, bare = rest.partition(",")
        if not sep:
            raise ScramError("malformed client-first message")
        nonce = _attributes(bare).get("r", "")
        if not nonce:
            raise ScramError("the client-first message has no nonce")
        self._header = f"{flag},{authzid},"
        self._bare = bare
        self._nonce = nonce + base64.b64encode(secrets.token_bytes(18)).decode()
        salt = base64.b64encode(self.verifier.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={self.verifier.iterations}"
        return self._server_first

    def final(self, client_final: str) -> str:
        without_proof, sep, proof_part = client_final.rpartition(",p=")
        if not sep:
            raise ScramError("the client-final message has no proof")
        attributes = _attributes(without_proof)
        if attributes.get("r") != self._nonce:
            raise ScramError("the nonce does not match")
        try:
            binding = base64.b64decode(attributes.get("c", ""), validate=True)
        except ValueError:
            raise ScramError("the channel binding is not base64") from None
        if binding.decode(errors="replace") != self._header:
            raise ScramError("the channel binding does not match")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise ScramError("the proof is not base64") from None
        message = f"{self._bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(self.verifier.stored_key, message, "sha256")
        if len(proof) != len(signature):
            raise ScramError("the proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), self.verifier.stored_key):
            raise ScramError("wrong password")
        self.client_key = client_key
        server_signature = hmac.digest(self.verifier.server_key, message, "sha256")
        return "v=" + base64.b64encode(server_signature).decode()
