"""Fixtures: a real PostgreSQL (one migrated template database per run, a fresh copy per
test) and a real Azurite per run (a fresh container per test)."""

from __future__ import annotations

import compileall
import os
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import pluggy
import pytest

from archiver import db
from archiver.testing.services import Azurite, with_database
from tests.support import ADMIN_URL, DROPS, ROOT, fast_env, fresh_database, reap_started, sql
from tests.support.access import Team
from tests.support.harness import Harness, Worlds, world_env


def pytest_configure(config: pytest.Config) -> None:
    """Byte-compile the project once, in the controller, before any test starts an
    archiver process. The package is installed editable, so nothing else writes its
    .pyc files, and where PYTHONDONTWRITEBYTECODE is set (it is on this project's CI
    machine) every CLI and worker process compiled ~100 modules from source: ~0.2 s of
    CPU each, ~1,400 processes a run. Python reads .pyc files whatever that setting
    says, and ignores one whose source changed since."""
    if not hasattr(config, "workerinput"):
        for folder in ("archiver", "bench"):
            compileall.compile_dir(ROOT / folder, quiet=1)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The test databases this process asked to drop, dropped (tests.support.DROPS)."""
    DROPS.wait()


@pytest.fixture(autouse=True)
def _reap_processes() -> Iterator[None]:
    yield
    reap_started()


@pytest.fixture(scope="session")
def template_db() -> Iterator[str]:
    import asyncio

    name = f"archiver_tpl_{os.getpid()}"
    sql(ADMIN_URL, f'DROP DATABASE IF EXISTS "{name}"')
    sql(ADMIN_URL, f'CREATE DATABASE "{name}"')
    asyncio.run(db.migrate(with_database(ADMIN_URL, name)))
    yield name
    sql(ADMIN_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def database_url(template_db: str) -> Iterator[str]:
    """A fresh, migrated database for this test."""
    with fresh_database("archiver_t", template_db) as url:
        yield url


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    server = Azurite(tmp_path_factory.mktemp("azurite"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def worlds(
    template_db: str, azurite: Azurite, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Worlds]:
    """Archives a module's tests share, built once per process (tests.support.harness.Worlds)."""
    built = Worlds(template_db, azurite, tmp_path_factory.mktemp("worlds"))
    yield built
    built.close()


@pytest.fixture
def container() -> str:
    return f"t{uuid.uuid4().hex[:20]}"


@pytest.fixture
def env(database_url: str, azurite: Azurite, container: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a CLI or worker subprocess for this test."""
    return world_env(database_url, azurite, container, tmp_path)


@pytest.fixture
def h(
    env: dict[str, str], database_url: str, azurite: Azurite, container: str, tmp_path: Path
) -> Harness:
    """The test's world in one: see tests/support/harness.py."""
    return Harness(env, database_url, azurite, container, tmp_path)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    """On failure, attach the logs of the test's worker/scheduler processes to the report."""
    outcome = yield
    report = outcome.get_result()
    funcargs = getattr(item, "funcargs", {})
    if report.when == "call" and report.failed and "tmp_path" in funcargs:
        try:  # a process still running may be removing its temporary folders meanwhile
            logs = sorted(Path(funcargs["tmp_path"]).glob("**/*.log"))
        except OSError:
            logs = sorted(Path(funcargs["tmp_path"]).glob("*.log"))
        for log in logs:
            text = log.read_text(errors="replace")
            report.sections.append((f"process log {log.name}", text[-20000:]))


@pytest.fixture
def fast(env: dict[str, str]) -> dict[str, str]:
    """`env` with short leases and backoffs, so rescues happen within seconds."""
    return fast_env(env, ARCHIVER_SHUTDOWN_DEADLINE="10")


# The longest tests first (the soak three minutes, each bench group 30-80 s, against
# seconds for most): with `--dist worksteal` they start at once while the other
# processes take the rest, instead of one of them starting last and running alone at
# the end.
LONGEST_FIRST = ("tests/integration/test_soak.py", "tests/integration/test_bench.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order


@pytest.fixture
def team(h: Harness) -> Iterator[Team]:
    """Roles made for the test (tests.support.access.Team), dropped after it."""
    t = Team(h)
    try:
        yield t
    finally:
        t.drop()
