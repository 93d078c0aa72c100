"""A PostgreSQL cluster of one's own, for what needs a server it may restart (the CDC
test, the soak): initdb and pg_ctl from the machine's PostgreSQL, as the `postgres` user
when run as root."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from archiver.testing.services import free_port


def which_pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    raise RuntimeError(f"{name} not found (install PostgreSQL server binaries)")


class PrivateCluster:
    """A PostgreSQL cluster of the test's own (initdb/pg_ctl on a free port), for tests
    that restart the server. Runs as the `postgres` user when the tests run as root."""

    def __init__(self) -> None:
        import tempfile

        # Not under pytest's tmp dir: that is private to root, and PostgreSQL refuses to
        # run as root, so the server runs as `postgres` in a directory it owns.
        self.root = Path(tempfile.mkdtemp(prefix="archiver-pg-"))
        self.data = self.root / "pgdata"
        self.port = free_port()
        self.as_owner: list[str] = []
        self.settings: list[str] = []  # extra `-c name=value` server settings
        if os.geteuid() == 0:
            self.as_owner = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.root, "postgres")

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _pg_ctl(self, *args: str) -> None:
        subprocess.run(
            [
                *self.as_owner,
                which_pg_bin("pg_ctl"),
                "-D",
                str(self.data),
                "-w",
                "-t",
                "60",
                "-l",
                str(self.data.parent / "server.log"),
                *args,
            ],
            check=True,
            capture_output=True,
        )

    def init(self) -> None:
        subprocess.run(
            [
                *self.as_owner,
                which_pg_bin("initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
            ],
            check=True,
            capture_output=True,
        )

    @property
    def _options(self) -> str:
        extra = "".join(f" -c {setting}" for setting in self.settings)
        return f"-p {self.port} -c listen_addresses=127.0.0.1 -k /tmp -c fsync=off{extra}"

    def start(self) -> None:
        self._pg_ctl("-o", self._options, "start")

    def restart(self) -> None:
        self._pg_ctl(
            "-m",
            "fast",
            "-o",
            self._options,
            "restart",
        )

    def halt(self) -> None:
        """Stop the server, keeping its files (start() brings it back)."""
        self._pg_ctl("-m", "fast", "stop")

    def stop(self) -> None:
        """Stop the server and delete its files."""
        try:
            self._pg_ctl("-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
