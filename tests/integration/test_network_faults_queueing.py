"""The network between what queues work -- the scheduler, a one-shot command -- and
PostgreSQL misbehaving while both ends stay up (archiver.testing.faultproxy between
them): each keeps its bounds, and queues each slot or job once or says that nothing
changed."""

from __future__ import annotations

import itertools
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from archiver.testing.faultproxy import FaultProxy
from archiver.testing.reference import seed_orders
from tests.support import Process, wait_until
from tests.support.harness import Harness
from tests.support.network import (
    BOUND,
    CUTOFF,
    DEADLINE,
    FAULTS,
    proxied_env,
    proxied_pg,
    stopped_within,
)


@pytest.fixture
def proxy(h: Harness) -> Iterator[FaultProxy]:
    with proxied_pg(h) as p:
        yield p


SLOTS = "SELECT count(*) FROM background_jobs WHERE policy_name = 'every-second'"


def every_second(h: Harness, proxy: FaultProxy) -> tuple[Process, Path]:
    """A scheduler through the proxy whose policy fires every second, two slots queued:
    (its process, its log)."""
    from tests.support import archiver_cmd, start_process

    seed_orders(h.url, 100)
    config = h.tmp / "archiver.toml"
    config.write_text(
        '[settings]\nscheduler_grace = 60\n\n[[policy]]\nname = "every-second"\n'
        'table = "public.orders"\ncolumn = "created_at"\nolder_than = "1 days"\n'
        'schedule = "* * * * * *"\nmode = "copy"\n'
    )
    log = h.tmp / "scheduler.log"
    scheduler = start_process(archiver_cmd("--config", str(config), "scheduler"),
                              proxied_env(h, proxy), log)  # fmt: skip
    wait_until(lambda: h.value(SLOTS) >= 2, 60, what="two slots queued")
    return scheduler, log


def test_the_scheduler_carries_on_after_a_pause_and_stops_within_its_bounds_when_frozen(
    h: Harness, proxy: FaultProxy
) -> None:
    """A scheduler firing every second: a pause of its flows delays slots and none is
    lost for it (the next is queued once the flows carry again); with its flows frozen,
    SIGTERM stops it within the deadline."""
    scheduler, log = every_second(h, proxy)
    proxy.pause(5)
    time.sleep(5)
    after_pause = h.value(SLOTS)
    wait_until(lambda: h.value(SLOTS) >= after_pause + 2, 30, what="slots after the pause")
    assert proxy.freeze() >= 1
    time.sleep(2)  # the next slot's INSERT waits on a frozen flow
    took = stopped_within(scheduler, log, BOUND)
    print(f"scheduler, flows frozen: stopped {took:.1f}s after SIGTERM")
    assert "scheduler stopped" in log.read_text()


@pytest.mark.parametrize(
    "args",
    [
        ("enqueue", "--table", "orders", "--before", CUTOFF),
        ("jobs",),
    ],
    ids=["enqueue", "jobs"],
)
def test_a_command_on_a_paused_network_ends_on_ctrl_c_without_changing_anything(
    h: Harness, proxy: FaultProxy, args: tuple[str, ...]
) -> None:
    """A one-shot command whose flows carry nothing (its connect or its statement
    waiting on them) ends within a few seconds of Ctrl-C, in one line, non-zero, and
    queues nothing."""
    from tests.support import archiver_cmd, start_process

    seed_orders(h.url, 100)
    log = h.tmp / "command.log"
    proxy.pause(60)
    command = start_process(archiver_cmd(*args), proxied_env(h, proxy), log)
    time.sleep(3)  # connecting, through a network that carries nothing
    assert command.poll() is None, log.read_text()
    started = time.monotonic()
    command.send_signal(signal.SIGINT)
    try:
        code = command.wait(BOUND)
    except subprocess.TimeoutExpired:
        command.kill()
        raise AssertionError(f"still running {BOUND}s after Ctrl-C: {log.read_text()}") from None
    took = time.monotonic() - started
    proxy.heal()
    said = log.read_text().strip().splitlines()
    print(f"{args[0]}, network paused: ended {took:.1f}s after Ctrl-C ({code}): {said}")
    assert code != 0 and took < DEADLINE + 3, (code, took)
    assert len(said) == 1 and "Traceback" not in said[0], said
    assert h.value("SELECT count(*) FROM background_jobs") == 0


def test_the_scheduler_queues_every_slot_once_through_a_reset_a_refusal_and_slowness(
    h: Harness, proxy: FaultProxy
) -> None:
    """A scheduler firing every second through each fault but a freeze, in turn (a pause
    has its own test above): after each heals its slots are queued again, those due while
    it could not queue coalesced into the next one it queued (a later cutoff takes their
    rows too), and SIGTERM stops it as quickly as ever."""
    scheduler, log = every_second(h, proxy)
    for name, fault in FAULTS.items():
        if name == "paused":
            continue
        fault(proxy)
        time.sleep(3)  # slots fire meanwhile
        proxy.heal()
        before = h.value(SLOTS)
        wait_until(lambda n=before: h.value(SLOTS) >= n + 2, 30, what=f"slots after {name}")
        print(f"scheduler, {name}: {h.value(SLOTS)} slots queued after it healed")
    got = [
        r[0]
        for r in h.sql(
            "SELECT slot_at FROM background_jobs WHERE policy_name = 'every-second' ORDER BY 1"
        )
    ]
    gaps = [(a, b) for a, b in itertools.pairwise(got) if (b - a).total_seconds() > 1]
    print(f"scheduler: {len(got)} slots from {got[0]} to {got[-1]}, gaps: {gaps}")
    said = log.read_text()
    for _, b in gaps:  # the slots due while it could not queue, coalesced into the next
        assert f"coalesced into {b.isoformat()}" in said, (b, said[-3000:])
    took = stopped_within(scheduler, log, BOUND)
    assert took < 5, took


@pytest.mark.parametrize("fault", ["reset", "refused", "slow"])
def test_enqueue_through_a_reset_a_refusal_or_slowness_queues_once_or_says_nothing_changed(
    h: Harness, proxy: FaultProxy, fault: str
) -> None:
    """`archiver enqueue` whose flows are reset while it waits on them, refused, or
    slowed: it ends within its bound, having queued its job once (and printed its id) or
    queued nothing and said so in one line, non-zero."""
    from tests.support import archiver_cmd, start_process

    seed_orders(h.url, 100)
    log = h.tmp / "command.log"
    if fault == "reset":
        proxy.pause(60)  # the command's flows wait on a network that carries nothing...
    else:
        FAULTS[fault](proxy)
    args = ("enqueue", "--table", "orders", "--before", CUTOFF)
    command = start_process(archiver_cmd(*args), proxied_env(h, proxy), log)
    if fault == "reset":
        time.sleep(3)
        proxy.heal()
        assert proxy.reset() >= 1  # ...and are reset
    try:
        code = command.wait(BOUND)
    except subprocess.TimeoutExpired:
        command.kill()
        raise AssertionError(f"still running {BOUND}s on: {log.read_text()}") from None
    proxy.heal()
    said = log.read_text().strip().splitlines()
    queued = h.sql("SELECT id::text FROM background_jobs")
    print(f"enqueue, {fault}: exit {code}, {len(queued)} queued: {said}")
    assert "Traceback" not in log.read_text(), said
    if code == 0:
        assert len(queued) == 1 and queued[0][0] in said, said
    else:
        assert queued == [] and len(said) == 1, said
    if fault == "slow":  # a slow network answers, later
        assert code == 0, said
    if fault == "refused":
        assert code != 0, said
