"""Prometheus metrics of a worker process, served by `archiver worker --metrics-port P`.

Counters and histograms count what this process did (Prometheus sums them across
workers); `archiver_jobs` is database-wide and read from the queue on each scrape, so
every worker reports the same figure. The worker calls in at four points only: claim,
chunk done, job finished, error.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import REGISTRY, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from archiver.context import Context
from archiver.errors import ConfigError
from archiver.model import Job, Status
from archiver.store import read_models

log = logging.getLogger(__name__)

ROWS_ARCHIVED = Counter("archiver_rows_archived", "Rows archived by this worker", ["table"])
BYTES_ARCHIVED = Counter(
    "archiver_bytes_archived", "Parquet bytes written by this worker", ["table"]
)
CHUNK_SECONDS = Histogram(
    "archiver_chunk_duration_seconds",
    "Seconds per committed chunk: take, write, upload, verify, commit",
    ["table"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
CLAIM_LATENCY = Histogram(
    "archiver_claim_latency_seconds",
    "Seconds from a job becoming runnable (run_at) to a worker claiming it",
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)
JOBS_FINISHED = Counter(
    "archiver_jobs_finished",
    "Jobs this worker stopped running, by outcome (completed, failed, requeued, "
    "cancelled, handed_back, window_closed, lease_lost)",
    ["outcome"],
)
THROTTLED_SECONDS = Counter(
    "archiver_throttled_seconds",
    "Seconds this worker's jobs waited on a limit, by reason (max_rows_per_second)",
    ["reason"],
)
ERRORS = Counter("archiver_errors", "Failed job attempts, by exception type", ["kind"])


def job_claimed(job: Job) -> None:
    # heartbeat_at is the claim's now(): both times come from the database's clock
    if job.heartbeat_at is not None:
        CLAIM_LATENCY.observe(max((job.heartbeat_at - job.run_at).total_seconds(), 0.0))


def chunk_done(table: str, rows: int, nbytes: int, seconds: float) -> None:
    ROWS_ARCHIVED.labels(table).inc(rows)
    BYTES_ARCHIVED.labels(table).inc(nbytes)
    CHUNK_SECONDS.labels(table).observe(seconds)


def throttled(reason: str, seconds: float) -> None:
    THROTTLED_SECONDS.labels(reason).inc(seconds)


def job_finished(outcome: str) -> None:
    JOBS_FINISHED.labels(outcome).inc()


def job_error(exc: BaseException) -> None:
    ERRORS.labels(type(exc).__name__).inc()


class JobsByStatus(Collector):
    """`archiver_jobs{status}`: the whole queue, counted on each scrape on one of the
    context's ADBC connections (one the server dropped is replaced as it is taken, so a
    database outage only costs that scrape)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def describe(self) -> Iterable[Metric]:
        # without this the registry would collect, hence connect, at registration
        return [self._family()]

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        up = GaugeMetricFamily("archiver_queue_up", "1 if the queue could be read")
        try:
            with self.ctx.bulk(self.ctx.settings.database_url) as conn:
                counts = read_models.count_jobs_by_status(conn)
        except Exception as exc:
            log.warning("metrics: cannot count jobs (%s)", type(exc).__name__)
            up.add_metric([], 0)
            yield up
            return
        for status in Status:
            family.add_metric([str(status)], counts.get(str(status), 0))
        up.add_metric([], 1)
        yield family
        yield up

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily("archiver_jobs", "Jobs in the queue by status", labels=["status"])


def serve(port: int, ctx: Context, addr: str = "0.0.0.0") -> Any:
    """Serve /metrics on `port` from a daemon thread; returns the server."""
    REGISTRY.register(JobsByStatus(ctx))
    try:
        server, _thread = start_http_server(port, addr=addr)
    except OSError as exc:
        raise ConfigError(f"--metrics-port {port}: cannot listen ({exc.strerror})") from None
    log.info("metrics on http://%s:%d/metrics", addr, port)
    return server
