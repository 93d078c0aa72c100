"""The console at scale: with a million finished jobs and a hundred thousand catalogued
files, the overview and a filtered jobs page, each answered ten times (the server's own
time, its Server-Timing header; median), and the claim latency of two idle workers
with no console, then with a console page open (refreshing every two seconds, as the
page does) -- in the same run."""

from __future__ import annotations

import asyncio
import socket
import statistics
import threading
import time
import urllib.request

from bench.catalog import _fill, one_real_job
from bench.common import archiver_cmd, sql, start_process
from bench.core import Bench
from bench.jobs import claim_latencies

PAGES = {
    "console overview": "/",
    "console jobs page, failed of one table": "/jobs?status=failed&table=t7",
    "console jobs page, error text": "/jobs?error=unreachable",
}


def console_at_scale(bench: Bench) -> None:
    _, (big_jobs, big_files) = bench.args.catalog_sizes
    url, env = one_real_job(bench)
    try:
        _fill(url, big_jobs, big_files)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        console = start_process(
            archiver_cmd("console", "--bind", f"127.0.0.1:{port}"),
            {**env, "ARCHIVER_CONSOLE_PUBLIC_READ": "true"},  # the bench reads unnamed
        )
        base = f"http://127.0.0.1:{port}"
        try:
            _wait(base)
            for label, path in PAGES.items():
                server = [_server_ms(base + path) for _ in range(10)]
                median = statistics.median(server)
                bench.add(f"{label}, {big_jobs:,} jobs / {big_files:,} files", median, None, "ms",
                          "< 200 ms (median of 10, server time)", median < 200)  # fmt: skip
            quiet = asyncio.run(claim_latencies(env, bench.args.latency_jobs))
            sql(url, "DELETE FROM background_jobs WHERE task_name = 'noop'")
            stop = threading.Event()
            poller = threading.Thread(target=_poll, args=(base + "/", stop), daemon=True)
            poller.start()
            try:
                busy = asyncio.run(claim_latencies(env, bench.args.latency_jobs))
            finally:
                stop.set()
                poller.join()
            sql(url, "DELETE FROM background_jobs WHERE task_name = 'noop'")
            q, b = statistics.median(quiet) * 1000, statistics.median(busy) * 1000
            bench.add("claim latency, console open (median)", b, q, "ms",
                      "<= 1.5x without it (+2 ms)", b <= 1.5 * q + 2)  # fmt: skip
        finally:
            console.terminate()
            console.wait(30)
    finally:
        bench.dbs.drop(url)


def _wait(base: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(base + "/healthz", timeout=2).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("the console did not answer")


def _server_ms(url: str) -> float:
    with urllib.request.urlopen(url, timeout=30) as r:
        r.read()
        timing = r.headers["Server-Timing"]  # app;dur=12.3
    return float(timing.split("dur=")[1])


def _poll(url: str, stop: threading.Event) -> None:
    """A page left open: fetched again every two seconds (console.js)."""
    while not stop.wait(2.0):
        urllib.request.urlopen(url, timeout=30).read()
