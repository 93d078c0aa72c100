"""Every SAS serve's Iceberg REST catalog vended, made void when one of its holders may
no longer read every table of the container (a REVOKE, row security applying to them,
a table they may not read archived there, their role dropped, NOLOGIN, past its VALID
UNTIL, or CONNECT taken away): the holders of the last hour are asked again every SWEEP_SECONDS, and
at the first who may not, the stored access policy every SAS names is replaced
(archiver.serve.vending) and the revocation recorded in archive_reads. A policy cannot
void one SAS of many: everyone's stops working, and engines load again for a new one.

The holders are this process's (those it vended to) and, as it starts, those who loaded
a table through the door since the last revocation, in the last hour, as archive_reads
has them: a serve started again knows who may still hold one."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from archiver.errors import first_line
from archiver.serve.audit import Read, ReadAudit
from archiver.serve.vending import SAS_SECONDS, Vending
from archiver.store import read_audit

log = logging.getLogger(__name__)

SWEEP_SECONDS = 2.0  # how often the holders are asked again (a REVOKE mirrored: +2 s)
REVOKED = "revoke vended credentials"  # the audit row's statement, and its reason after


class Revoker:
    """The holders of a live SAS and the thread that asks after them."""

    def __init__(
        self,
        vending: Vending,
        audit: ReadAudit,
        door: str,
        first_lost: Callable[[list[str]], tuple[str, str] | None],
        configured_user: str | None,
    ) -> None:
        self.vending, self.audit, self.door = vending, audit, door
        self._first_lost = first_lost  # the first of them who may no longer, and why
        self._configured = configured_user  # reads every table: never asked
        self._holders: dict[str, float] = {}  # role -> when its latest SAS expires
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="serve-revoker", daemon=True)
        self._thread.start()

    def held(self, role: str) -> None:
        """`role` was given a SAS just now."""
        with self._lock:
            self._holders[role] = time.time() + SAS_SECONDS

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        remembered = self.vending.location.scheme != "az"  # nothing vended on file storage
        while not self._stop.wait(SWEEP_SECONDS):
            try:
                if not remembered:
                    self._remember()
                    remembered = True
                self._sweep()
            except Exception as exc:  # the next pass tries again
                log.warning("serve: the holders of vended credentials could not be checked: "
                            "%s", first_line(exc))  # fmt: skip

    def _remember(self) -> None:
        with self.vending.catalog_session("the vended credentials' holders") as conn:
            rows = read_audit.rest_holders(conn, self.door, REVOKED, SAS_SECONDS)
        with self._lock:
            for role, at in rows:
                if role != self._configured:
                    self._holders.setdefault(role, at.timestamp() + SAS_SECONDS)

    def _sweep(self) -> None:
        with self._lock:
            now = time.time()
            self._holders = {r: t for r, t in self._holders.items() if t > now}
            holders = sorted(self._holders)
        if holders and (lost := self._first_lost(holders)) is not None:
            self._revoke(*lost)

    def _revoke(self, role: str, why: str) -> None:
        read = Read(role, None, None, None, f"{REVOKED}: {why}", door=self.door)
        try:
            policy = self.vending.revoke()
        except Exception:
            self.audit.finish(read, "XX000")
            raise
        with self._lock:
            self._holders.clear()  # every SAS is void: nobody holds one now
        self.audit.finish(read, "ok")
        log.info("serve: vended credentials revoked (%s): a SAS now names %s", why, policy)
