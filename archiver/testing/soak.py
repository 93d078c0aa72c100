"""The soak (issue 42): production's mix at once, for N minutes, with faults. supervisord
runs the scheduler, three workers and the console (archiver.testing.soak_world); policies
archive an aggregate with its children, a range-partitioned table and a table with a
text key every 20 s, and purge the oldest events; a feeder inserts rows of every age;
a driver runs restores, erasures, purges, tier moves (the Archive tier among them, after
a verify), rehydrations and queries as an operator would, SIGKILLing some mid-way;
faults arrive at random moments: a worker or the scheduler SIGKILLed, PostgreSQL
restarted, Azurite restarted, archiver's backends terminated, and the network between
every service and PostgreSQL or the blob store paused, reset, refusing or slow (a fault
proxy before each: archiver.testing.faultproxy). Every minute and at the end
the invariants of archiver.testing.soak_checks are checked. `bench/soak.py` runs it for
30 minutes with its figures; tests/integration/test_soak.py for three."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import asyncpg

from archiver.testing import soak_checks as checks
from archiver.testing.soak_world import (
    DATABASE_TROUBLE,
    KEPT,
    WORKERS,
    Figures,
    Ledger,
    World,
    caught_up,
    drained,
    fetch,
    insert,
    job_counts,
    landed,
    make_batch,
)
from archiver.testing.supervised import ctl, pid_of

log = logging.getLogger(__name__)

OPERATIONS = ("restore", "erase", "purge", "tier", "query", "rehydrate", "compact")
FAULTS = ("kill_worker", "restart_postgres", "network_postgres", "restart_azurite",
          "terminate_backends", "network_blobs", "kill_scheduler")  # fmt: skip
# What the network does between the services and their servers while both stay up
# (archiver.testing.faultproxy). Not a flow frozen for good: the proxy's own kernel keeps
# answering a frozen flow's keepalives, where a dropped flow's would go unanswered and
# TCP_USER_TIMEOUT and keepalive end it, so a job's frozen COPY would hang here for good,
# as it never does in production; tests/integration/test_network_faults.py freezes flows per service.
NETWORK = ("pause", "reset", "refuse", "slow")


class Soak:
    def __init__(self, world: World, minutes: float, seed: int, say: Callable[[str], None]):
        self.world, self.minutes, self.say = world, minutes, say
        self.rnd = random.Random(seed)
        self.ledger = Ledger()
        self.files = checks.FileKeys(world)
        self.figures = Figures(minutes)
        self.outputs: list[str] = []  # every command's stdout and stderr
        self.stop = asyncio.Event()
        self.started = time.monotonic()
        self.first_upto = 0

    def minute(self) -> float:
        return (time.monotonic() - self.started) / 60

    async def run(self) -> Figures:
        conn = await asyncpg.connect(self.world.url)
        try:  # a first archive's worth of every age
            for _ in range(20):
                batch = make_batch(self.ledger, self.rnd, 100, 200, 240)
                await insert(conn, batch)
                self.ledger.add(batch)
                self.figures.rows_inserted += batch.count()
        finally:
            await conn.close()
        self.first_upto = self.ledger.last_id  # rows inserted before any policy ran
        await asyncio.to_thread(self.world.start)  # after the rows: its policies find them
        self.started = time.monotonic()
        duties = {"feeder": self.feed, "operator": self.drive, "faults": self.inject,
                  "checks": self.watch, "console": self.browse}  # fmt: skip
        tasks = [asyncio.create_task(duty(), name=name) for name, duty in duties.items()]
        await asyncio.sleep(self.minutes * 60)
        self.stop.set()
        for task, ended in zip(
            tasks, await asyncio.gather(*tasks, return_exceptions=True), strict=True
        ):
            if isinstance(ended, BaseException):  # the soak's own fault: said, and it goes on
                self.figures.problems.append(f"the soak's {task.get_name()} died: {ended!r}")
        await self.finish()
        return self.figures

    async def feed(self) -> None:
        """The application: a batch of rows of every table every 0.3 s. A batch whose
        insert raised (PostgreSQL restarting) is looked for once it is back: committed
        or not, the ledger then knows."""
        while not self.stop.is_set():
            try:
                conn = await asyncpg.connect(self.world.url, timeout=5)
                try:
                    if (unsure := self.ledger.unsure) is not None:
                        if await landed(conn, unsure):
                            self.ledger.add(unsure)
                            self.figures.rows_inserted += unsure.count()
                        self.ledger.unsure = None
                    while not self.stop.is_set():
                        batch = make_batch(self.ledger, self.rnd, 8, 120, 25)
                        self.ledger.unsure = batch
                        await insert(conn, batch)
                        self.ledger.add(batch)
                        self.ledger.unsure = None
                        self.figures.rows_inserted += batch.count()
                        await asyncio.sleep(0.3)
                finally:
                    await conn.close()
            except DATABASE_TROUBLE as exc:  # a restart, or a client left confused by one
                log.info("soak: feeder reconnects: %r", exc)
                await asyncio.sleep(0.5)

    async def drive(self) -> None:
        """The operator: one command at a time, every few seconds, each kind in turn."""
        turn = 0
        while not self.stop.is_set():
            await self.pause(3, 8)
            if self.stop.is_set():
                return
            kind = OPERATIONS[turn % len(OPERATIONS)]
            turn += 1
            await getattr(self, f"op_{kind}")()

    async def pause(self, low: float, high: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), self.rnd.uniform(low, high))

    async def command(self, kind: str, *args: str, kill: bool = True) -> tuple[int, str, str]:
        """Run `archiver *args`; SIGKILLed mid-way one time in four. Exit 0, an error in
        one line (after the progress lines a command prints on stderr) and a kill are
        outcomes an operator meets; anything else -- a traceback -- is a problem."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "archiver", *args, env=self.world.env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        killer = None
        if kill and self.rnd.random() < 0.25:

            def kill_it() -> None:
                if proc.returncode is None:
                    proc.kill()

            killer = asyncio.get_running_loop().call_later(self.rnd.uniform(0.2, 2.0), kill_it)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 300)
        except TimeoutError:
            proc.kill()
            out, err = await proc.communicate()
            self.figures.problems.append(f"{kind}: still running after 300 s: {args}")
        if killer is not None:
            killer.cancel()
        stdout, stderr = out.decode(), err.decode()
        self.outputs.append(stdout + stderr)
        code = proc.returncode or 0
        if code == -signal.SIGKILL:
            outcome = "killed"
        elif code == 0:
            outcome = "ok"
        elif code == 1 and checks.one_error_line(stderr):
            outcome = "refused"
        else:
            outcome = "failed"
            self.figures.problems.append(f"{kind} {args}: exit {code}: {stderr[-600:]}")
        self.figures.operations[f"{kind} {outcome}"] += 1
        return code, stdout, stderr

    def _window(self, low_days: int, high_days: int, width: int) -> tuple[str, str]:
        start = dt.date.today() - dt.timedelta(days=self.rnd.randint(low_days, high_days))
        return start.isoformat(), (start + dt.timedelta(days=width)).isoformat()

    async def op_restore(self) -> None:
        table = self.rnd.choice(("orders", "audit"))
        low, high = self._window(35, 115, self.rnd.choice((1, 5)))
        code, out, err = await self.command(
            "restore", "restore", "--table", table, "--from", low, "--to", high
        )
        if code == 0:
            words = (out or err).split()
            if len(words) > 1 and words[1].replace(",", "").isdigit():
                self.figures.rows_restored += int(words[1].replace(",", ""))

    async def op_erase(self) -> None:
        """A data subject's rows: deleted live by the application, then erased from the
        archive (refused while an archive job of the table runs: asked again)."""
        erasable = [s for s in self.ledger.subjects if s not in KEPT]
        if len(erasable) <= 5:
            return
        who = self.rnd.choice(erasable)
        self.ledger.subjects.remove(who)  # no new batch holds its rows; one in flight lands
        for _ in range(600):  # first (else the application's DELETE below may take rows
            if (u := self.ledger.unsure) is None or not u.holds(who):  # the ledger adds
                break  # after it, and the soak would report a row lost)
            await asyncio.sleep(0.05)
        self.ledger.erasing.add(who)
        self.ledger.forget_subject(who)
        for _ in range(60):
            try:
                conn = await asyncpg.connect(self.world.url, timeout=5)
                try:
                    await conn.execute("DELETE FROM orders WHERE customer = $1", who)
                    await conn.execute("DELETE FROM audit WHERE actor = $1", who)
                finally:
                    await conn.close()
                break
            except DATABASE_TROUBLE:
                await asyncio.sleep(1)
        done = False
        for attempt in range(60):
            results = [
                await self.command("erase", "erase", "--table", "orders", "--where",
                                   f"customer = '{who}'", "--with-children",
                                   "--reason", "soak", kill=attempt < 2),
                await self.command("erase", "erase", "--table", "audit", "--where",
                                   f"actor = '{who}'", "--reason", "soak", kill=attempt < 2),
            ]  # fmt: skip
            failed = [r for r in results if r[0] != 0 and "no archived files" not in r[2]]
            if not failed:
                done = True
                break
            if any("archiver rehydrate" in r[2] for r in failed):  # some are offline
                await self.op_rehydrate()
            await self.pause(1, 3)
        if done:
            self.ledger.erasing.discard(who)
            self.ledger.erased.add(who)
            self.figures.subjects_erased += 1
        else:
            self.figures.problems.append(f"erase of {who}: refused 60 times in a row")

    async def op_purge(self) -> None:
        await self.command("purge", "purge", "--table", "events", "--older-than", "150 days")

    async def op_tier(self) -> None:
        """Old audit files to Cool or Hot, or (once verify found them sound) offline to
        the Archive tier, where restores and erasures refuse them until a rehydration.
        The soak's checker reads them first: it cannot read an offline file either."""
        tier = self.rnd.choice(("Cool", "Hot", "Archive"))
        if tier == "Archive":
            await self.check_rows(f"minute {self.minute():.1f}, before the Archive tier")
            await self.command("verify", "verify", "--table", "audit", "--skip-offline", kill=False)
        # every file of the table: each holds rows of every age past the policy's 30 days,
        # so none is wholly older than an age (with --older-than they moved nothing)
        code, out, _ = await self.command("tier", "tier", "--table", "audit", "--tier", tier)
        if code == 0 and (
            offline := re.search(
                r"moved \d+ files? to Archive \(\d+ already there; (\d+) offline", out
            )
        ):
            self.figures.files_offline = int(offline[1])

    async def op_rehydrate(self, kill: bool = True) -> None:
        code, out, _ = await self.command(
            "rehydrate", "rehydrate", "--table", "audit", "--tier", "Cool", kill=kill
        )
        if code == 0 and (back := re.search(r"(\d+) back online", out)):
            self.figures.files_back_online += int(back[1])

    async def op_compact(self) -> None:
        """An operator's compaction of a table now (the workers' runs every minute too),
        SIGKILLed one time in four like the rest."""
        table = self.rnd.choice(("orders", "events", "audit"))
        code, out, _ = await self.command("compact", "compact", "--table", table)
        if code == 0 and (merged := re.search(r"merged (\d+) files?", out)):
            self.figures.files_merged += int(merged[1])

    async def op_query(self) -> None:
        """Questions whose answers the soak knows (soak_checks: the kept subjects' rows,
        which no erasure or insert changes meanwhile), asked while moves, restores and
        purges run: through `--with-live` in one statement of several scans of the
        source, and of the archive alone once the quiet orders are all archived. A wrong
        answer is a problem, as a traceback is."""
        upto = self.ledger.settled_id()
        for question, want in checks.live_questions(self.ledger, upto):
            code, out, _ = await self.command(
                "query", "query", "--with-live", "--format", "json", question, kill=False
            )
            self._judge("query --with-live", code, out, want)
            await self.ask_views(question, want)
        limit = checks.quiet_limit(dt.datetime.now(dt.UTC))
        upto = min(upto, self.first_upto)
        try:
            [(live,)] = await fetch(self.world, checks.quiet_live(upto, limit), timeout=10)
        except DATABASE_TROUBLE:
            return
        if live:  # not all moved yet (a policy's first run, or faults): nothing to know
            return
        want = checks.archive_truth(self.ledger, upto, limit)
        code, out, _ = await self.command(
            "query", "query", "--format", "json", checks.archive_question(upto, limit), kill=False
        )
        self._judge("query", code, out, want)

    async def ask_views(self, question: str, want: dict[str, int]) -> None:
        """The same question of the attached tables' _all views, in PostgreSQL through
        postgres_fdw and archiver serve: every row once, as the application sees it. A
        refusal (a file offline, storage or the database restarting) has no answer to
        judge; a wrong answer is a problem."""
        sql = through_views(question)
        try:
            rows = await fetch(self.world, sql, timeout=30)
        except DATABASE_TROUBLE as exc:
            log.info("soak: the _all views answered no: %s", exc)
            return
        self.figures.answers_checked += 1
        self.figures.view_answers += 1
        got = [dict(r) for r in rows]
        if got != [want]:
            self.figures.problems.append(
                f"minute {self.minute():.1f}: the _all views answered {got}, the soak knows {want}"
            )

    def _judge(self, what: str, code: int, out: str, want: dict[str, int]) -> None:
        if code != 0:  # refused (a file offline, storage restarting): no answer to judge
            return
        got = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        self.figures.answers_checked += 1
        if got != [want]:
            self.figures.problems.append(
                f"minute {self.minute():.1f}: {what} answered {got}, the soak knows {want}"
            )

    async def inject(self) -> None:
        turn = 0
        while not self.stop.is_set():
            await self.pause(12, 25)
            if self.stop.is_set():
                return
            kind = FAULTS[turn % len(FAULTS)]
            turn += 1
            try:
                await getattr(self, f"fault_{kind}")()
                self.figures.faults[kind] += 1
            except Exception as exc:
                self.figures.problems.append(f"fault {kind} not injected: {exc}")

    async def fault_kill_worker(self) -> None:
        name = f"archiver:worker-{self.rnd.randrange(WORKERS):02d}"
        pid = await asyncio.to_thread(pid_of, self.world.env, name)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)

    async def fault_kill_scheduler(self) -> None:
        pid = await asyncio.to_thread(pid_of, self.world.env, "archiver:scheduler")
        if pid is not None:
            os.kill(pid, signal.SIGKILL)

    async def fault_restart_postgres(self) -> None:
        await asyncio.to_thread(self.world.cluster.restart)

    async def fault_restart_azurite(self) -> None:
        await asyncio.to_thread(self.world.azurite.stop)
        await asyncio.sleep(self.rnd.uniform(0.5, 3))
        await asyncio.to_thread(self.world.azurite.start)

    async def fault_network_postgres(self) -> None:
        await self._network("PostgreSQL")

    async def fault_network_blobs(self) -> None:
        await self._network("the blob store")

    async def _network(self, where: str) -> None:
        """All traffic to `where` paused for a few seconds, its connections reset, new
        ones refused a while, or every chunk of bytes slowed a while."""
        proxy, what = self.world.proxies[where], self.rnd.choice(NETWORK)
        if what == "pause":
            proxy.pause(self.rnd.uniform(2, 8))
        elif what == "reset":
            await asyncio.to_thread(proxy.reset)
        else:
            proxy.refuse() if what == "refuse" else proxy.slow(0.02)
            await asyncio.sleep(
                self.rnd.uniform(1, 4) if what == "refuse" else self.rnd.uniform(3, 8)
            )
            proxy.heal()
        self.figures.network[f"{what} {where}"] += 1

    async def fault_terminate_backends(self) -> None:
        conn = await asyncpg.connect(self.world.url, timeout=5)
        try:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name LIKE 'archiver%' "
                "AND random() < 0.5"
            )
        finally:
            await conn.close()

    async def watch(self) -> None:
        """Every minute: the rows' invariant; every 20 s: the workers' memory."""
        last_check = time.monotonic()
        while not self.stop.is_set():
            await self.pause(20, 20)
            self.figures.worker_rss_mb.append((self.minute(), await self.worker_rss()))
            if time.monotonic() - last_check >= 60 and not self.stop.is_set():
                last_check = time.monotonic()
                await self.check_rows(f"minute {self.minute():.1f}")

    async def check_rows(self, when: str, *, final: bool = False) -> None:
        for _ in range(3 if final else 1):
            try:
                found = await checks.rows_in_one_place(self.world, self.ledger, self.files)
                break
            except (*DATABASE_TROUBLE, checks.FileOffline) as exc:  # counted, and said
                self.figures.checks_skipped += 1
                self.say(f"soak {when}: rows check skipped ({exc!r})")
                await asyncio.sleep(2)
        else:
            if final:
                self.figures.problems.append(f"{when}: the rows could not be checked")
            return
        self.figures.problems += [f"{when}: {p}" for p in found]
        self.figures.checks_passed += not found
        self.say(f"soak {when}: rows check {'passed' if not found else 'FAILED'}")

    async def worker_rss(self) -> float:
        sizes = []
        for i in range(WORKERS):
            pid = await asyncio.to_thread(pid_of, self.world.env, f"archiver:worker-{i:02d}")
            with contextlib.suppress(OSError, TypeError):
                status = Path(f"/proc/{pid}/status").read_text()
                # a worker just SIGKILLed and not yet reaped (a zombie) has no VmRSS line
                line = next((x for x in status.splitlines() if x.startswith("VmRSS:")), None)
                if line is not None:
                    sizes.append(int(line.split()[1]) / 1024)
        return max(sizes, default=0.0)

    async def browse(self) -> None:
        """The console open all day: its overview and jobs pages every 2 s."""
        url = self.world.console_url
        while not self.stop.is_set():
            for page in ("/", "/jobs"):
                with contextlib.suppress(OSError):
                    await asyncio.to_thread(urllib.request.urlopen, url + page, None, 5)
            await self.pause(2, 2)

    async def finish(self) -> None:
        """The scheduler stopped, the queue drained, then every invariant once more."""
        env = self.world.env
        await asyncio.to_thread(ctl, env, "stop", "archiver:scheduler")
        if not await drained(self.world):
            self.figures.problems.append("the queue did not drain within 5 minutes")
        # the end of the day: every file online to be checked (never killed here: the
        # checks below read every blob, and an Archive-tier one cannot be read)
        await self.op_rehydrate(kill=False)
        if not await caught_up(self.world):  # a command killed mid-publication: the
            # workers' publication sweep finishes it (every 30 s)
            self.figures.problems.append("publications still owed 3 minutes after the end")
        await self.check_rows("the end", final=True)
        found = await asyncio.to_thread(checks.delta_equals_catalog, self.world)
        found += await asyncio.to_thread(checks.erased_nowhere, self.world, self.ledger,
                                         self.outputs)  # fmt: skip
        # what writers killed in the last minute left (the workers' sweep takes older ones)
        swept = await asyncio.to_thread(self.world.cli, "remove-orphans", "--grace", "0")
        if swept.returncode != 0 or not (gone := re.search(r"deleted (\d+) orphan", swept.stdout)):
            found.append(f"archiver remove-orphans: {swept.stdout[-400:]}{swept.stderr[-400:]}")
        else:
            self.figures.orphans_at_the_end = int(gone[1])
        verify = await asyncio.to_thread(self.world.cli, "verify")
        if verify.returncode != 0:
            found.append(f"archiver verify: {verify.stdout[-800:]}{verify.stderr[-400:]}")
        found += checks.rss_flat(self.figures.worker_rss_mb, self.minutes)
        self.figures.checks_passed += not found
        self.figures.problems += [f"the end: {p}" for p in found]
        self.figures.jobs = await job_counts(self.world)
        self.figures.live_rows = await asyncio.to_thread(checks.counts, self.world)
        assert self.world.supervisord is not None
        await asyncio.to_thread(self.world.supervisord.stop)
        self.world.supervisord = None
        left = await checks.nothing_left_behind(self.world)
        self.figures.checks_passed += not left
        self.figures.problems += [f"after the stop: {p}" for p in left]


def through_views(question: str) -> str:
    """A live question (live_questions) of the attached tables' _all views instead."""
    for table in ("orders", "order_lines", "audit"):
        question = re.sub(rf"\b(FROM|JOIN) {table}\b", rf"\1 archive.{table}_all", question)
    return question


def run_soak(
    minutes: float, workdir: Path, seed: int = 1, say: Callable[[str], None] = print
) -> Figures:
    """The soak in its own world, torn down after (its logs stay in `workdir`)."""
    world = World(workdir)
    world.up()
    try:
        return asyncio.run(Soak(world, minutes, seed, say).run())
    finally:
        world.down()
