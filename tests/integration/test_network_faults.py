"""The network between the services and PostgreSQL misbehaving while both ends stay up
(archiver.testing.faultproxy between them): flows frozen for good, all traffic paused,
connections reset, new ones refused, every byte slowed. Each service keeps its bounds
-- SIGTERM stops it within its shutdown deadline and a few seconds, whatever the flows do
-- and every row is archived once when the network heals."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from archiver.testing.faultproxy import FaultProxy
from archiver.testing.reference import seed_orders
from tests.support import (
    fast_env,
    run_cli,
    start_worker,
    wait_for_status,
    wait_for_text,
    wait_until,
)
from tests.support.crash import old_ids
from tests.support.harness import Harness
from tests.support.network import (
    BOUND,
    CUTOFF,
    FAULTS,
    proxied_env,
    proxied_pg,
    stopped_within,
)


@pytest.fixture
def proxy(h: Harness) -> Iterator[FaultProxy]:
    with proxied_pg(h) as p:
        yield p


def paced_job(h: Harness, *, chunk_rows: int, rate: int) -> tuple[set[int], str, Path]:
    """A move of the reference orders paced to last a few seconds: (the ids it moves,
    its job id, where its worker's log goes)."""
    seed_orders(h.url, 20_000)
    job = run_cli(h.env, "enqueue", "--table", "orders", "--before", CUTOFF, "--chunk-rows",
                  str(chunk_rows), "--max-rows-per-second", str(rate))  # fmt: skip
    assert job.returncode == 0, job.stderr
    return old_ids(h.url, CUTOFF), job.stdout.strip(), h.tmp / "worker.log"


def test_an_idle_worker_whose_flows_froze_stops_within_its_deadline(
    h: Harness, proxy: FaultProxy
) -> None:
    log = h.tmp / "worker.log"
    worker = start_worker(proxied_env(h, proxy), log=log)
    wait_for_text(log, "started")
    wait_until(lambda: proxy.open_flows >= 2, 10, what="the pool's and LISTEN's sessions")
    assert proxy.freeze() >= 2
    time.sleep(1)  # the next claim now waits on a frozen flow
    took = stopped_within(worker, log, BOUND)
    print(f"idle worker, flows frozen: stopped {took:.1f}s after SIGTERM")
    assert "stopped" in log.read_text()


def test_a_worker_mid_job_whose_flows_froze_stops_and_the_job_completes_once(
    h: Harness, proxy: FaultProxy
) -> None:
    expected, job_id, log = paced_job(h, chunk_rows=500, rate=2000)
    worker = start_worker(proxied_env(h, proxy), log=log)
    wait_for_text(log, "chunk 3 of", timeout=60)
    assert proxy.freeze() >= 3  # the pool's, LISTEN's and the job's source session
    time.sleep(1)
    took = stopped_within(worker, log, BOUND)
    print(f"worker mid-job, flows frozen: stopped {took:.1f}s after SIGTERM")
    # healed: a worker on a flow of its own rescues the job once the lease runs out
    rescuer = start_worker(fast_env(h.env), log=h.tmp / "rescuer.log")
    wait_for_status(h.url, job_id, "completed", timeout=120)
    rescuer.terminate()
    rescuer.wait(30)
    h.exactly_once(expected)


def test_paused_reset_refused_and_slow_flows_delay_a_job_and_lose_nothing(
    h: Harness, proxy: FaultProxy
) -> None:
    """One worker through every fault but a freeze, in turn, while its job runs: it
    carries on by itself once each heals, and every row is archived once."""
    expected, job_id, log = paced_job(h, chunk_rows=400, rate=2500)
    worker = start_worker(proxied_env(h, proxy), log=log)
    said = 0

    def next_chunk() -> None:
        nonlocal said
        wait_until(lambda: log.read_text().count(" rows, ") > said, 60, what="a chunk")
        said = log.read_text().count(" rows, ")

    next_chunk()
    proxy.pause(4)  # every flow, open and new, carries nothing for 4 s
    time.sleep(4)
    next_chunk()
    assert proxy.reset() >= 2  # every open flow reset
    next_chunk()
    proxy.refuse(True)  # new connections refused, open ones reset, for 3 s
    proxy.reset()
    time.sleep(3)
    proxy.refuse(False)
    next_chunk()
    proxy.slow(0.02)  # every chunk of bytes 20 ms late
    next_chunk()
    proxy.heal()
    wait_for_status(h.url, job_id, "completed", timeout=120)
    took = stopped_within(worker, log, BOUND)
    assert took < 5, took  # the network healed: a stop as quick as ever
    h.exactly_once(expected)


def test_the_console_answers_and_stops_within_its_bounds_when_its_flows_freeze(
    h: Harness, proxy: FaultProxy
) -> None:
    """A page whose session's flow froze answers 503 within the page's bound (the next
    asks on a new session), and SIGTERM stops the console within the deadline."""
    from archiver.web.app import PAGE_SECONDS
    from tests.support.console import Console

    console = Console(h, h.tmp, proxied_env(h, proxy))
    assert console.health() == 200
    assert proxy.freeze() >= 1
    started = time.monotonic()
    status = console.health_within(2 * PAGE_SECONDS + 10)
    waited = time.monotonic() - started
    print(f"console, flows frozen: a page answered {status} after {waited:.1f}s")
    assert status in (200, 503) and waited < 2 * PAGE_SECONDS + 5, (status, waited)
    wait_until(lambda: console.health() == 200, 30, what="a page on a new session")
    assert proxy.freeze() >= 1  # and again, for the stop
    took = stopped_within(console.proc, console.log, BOUND)
    print(f"console, flows frozen: stopped {took:.1f}s after SIGTERM")


def proxied_serve(h: Harness, proxy: FaultProxy) -> tuple[Any, Path, list[str], float]:
    """serve through the proxy over 2,000 orders, some archived, its statement timeout
    15 s: (its process, its log, psql's count of orders, what a count may take at most:
    a catalog statement on the definitions database waits its timeout and a margin)."""
    from archiver.serve.upstream import ANSWER_MARGIN
    from archiver.testing.services import free_port
    from tests.support import archiver_cmd, start_process
    from tests.support.serve import PASSWORD

    seed_orders(h.url, 2_000)
    h.archive("--table", "orders", "--before", "2024-12-31T12:00:00Z")
    port, log, timeout = free_port(), h.tmp / "serve.log", 15
    env = proxied_env(h, proxy, ARCHIVER_SERVE_PASSWORD=PASSWORD,
                      ARCHIVER_SERVE_STATEMENT_TIMEOUT=str(timeout))  # fmt: skip
    serve = start_process(archiver_cmd("serve", "--bind", f"127.0.0.1:{port}"), env, log)
    wait_for_text(log, "listening on", timeout=60)
    dsn = f"postgresql://archiver:{PASSWORD}@127.0.0.1:{port}/archive?sslmode=disable"
    count = ["psql", "-X", "-At", dsn, "-c", "SELECT count(*) FROM orders"]
    return serve, log, count, timeout + ANSWER_MARGIN + 5


def test_serve_answers_and_stops_within_its_bounds_when_its_flows_freeze(
    h: Harness, proxy: FaultProxy
) -> None:
    """serve's sessions (the catalog's, the definitions database's, the audit's) on
    frozen flows: a statement is answered or refused in one line within its bound, the
    next one answers on new sessions, and SIGTERM stops serve within the deadline."""
    serve, log, count, bound = proxied_serve(h, proxy)
    first = subprocess.run(count, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0 and int(first.stdout) > 0, first.stderr
    assert proxy.freeze() >= 2
    started = time.monotonic()
    done = subprocess.run(count, capture_output=True, text=True, timeout=2 * bound)
    waited = time.monotonic() - started
    said = (done.stdout or done.stderr).strip()
    print(f"serve, flows frozen: a count answered in {waited:.1f}s: {said}")
    assert waited < bound, waited  # answered, or refused in one line
    assert done.returncode == 0 or len(done.stderr.splitlines()) == 1, done.stderr
    again = subprocess.run(count, capture_output=True, text=True, timeout=2 * bound)
    assert again.returncode == 0 and int(again.stdout) > 0, again.stderr  # on new sessions
    assert proxy.freeze() >= 1  # and again, for the stop
    took = stopped_within(serve, log, BOUND)
    print(f"serve, flows frozen: stopped {took:.1f}s after SIGTERM")


def test_the_console_answers_through_a_pause_a_reset_a_refusal_and_slowness(
    h: Harness, proxy: FaultProxy
) -> None:
    """Through each fault a page is answered (200, or 503 while PostgreSQL is out of
    reach) within the page's bound, pages answer 200 once it heals, and SIGTERM then
    stops the console as quickly as ever."""
    from archiver.web.app import PAGE_SECONDS
    from tests.support.console import Console

    console = Console(h, h.tmp, proxied_env(h, proxy))
    assert console.health() == 200
    for name, fault in FAULTS.items():
        fault(proxy)
        started = time.monotonic()
        status = console.health_within(2 * PAGE_SECONDS + 10)
        waited = time.monotonic() - started
        print(f"console, {name}: a page answered {status} after {waited:.1f}s")
        assert status in (200, 503) and waited < 2 * PAGE_SECONDS + 5, (name, status, waited)
        proxy.heal()
        wait_until(lambda: console.health() == 200, 30, what=f"a page after {name}")
    took = stopped_within(console.proc, console.log, BOUND)
    assert took < 5, took


def test_serve_answers_through_a_pause_a_reset_a_refusal_and_slowness(
    h: Harness, proxy: FaultProxy
) -> None:
    """Through each fault a count through serve is answered, or refused in one line,
    within its bound; once it heals the count is exact again; SIGTERM then stops serve
    as quickly as ever."""
    serve, log, count, bound = proxied_serve(h, proxy)
    rows = h.value("SELECT sum(row_count) FROM archive_files")

    def counted() -> bool:
        done = subprocess.run(count, capture_output=True, text=True, timeout=2 * bound)
        return done.returncode == 0 and done.stdout.strip() == str(rows)

    assert counted()
    for name, fault in FAULTS.items():
        fault(proxy)
        started = time.monotonic()
        done = subprocess.run(count, capture_output=True, text=True, timeout=2 * bound)
        waited = time.monotonic() - started
        said = (done.stdout or done.stderr).strip()
        print(f"serve, {name}: a count answered in {waited:.1f}s: {said}")
        assert waited < bound, (name, waited)
        assert done.stdout.strip() == str(rows) or len(done.stderr.splitlines()) == 1, done
        proxy.heal()
        wait_until(counted, 60, what=f"an exact count after {name}")
    took = stopped_within(serve, log, BOUND)
    assert took < 5, took
