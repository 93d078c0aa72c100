"""The storage credentials serve's Iceberg REST catalog vends with a load: a read-only
SAS of the archive's container that expires within SAS_SECONDS, in the forms engines
read it (pyiceberg's `adls.*` properties, an `adls.sas-token.<account>.dfs.core.windows.net`
key, a connection string naming the blob endpoint). A flat-namespace account's SAS
cannot be narrower than a container; who may be given one is the catalog's decision
(archiver.serve.rest).

Each SAS names a stored access policy of the container, `archiver-read-<n>`, which
holds its permissions (read, list); the SAS holds its own start and expiry. `revoke`
replaces that policy with `archiver-read-<n+1>`: every SAS vended before stops working
at once (Azure says a policy's change takes up to 30 s to be in force), and each engine
loads its table again for a new one. The container's other stored access policies are
kept. Changes of the policy are made under an advisory lock of the catalog database, so
two serve processes never undo each other's revocation."""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg

from archiver.config import Settings, connection_string_parts
from archiver.serve.watchdog import WATCHDOG

SAS_SECONDS = 3600
POLICY = "archiver-read-"
SLOTS = 5  # stored access policies a container holds, at most (Azure's limit)
_NUMBERED = re.compile(re.escape(POLICY) + r"(\d+)$")


class NotVended(Exception):
    """No credentials can be vended here: one line saying why."""


class Vending:
    """The archive container's read policy and the SAS signed under it."""

    def __init__(self, settings: Settings, catalog_url: str) -> None:
        self.settings = settings
        self.catalog_url = catalog_url  # the catalog database: its advisory lock
        self.location = settings.storage_location()

    def credentials(self) -> list[dict[str, Any]]:
        """The REST spec's `storage-credentials` for the archive's storage: one SAS for
        its container; none on file storage (the engine reads the paths itself)."""
        from azure.storage.blob import BlobServiceClient, generate_container_sas

        if self.location.scheme != "az":
            return []
        account, key = self._account_key()
        policy = self._current()
        now = dt.datetime.now(dt.UTC)
        expires = now + dt.timedelta(seconds=SAS_SECONDS)
        sas = generate_container_sas(
            account,
            self.location.container,
            account_key=key,
            policy_id=policy,  # its permissions: read and list
            start=now - dt.timedelta(minutes=1),  # a reader's clock a little behind
            expiry=expires,  # Azure checks it; Azurite (3.37) does not once a policy is named
        )
        endpoint = BlobServiceClient.from_connection_string(
            self.settings.azure_connection_string or ""
        ).url.rstrip("/")
        config = {
            "adls.connection-string": f"BlobEndpoint={endpoint};SharedAccessSignature={sas}",
            "adls.account-name": account,
            f"adls.sas-token.{account}.dfs.core.windows.net": sas,
            "adls.sas-token-expires-at-ms": str(int(expires.timestamp() * 1000)),
        }
        prefix = f"abfss://{self.location.container}@{account}.dfs.core.windows.net/"
        return [{"prefix": prefix, "config": config}]

    def revoke(self) -> str | None:
        """Every SAS vended so far made void: the policy they name replaced by a new one
        (its name), or None where none was ever made."""
        if self.location.scheme != "az":
            return None
        with self._lock():
            acl = self._acl()
            return self._write(acl, max(acl.ours) + 1) if acl.ours else None

    def in_force(self) -> tuple[str | None, int]:
        """(the policy a SAS names now, or None before the first; how many of the
        container's stored access policies are others')."""
        acl = self._acl()
        return (f"{POLICY}{max(acl.ours)}" if acl.ours else None), len(acl.theirs)

    @contextlib.contextmanager
    def catalog_session(self, what: str, seconds: float = 5.0) -> Iterator[psycopg.Connection[Any]]:
        """A session of its own on the catalog database, its waits bounded."""
        with (
            psycopg.connect(self.catalog_url, autocommit=True, connect_timeout=5) as conn,
            WATCHDOG.watch(conn.pgconn.socket, seconds, what),
        ):
            yield conn

    # -- the container's stored access policies ---------------------------------------

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """The catalog database's advisory lock on the container's policies, held while
        they change (another serve may change them beside this one)."""
        with self.catalog_session("the vending policy's lock", 30.0) as conn:
            conn.execute("SELECT pg_advisory_lock(hashtext(%s))",
                         (f"{POLICY}{self.location.container}",))  # fmt: skip
            yield

    def _account_key(self) -> tuple[str, str]:
        parts = connection_string_parts(self.settings.azure_connection_string or "")
        if not parts.get("AccountKey"):
            raise NotVended(
                "no credentials vended: serve signs a SAS with the account key, and "
                "AZURE_STORAGE_CONNECTION_STRING has none"
            )
        return parts["AccountName"], parts["AccountKey"]

    def _current(self) -> str:
        """The policy a SAS names now: read from the container each time (another serve
        may have revoked since), made where there is none."""
        acl = self._acl()
        if len(acl.ours) == 1:
            return f"{POLICY}{acl.ours[0]}"
        with self._lock():  # none yet (or several, made by hand): one, made here
            acl = self._acl()
            if len(acl.ours) == 1:
                return f"{POLICY}{acl.ours[0]}"
            return self._write(acl, max(acl.ours, default=0) + 1)

    def _container(self) -> Any:
        from azure.storage.blob import ContainerClient

        return ContainerClient.from_connection_string(
            self.settings.azure_connection_string or "",
            self.location.container,
            connection_timeout=5,  # a load waits on these: a dead flow fails it in seconds
            read_timeout=10,
            retry_total=1,
        )

    def _acl(self) -> _Acl:
        found = self._container().get_container_access_policy()
        identifiers = found["signed_identifiers"]
        return _Acl(
            found["public_access"],
            {p.id: p.access_policy for p in identifiers if not _NUMBERED.match(p.id)},
            sorted(int(m.group(1)) for p in identifiers if (m := _NUMBERED.match(p.id))),
        )

    def _write(self, acl: _Acl, number: int) -> str:
        """The container's policies set to others' and archiver-read-<number> alone (its
        public access as it was: Azure sets it with them)."""
        from azure.storage.blob import AccessPolicy, ContainerSasPermissions

        if len(acl.theirs) >= SLOTS:
            raise NotVended(
                f"no credentials vended: the container {self.location.container} holds "
                f"{len(acl.theirs)} stored access policies of others, Azure's limit, and a "
                "vended SAS needs one of archiver's to be revocable"
            )
        name = f"{POLICY}{number}"
        policy = AccessPolicy(permission=ContainerSasPermissions(read=True, list=True))
        self._container().set_container_access_policy(
            signed_identifiers={**acl.theirs, name: policy}, public_access=acl.public_access
        )
        return name


@dataclass(frozen=True)
class _Acl:
    """A container's public access and stored access policies: others' (id -> policy),
    and the numbers of archiver's."""

    public_access: Any
    theirs: dict[str, Any]
    ours: list[int]
