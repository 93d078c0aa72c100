"""The console's credentials, sessions, CSRF tokens, login throttle, the proxy's word and
the start-up checks (archiver.web): fast checks beside the browser tests."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import pytest
from starlette.requests import Request

from archiver.config import Settings
from archiver.errors import ConfigError
from archiver.web.app import _back, _local_path
from archiver.web.auth import ADMIN, SESSION_SECONDS, VIEWER, Auth, LoginThrottle, valid_name
from archiver.web.middleware import FORWARDED, PROXY_USER, VOUCHING, Proxied, is_loopback
from archiver.web.server import check_access, parse_bind


def test_sessions_are_signed_expire_and_end_with_their_token() -> None:
    auth = Auth("s3cret", "look")
    cookie = auth.session("ops-alice", ADMIN, now=1000.0)
    assert auth.who(cookie, now=1001.0) == ("ops-alice", ADMIN)
    assert auth.who(cookie, now=1000.0 + SESSION_SECONDS + 1) is None  # expired
    expires, role, _, signature = cookie.split(".")
    forged = f"{expires}.{role}.{b'mallory'.hex()}.{signature}"
    assert auth.who(forged, now=1001.0) is None  # another name, the same signature
    promoted = auth.session("bob", VIEWER, now=1000.0).replace(".viewer.", ".admin.")
    assert auth.who(promoted, now=1001.0) is None  # a viewer cannot make itself admin
    assert Auth("rotated", "look").who(cookie, now=1001.0) is None  # a new token ends them
    viewer = auth.session("bob", VIEWER, now=1000.0)
    assert Auth("rotated", "look").who(viewer, now=1001.0) == ("bob", VIEWER)  # not these
    assert Auth("s3cret", "new").who(viewer, now=1001.0) is None
    assert Auth(None).who(cookie, now=1001.0) is None and not Auth(None).enabled
    # whoever holds the token can sign anything: a session outliving its 12 hours, or a
    # name the audit log cannot hold, is still refused
    key_holder = Auth("s3cret", "look")
    forever = key_holder.session("ops-alice", ADMIN, now=1000.0 + 10 * SESSION_SECONDS)
    assert key_holder.who(forever, now=1001.0) is None
    forged_name = key_holder.session("alice\nconsole: forged", ADMIN, now=1000.0)
    assert key_holder.who(forged_name, now=1001.0) is None


def test_tokens_roles_and_names() -> None:
    auth = Auth("s3cret", "look")
    assert auth.role_of("s3cret") == ADMIN and auth.role_of("look") == VIEWER
    assert auth.role_of("s3cre") is None and Auth(None, None).role_of("") is None
    assert not Auth(None, "look").can_act and Auth(None, "look").enabled
    cookie = auth.session("a", ADMIN)
    assert auth.csrf_ok(cookie, auth.csrf(cookie))
    assert not auth.csrf_ok(cookie, auth.csrf(auth.session("b", ADMIN)))
    assert not auth.csrf_ok(None, auth.csrf(cookie)) and not auth.csrf_ok("x", "")
    assert valid_name("ops-alice@example.com") and valid_name("o'brien@corp.example")
    assert not valid_name("a\nb") and not valid_name("") and not valid_name("\u0430lice")


def test_refused_logins_lock_an_address_out_then_let_it_try_again() -> None:
    throttle = LoginThrottle(limit=3, window=60, lockout=120)
    assert not throttle.refused("10.0.0.7", now=0) and not throttle.refused("10.0.0.7", now=1)
    assert throttle.locked_for("10.0.0.7", now=2) == 0
    assert throttle.refused("10.0.0.7", now=2)  # the third within the window locks it
    assert throttle.locked_for("10.0.0.7", now=3) == 119
    assert throttle.locked_for("10.0.0.8", now=3) == 0  # per address
    assert throttle.locked_for("10.0.0.7", now=122) == 0  # over
    for t in (200, 270, 340):  # refusals further apart than the window never lock
        assert not throttle.refused("10.0.0.9", now=t)
    assert not hasattr(throttle, "succeeded")  # a viewer's own login must not reset it
    small = LoginThrottle(limit=2, addresses=2)
    for address in ("a", "b", "c"):
        small.refused(address, now=0)
    assert not small.refused("a", now=1)  # forgotten: only two addresses are kept
    flood = LoginThrottle(limit=1, addresses=100)
    for n in range(1000):  # a flood of addresses, each locked at once: memory stays bounded
        assert flood.refused(f"2001:db8::{n:x}", now=0)
    assert len(flood._locked) == 100 and flood.locked_for("2001:db8::3e7", now=1) > 0


def _through(proxied: Proxied, peer: str, headers: dict[str, str]) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def app(scope: dict[str, Any], *_: Any) -> None:
        seen.update(scope)

    proxied.app = app
    scope = {
        "type": "http",
        "client": (peer, 5000),
        "scheme": "http",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    asyncio.run(proxied(scope, None, None))
    return seen


def test_the_proxy_is_believed_only_from_its_addresses() -> None:
    proxied = Proxied(
        None,  # type: ignore[arg-type]
        [ipaddress.ip_network("10.0.0.2"), ipaddress.ip_network("fd00::/8")],
        "X-Forwarded-User",
    )
    said = {"X-Forwarded-User": "alice", "X-Forwarded-For": "203.0.113.9, 10.0.0.2"}
    said["X-Forwarded-Proto"] = "https"
    scope = _through(proxied, "10.0.0.2", said)
    assert scope[PROXY_USER] == "alice" and scope["client"] == ("203.0.113.9", 0)
    assert scope["scheme"] == "https"
    scope = _through(proxied, "10.0.0.3", said)  # straight to the port: nobody
    assert scope[PROXY_USER] is None and scope["client"] == ("10.0.0.3", 5000)
    assert scope["scheme"] == "http"
    scope = _through(proxied, "fd00::1", {"X-Forwarded-User": "bob\nadmin"})
    assert scope[PROXY_USER] is None and scope[VOUCHING]  # no name: nobody, not a typed one
    for hop, client in (("203.0.113.9:54321", "203.0.113.9"), ("[2001:db8::1]:443", "2001:db8::1"),
                        ("2001:db8::1", "2001:db8::1")):  # fmt: skip
        said = {"X-Forwarded-For": f"{hop}, 10.0.0.2:9000"}
        assert _through(proxied, "10.0.0.2", said)["client"] == (client, 0), hop
    unknown = _through(proxied, "10.0.0.2", {"X-Forwarded-For": "unknown, 203.0.113.9"})
    assert unknown["client"] == ("203.0.113.9", 0)
    garbled = _through(proxied, "10.0.0.2", {"X-Forwarded-For": "203.0.113.9, garbage"})
    assert garbled["client"] == ("10.0.0.2", 5000)  # the chain ends: the proxy's own
    direct = _through(proxied, "127.0.0.1", {"X-Forwarded-For": "203.0.113.9"})
    assert direct[FORWARDED] and not direct[VOUCHING] and direct["client"] == ("127.0.0.1", 5000)
    assert _through(Proxied(None, [], None), "10.0.0.2", said)[PROXY_USER] is None  # type: ignore[arg-type]


def test_start_up_refuses_a_console_nobody_or_everybody_could_read() -> None:
    base = {"ARCHIVER_DATABASE_URL": "postgresql://h/db"}

    def access(host: str = "127.0.0.1", **env: str) -> str:
        return check_access(Settings.from_env({**base, **env}), host)

    with pytest.raises(ConfigError, match="nobody could read it"):
        access()
    with pytest.raises(ConfigError, match="beyond this machine"):
        access("0.0.0.0", ARCHIVER_CONSOLE_PUBLIC_READ="true")
    with pytest.raises(ConfigError, match="needs ARCHIVER_CONSOLE_PROXY_ADDRESSES"):
        access(ARCHIVER_CONSOLE_PROXY_HEADER="X-Forwarded-User")
    with pytest.raises(ConfigError, match="fewer than 16 characters"):
        access(ARCHIVER_CONSOLE_VIEWER_TOKEN="short")
    with pytest.raises(ConfigError, match="is the admin token"):
        access(ARCHIVER_CONSOLE_VIEWER_TOKEN="x" * 20, ARCHIVER_CONSOLE_ADMIN_TOKEN="x" * 20)
    with pytest.raises(ConfigError, match="with a reverse proxy"):
        access(ARCHIVER_CONSOLE_PUBLIC_READ="true", ARCHIVER_CONSOLE_PROXY_ADDRESSES="10.0.0.2")
    assert access(ARCHIVER_CONSOLE_PUBLIC_READ="true") == "reading open to whoever reaches it"
    assert "viewer token" in access("0.0.0.0", ARCHIVER_CONSOLE_VIEWER_TOKEN="v" * 16)
    assert "x-forwarded-user header" in access(
        "0.0.0.0",
        ARCHIVER_CONSOLE_PROXY_HEADER="X-Forwarded-User",
        ARCHIVER_CONSOLE_PROXY_ADDRESSES="10.0.0.2",
    )
    for variable, bad in (
        ("ARCHIVER_CONSOLE_PROXY_ADDRESSES", "10.0.0.300"),
        ("ARCHIVER_CONSOLE_PROXY_HEADER", "X User"),
        ("ARCHIVER_CONSOLE_ROOT_PATH", "archiver"),
        ("ARCHIVER_CONSOLE_ROOT_PATH", "/a/../b"),
        ("ARCHIVER_CONSOLE_ROOT_PATH", "/a?b"),
    ):
        with pytest.raises(ConfigError, match=variable):
            Settings.from_env({**base, variable: bad})
    assert Settings.from_env({**base, "ARCHIVER_CONSOLE_ROOT_PATH": "/ops/archiver/"}).console_root_path == "/ops/archiver"  # fmt: skip


def test_an_action_sends_the_browser_back_only_within_the_console() -> None:
    def back(path: str, root: str = "") -> str:
        scope = {"type": "http", "root_path": root, "path": "/", "headers": []}
        return _back(Request(scope), path)

    assert back("/archive/public.orders") == "/archive/public.orders"
    assert back("/archiver/jobs", "/archiver") == "/archiver/jobs"
    for elsewhere in ("//evil.example/", "https://evil.example/", "/\\evil.example", "jobs"):
        assert not _local_path(elsewhere) and back(elsewhere) == "/"
    assert back("/other-app/admin", "/archiver") == "/archiver/"  # not this console's


def test_binds() -> None:
    assert parse_bind("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_bind("[::1]:9000") == ("::1", 9000)
    assert is_loopback("::1") and is_loopback("localhost") and not is_loopback("0.0.0.0")


def test_foreign_characters_in_a_cookie_or_token_are_refused_not_errors() -> None:
    auth = Auth("s3cret")
    cookie = auth.session("a", ADMIN)
    assert auth.who("1.é.ü.x") is None and auth.who("²²².admin.00.ab") is None
    assert auth.who("a.b.c") is None and auth.who("....") is None
    assert not auth.csrf_ok(cookie, "é")
