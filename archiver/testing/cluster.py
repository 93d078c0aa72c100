"""A PostgreSQL cluster of one's own, for what needs a server it may restart (the CDC
test, the soak) and for the whole suite (`python -m archiver.testing.cluster -- CMD`, what
`make test` runs): initdb and pg_ctl from the machine's PostgreSQL, as the `postgres`
user when run as root, its files in memory where the machine has room there.

Why in memory: every test makes its database from the tests' template and drops it, and
on a disk each CREATE DATABASE and DROP costs the kernel an order of magnitude more CPU
than in /dev/shm, with fsync on or off (docs/development.md)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from archiver.testing.services import free_port

MEMORY = Path("/dev/shm")
MEMORY_NEEDED = 2 << 30  # free bytes there for a cluster's files to go there


def _folder() -> str | None:
    """Where a cluster's files go: in memory when /dev/shm has room (a container's is
    often 64 MB), else the temporary directory."""
    try:
        usage = shutil.disk_usage(MEMORY)
    except OSError:
        return None
    return str(MEMORY) if usage.free >= MEMORY_NEEDED and os.access(MEMORY, os.W_OK) else None


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
        # Not under pytest's tmp dir: that is private to root, and PostgreSQL refuses to
        # run as root, so the server runs as `postgres` in a directory it owns.
        self.root = Path(tempfile.mkdtemp(prefix="archiver-pg-", dir=_folder()))
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


def main(argv: list[str]) -> int:
    """`python -m archiver.testing.cluster -- CMD...`: CMD run with ARCHIVER_TEST_ADMIN_URL
    naming a cluster of its own (autovacuum off, as on this project's CI server), stopped
    and deleted after; CMD run as it is when ARCHIVER_TEST_ADMIN_URL is set already, or
    when the machine has no initdb (the tests then use 127.0.0.1:5432). SIGINT reaches
    CMD from the terminal, SIGTERM is passed on: the cluster is stopped after CMD ends."""
    command = argv[1:] if argv[:1] == ["--"] else argv
    if not command:
        print("usage: python -m archiver.testing.cluster -- COMMAND...", file=sys.stderr)
        return 2
    env = dict(os.environ)
    cluster = None
    if not env.get("ARCHIVER_TEST_ADMIN_URL"):
        try:
            which_pg_bin("initdb")
        except RuntimeError as exc:
            print(f"archiver.testing.cluster: {exc}; using 127.0.0.1:5432", file=sys.stderr)
        else:
            cluster = PrivateCluster()
            cluster.settings = ["autovacuum=off", "max_connections=200"]
    try:
        if cluster is not None:
            try:
                cluster.init()
                cluster.start()
            except subprocess.CalledProcessError as exc:
                said = (exc.stderr or b"").decode(errors="replace").strip()
                print(f"archiver.testing.cluster: {exc}: {said}", file=sys.stderr)
                return 1
            env["ARCHIVER_TEST_ADMIN_URL"] = cluster.admin_url
        proc = subprocess.Popen(command, env=env)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal sends it to CMD too
        signal.signal(signal.SIGTERM, lambda sig, _: proc.send_signal(sig))
        code = proc.wait()
        return 128 - code if code < 0 else code  # killed by a signal: 128 + its number
    finally:
        if cluster is not None:
            try:
                cluster.stop()
            except subprocess.CalledProcessError as exc:  # never in place of CMD's status
                print(f"archiver.testing.cluster: stopping: {exc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
