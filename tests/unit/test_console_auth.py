"""The console's credential, sessions and CSRF tokens, and where an action may send the
browser back to (archiver.web): fast checks beside the browser tests."""

from __future__ import annotations

from archiver.web.app import _local_path
from archiver.web.auth import SESSION_SECONDS, Auth, valid_name
from archiver.web.server import is_loopback, parse_bind


def test_sessions_are_signed_expire_and_end_with_the_token() -> None:
    auth = Auth("s3cret")
    cookie = auth.session("ops-alice", now=1000.0)
    assert auth.actor(cookie, now=1001.0) == "ops-alice"
    assert auth.actor(cookie, now=1000.0 + SESSION_SECONDS + 1) is None  # expired
    expires, _, signature = cookie.split(".")
    forged = f"{expires}.{b'mallory'.hex()}.{signature}"
    assert auth.actor(forged, now=1001.0) is None  # another name, the same signature
    assert Auth("rotated").actor(cookie, now=1001.0) is None  # a new token ends sessions
    assert Auth(None).actor(cookie, now=1001.0) is None and not Auth(None).enabled


def test_tokens_and_names() -> None:
    auth = Auth("s3cret")
    assert auth.accepts("s3cret") and not auth.accepts("s3cre") and not Auth("").accepts("")
    cookie = auth.session("a")
    assert auth.csrf_ok(cookie, auth.csrf(cookie))
    assert not auth.csrf_ok(cookie, auth.csrf(auth.session("b")))
    assert not auth.csrf_ok(None, auth.csrf(cookie))
    assert valid_name("ops-alice@example.com") and not valid_name("a\nb") and not valid_name("")


def test_an_action_sends_the_browser_back_only_within_the_console() -> None:
    assert _local_path("/archive/public.orders")
    for elsewhere in ("//evil.example/", "https://evil.example/", "/\\evil.example", "jobs"):
        assert not _local_path(elsewhere)


def test_binds() -> None:
    assert parse_bind("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_bind("[::1]:9000") == ("::1", 9000)
    assert is_loopback("::1") and is_loopback("localhost") and not is_loopback("0.0.0.0")


def test_foreign_characters_in_a_cookie_or_token_are_refused_not_errors() -> None:
    auth = Auth("s3cret")
    cookie = auth.session("a")
    assert auth.actor("1.é.ü") is None and auth.actor("²²².00.ab") is None
    assert not auth.csrf_ok(cookie, "é")
