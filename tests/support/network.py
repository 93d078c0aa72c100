"""What the network-fault tests share (tests/integration/test_network_faults*.py): the
fault proxy before the test's PostgreSQL, a service's environment through it, the
bound a stop keeps, and each fault but a freeze."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from archiver.testing.faultproxy import FaultProxy, proxied
from tests.support import fast_env
from tests.support.harness import Harness

DEADLINE = 4  # ARCHIVER_SHUTDOWN_DEADLINE of these tests' services
BOUND = DEADLINE + 10  # what a stop may take at most, whatever the network does
CUTOFF = "2024-12-25"


def through(proxy: FaultProxy, url: str) -> str:
    """`url` with its host and port the proxy's."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{proxy.port}"))


@contextmanager
def proxied_pg(h: Harness) -> Iterator[FaultProxy]:
    """A fault proxy before the test's PostgreSQL."""
    parts = urlsplit(h.url)
    with proxied(parts.hostname or "127.0.0.1", parts.port or 5432) as p:
        yield p


def proxied_env(h: Harness, proxy: FaultProxy, **extra: str) -> dict[str, str]:
    return fast_env(
        h.env,
        ARCHIVER_DATABASE_URL=through(proxy, h.url),
        ARCHIVER_SHUTDOWN_DEADLINE=str(DEADLINE),
        **extra,
    )


def stopped_within(proc: object, log: Path, bound: float) -> float:
    """SIGTERM `proc`; the seconds it took to exit, which must be under `bound`."""
    started = time.monotonic()
    proc.terminate()  # type: ignore[attr-defined]
    try:
        code = proc.wait(bound)  # type: ignore[attr-defined]
    except Exception:
        proc.kill()  # type: ignore[attr-defined]
        raise AssertionError(
            f"still running {bound}s after SIGTERM:\n{log.read_text()[-6000:]}"
        ) from None
    took = time.monotonic() - started
    assert code == 0, log.read_text()[-3000:]
    return took


# Each fault but a freeze, in turn, as the services meet them: what it does,
# and what heals it (pause: for 4 s; refuse: new connections refused and open ones reset).
def _refused(proxy: FaultProxy) -> None:
    proxy.refuse(True)
    proxy.reset()


FAULTS: dict[str, Callable[[FaultProxy], object]] = {
    "paused": lambda p: p.pause(4),
    "reset": lambda p: p.reset(),
    "refused": _refused,
    "slow": lambda p: p.slow(0.02),
}
