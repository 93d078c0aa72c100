"""Real services the tests and the bench stand on: Azurite started from the npm package
pinned in dev/ (make install), and PostgreSQL URLs of databases on one server. Only for a
checkout of the repository: a wheel ships no Azurite."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[2]  # the repository's checkout
AZURITE_BIN = ROOT / "dev" / "node_modules" / ".bin" / "azurite-blob"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Started(Protocol):
    """A started process, as much as waiting on its port needs (a Popen, or a forked one)."""

    returncode: int | None

    def poll(self) -> int | None: ...


def wait_for_port(port: int, timeout: float = 30.0, proc: Started | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port} after {timeout}s")


class Azurite:
    """A real Azurite blob service on a free port, with its data in `location`; can be
    stopped and started again on the same port and data (outage tests)."""

    def __init__(self, location: Path) -> None:
        if not AZURITE_BIN.exists():
            raise RuntimeError(f"{AZURITE_BIN} missing: run `make test` (npm install in dev/)")
        self.location = location
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connection_string(self) -> str:
        return (
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
            f"AccountKey={AZURITE_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{self.port}/devstoreaccount1;"
        )

    @property
    def delta_options(self) -> dict[str, str]:
        """delta-rs's storage options for this Azurite."""
        return {
            "azure_storage_account_name": "devstoreaccount1",
            "azure_storage_account_key": AZURITE_KEY,
            "azure_storage_endpoint": f"http://127.0.0.1:{self.port}/devstoreaccount1",
            "allow_http": "true",
        }

    def start(self) -> None:
        self.location.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                str(AZURITE_BIN),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.port),
                "--location",
                str(self.location),
                "--skipApiVersionCheck",
                "--disableTelemetry",
                "--silent",
                "--loose",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for_port(self.port, proc=self.proc)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
