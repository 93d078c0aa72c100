"""The requests archiver sends to Azure for what Azurite does not emulate (it answers
501 to per-blob immutability policies and legal holds, and ignores encryption scopes),
recorded by a transport in place of the network: beside, never instead of, the Azurite
tests of what it does emulate (tests/integration/test_tiers.py, tests/integration/test_purge.py)."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from pathlib import Path
from typing import Any

from azure.core.pipeline.transport import HttpResponse, HttpTransport

from archiver.config import Settings
from archiver.storage.azure import AzureStorage
from archiver.storage.seam import file_tags, put_file
from archiver.testing.services import AZURITE_KEY

CONNECTION = (
    f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={AZURITE_KEY};"
    "BlobEndpoint=http://127.0.0.1:9/devstoreaccount1;"
)


class _Reply(HttpResponse):
    def __init__(self, request: Any, status: int, headers: dict[str, str]) -> None:
        super().__init__(request, None)
        self.status_code, self.headers, self.reason = status, headers, "OK"
        self.content_type = None

    def body(self) -> bytes:
        return b""


class Recording(HttpTransport):  # type: ignore[type-arg]
    """Answers every request as Azure would when it succeeds, and keeps it."""

    def __init__(self, md5: str = "") -> None:
        self.requests: list[Any] = []
        self.md5 = md5

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *args: Any) -> None:
        pass

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def send(self, request: Any, **kwargs: Any) -> _Reply:
        self.requests.append(request)
        created = request.method == "PUT" and (
            "comp=block" in request.url or "comp=" not in request.url  # block, blocklist
        )
        headers = {
            "Content-Length": "5",
            "Content-MD5": self.md5,
            "x-ms-blob-type": "BlockBlob",
            "Last-Modified": "Wed, 25 Nov 2026 07:00:00 GMT",
            "ETag": '"0x1"',
        }
        return _Reply(request, 201 if created else 200, headers)

    def headers(self, comp: str) -> dict[str, str]:
        """The headers of the one request of `comp` (blocklist, immutabilityPolicies…)."""
        [found] = [r for r in self.requests if f"comp={comp}&" in r.url + "&"]
        return {k.lower(): v for k, v in found.headers.items()}


def storage(transport: Recording, **settings: str) -> AzureStorage:
    env = {
        "ARCHIVER_DATABASE_URL": "postgresql://u@127.0.0.1/db",
        "ARCHIVER_STORAGE_URL": "az://archive/prefix",
        "AZURE_STORAGE_CONNECTION_STRING": CONNECTION,
        **settings,
    }
    s = Settings.from_env(env)
    return AzureStorage(s.storage_location(), s, transport)


def test_a_file_is_committed_once_with_its_tier_tags_and_encryption_scope(tmp_path: Path) -> None:
    local = tmp_path / "f.parquet"
    local.write_bytes(b"hello")
    md5 = base64.b64encode(hashlib.md5(b"hello").digest()).decode()
    transport = Recording(md5)
    azure = storage(transport, ARCHIVER_ACCESS_TIER="Cold", ARCHIVER_ENCRYPTION_SCOPE="cmk-scope")
    tags = file_tags("public.<orders>", "j1", "2020-01-01T00:00:00+00:00", None)
    put_file(azure, "prefix/t/f.parquet", local, tags)
    block = transport.headers("block")
    commit = transport.headers("blocklist")
    assert block["x-ms-encryption-scope"] == "cmk-scope"
    assert commit["x-ms-encryption-scope"] == "cmk-scope"
    assert commit["if-none-match"] == "*"  # never over an existing name
    assert commit["x-ms-access-tier"] == "Cold"
    sent = dict(pair.split("=") for pair in commit["x-ms-tags"].split("&"))
    assert sent["archiver-table"] == "public._orders_"  # a tag value's own characters only
    assert sent["archiver-cutoff-max"] == "infinity"


def test_protect_sets_an_unlocked_policy_and_a_legal_hold() -> None:
    transport = Recording()
    azure = storage(transport)
    until = dt.datetime(2031, 1, 1, tzinfo=dt.UTC)
    azure.protect("prefix/t/f.parquet", until, True)
    policy = transport.headers("immutabilityPolicies")
    assert policy["x-ms-immutability-policy-until-date"] == "Wed, 01 Jan 2031 00:00:00 GMT"
    assert policy["x-ms-immutability-policy-mode"] == "Unlocked"
    assert transport.headers("legalhold")["x-ms-legal-hold"] == "true"


def test_rehydration_asks_for_the_tier_and_priority() -> None:
    transport = Recording()
    storage(transport).set_tier("prefix/t/f.parquet", "Cool", "High")
    tier = transport.headers("tier")
    assert (tier["x-ms-access-tier"], tier["x-ms-rehydrate-priority"]) == ("Cool", "High")
