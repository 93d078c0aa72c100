"""The scheduler: fires every policy's cron slots and only enqueues; workers archive.

A slot is enqueued exactly once because the database says so -- a unique (policy_name,
slot_at) on background_jobs and INSERT ... ON CONFLICT DO NOTHING -- so any number of
schedulers may run at once for availability (APScheduler itself does not support several
processes sharing a job store). Each fire enqueues the newest slot due since the last one
it knows of, within the grace: slots missed while every scheduler was down are coalesced
into one job when a scheduler starts again, and slots older than the grace are logged and
skipped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import logging
import signal

import asyncpg
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from archiver import db
from archiver.bulk import BulkConnection, fetch_and_rollback
from archiver.context import Context
from archiver.errors import ArchiverError, ConfigError, error_line
from archiver.ident import TableName, quote_ident
from archiver.kinds.purge import PurgeRequest
from archiver.limits import window_opens
from archiver.operations.enqueue import archive_parts
from archiver.policy import Policy
from archiver.source.partitions import PartitionAction
from archiver.store import jobs

log = logging.getLogger(__name__)

RETRY_MAX_SECONDS = 30.0


class PolicyScheduler:
    def __init__(self, ctx: Context, policies: list[tuple[Policy, str]]) -> None:
        """`policies`: each policy with its table's schema-qualified name, as checked;
        `run` opens the scheduler's pool of the queue database on `ctx`."""
        settings = ctx.settings
        if settings.scheduler_grace >= settings.retention_days * 86400:
            # A finished job is pruned after the retention period, and with it the record
            # that its slot was enqueued; a slot that old must lie beyond the grace.
            raise ConfigError(
                f"ARCHIVER_SCHEDULER_GRACE ({settings.scheduler_grace:g}s) must be shorter "
                f"than ARCHIVER_RETENTION_DAYS ({settings.retention_days:g} days)"
            )
        self.ctx, self.settings, self.policies = ctx, settings, policies
        self.grace = dt.timedelta(seconds=settings.scheduler_grace)
        self.last_slot: dict[str, dt.datetime] = {}
        self.pool: asyncpg.Pool | None = None
        # tables whose partitions a slot must look up (archive_parts), found at start: a
        # slot of any other table is one INSERT, not a source connection and its checks
        # (which made many policies firing at once queue their slots seconds late)
        self.partitioned: set[str] = set()

    async def run(self) -> None:
        """Run until SIGTERM or SIGINT."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        self.pool = await self.ctx.open_pool(size=2)
        tables = sorted({t for _, t in self.policies})
        self.partitioned = set(
            await self.ctx.in_thread(
                self.settings.effective_source_url, lambda c: partitioned(c, tables)
            )
        )
        scheduler = AsyncIOScheduler(
            timezone=dt.UTC,
            # Only honoured in job_defaults (or per job), not as scheduler arguments.
            job_defaults={
                "misfire_grace_time": max(1, int(self.settings.scheduler_grace)),
                "coalesce": True,
                "max_instances": 1,
            },
        )
        try:
            for policy, table in self.policies:
                scheduler.add_job(
                    self.fire,
                    policy.trigger,
                    args=[policy, table],
                    id=policy.name,
                    name=f"policy {policy.name}",
                )
            scheduler.start()
            log.info("scheduler started: %d policies", len(self.policies))
            # Slots missed while no scheduler ran: the newest within the grace, once.
            await asyncio.gather(*(self.fire(p, t) for p, t in self.policies))
            log.info("scheduler caught up; enqueueing each policy's slots as they come")
            await stop.wait()
            log.info("scheduler stopping")
        finally:
            if scheduler.running:
                scheduler.shutdown(wait=False)
            await self.ctx.aclose()
        log.info("scheduler stopped")

    async def fire(self, policy: Policy, table: str) -> None:
        """Enqueue the newest due slot of `policy`; retry while the database is away."""
        delay = 1.0
        while True:
            try:
                await self._enqueue_due(policy, table)
                return
            except (*db.CONNECTION_ERRORS, asyncpg.PostgresConnectionError) as exc:
                log.warning(
                    "policy %s: queue database unreachable (%s); retrying in %.0fs",
                    policy.name,
                    error_line(exc),
                    delay,
                )
            except ArchiverError as exc:  # the table changed since the scheduler started
                log.error("policy %s: slot not enqueued: %s", policy.name, error_line(exc))
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_SECONDS)

    async def _enqueue_due(self, policy: Policy, table: str) -> None:
        assert self.pool is not None
        now = dt.datetime.now(dt.UTC)
        horizon = now - self.grace
        after = self.last_slot.get(policy.name)
        if after is None:  # just started: resume after the newest slot on record
            after = await jobs.last_policy_slot(self.pool, policy.name)
        if after is None or after < horizon:
            skipped = policy.fire_times(after, horizon)[:1] if after is not None else []
            if skipped:
                log.warning(
                    "policy %s: slots from %s until %s were missed and are older than the "
                    "grace (%gs): skipped",
                    policy.name,
                    skipped[0].isoformat(),
                    horizon.isoformat(),
                    self.grace.total_seconds(),
                )
            after = horizon
        slots = policy.fire_times(after, now)
        if not slots:
            return
        slot = slots[-1]
        if len(slots) > 1:
            log.info(
                "policy %s: %d missed slots from %s coalesced into %s",
                policy.name,
                len(slots) - 1,
                slots[0].isoformat(),
                slot.isoformat(),
            )
        request = policy.request(slot, table)
        if not self.settings.delta:  # ARCHIVER_DELTA=false: plain files for every policy
            request = dataclasses.replace(request, delta=False)
        parts: list[jobs.Part] = [(request, request.keys())]
        if policy.partitions != PartitionAction.ROWS and table in self.partitioned:
            # the table's partitions, as of now
            _, parts = await self.ctx.in_thread(
                self.settings.effective_source_url, lambda c: archive_parts(c, request)
            )
        job_id, created = await jobs.enqueue_slot(
            self.pool,
            parts,
            policy=policy.name,
            slot=slot,
            priority=policy.priority,
            max_attempts=policy.max_attempts,
            limits=policy.limits,
            run_at=window_opens(policy.limits, now),  # None: open now, or no window
        )
        self.last_slot[policy.name] = slot
        if policy.retain is not None:  # one purge queued or running per table
            await jobs.enqueue_request(self.pool, PurgeRequest(table, str(policy.retain)))
        log.info(
            "policy %s: slot %s: %s job %s (cutoff %s)%s",
            policy.name,
            slot.isoformat(),
            "enqueued" if created else "already enqueued as",
            job_id,
            request.cutoff,
            f" and {len(parts) - 1} more, one per old partition"
            if created and len(parts) > 1
            else "",
        )


def partitioned(conn: BulkConnection, tables: list[str]) -> list[str]:
    """Those of `tables` (schema.table, as checked_policies qualified them) that are
    partitioned."""
    names = {t: TableName.stored(t) for t in tables}
    quoted = {
        quote_ident(n.schema or "public") + "." + quote_ident(n.name): t for t, n in names.items()
    }
    found = fetch_and_rollback(
        conn,
        "SELECT q FROM jsonb_array_elements_text($1::text::jsonb) q "
        "JOIN pg_class c ON c.oid = to_regclass(q) WHERE c.relkind = 'p'",
        (json.dumps(list(quoted)),),
    )
    return [quoted[str(r[0])] for r in found]
