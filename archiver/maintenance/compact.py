"""Compaction's schedule: a compaction job for each table with small files, once every
ARCHIVER_COMPACT_EVERY seconds per storage, whichever worker asks first, with its
policy's options (archiver.kinds.compact)."""

from __future__ import annotations

from archiver.kinds.compact import CompactRequest, queue_compactions
from archiver.maintenance.duty import Shared
from archiver.operations.compact import options_for

BUDGET = 8  # a compaction job merges at most this many target sizes of input


class CompactionSweep:
    name = "compaction"
    every = 60.0  # how often a worker asks whether compaction is due

    def __init__(self, shared: Shared) -> None:
        self.pool, self.settings, self.wake = shared.pool, shared.settings, shared.wake
        self.config = shared.config

    async def run(self) -> None:
        if not self.settings.compact:
            return
        from archiver.policy import parse_policies

        location = str(self.settings.storage_location())

        def request(table: str) -> CompactRequest | None:
            options = options_for(self.settings, self.config, table)
            if options is None:
                return None
            budget = BUDGET * options.target
            return CompactRequest(table, location, options.target, options.period, budget)

        policies = parse_policies(self.config.policies) if self.config is not None else []
        targets = [p.compact_target for p in policies if p.compact_target]
        small = max([self.settings.compact_target, *targets]) // 2  # each table's plan decides
        every = self.settings.compact_every
        if await queue_compactions(self.pool, location, every, small, request):
            self.wake()
