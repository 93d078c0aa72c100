"""The house rules of docs/architecture.md, read from the source: every import (inside
functions and under TYPE_CHECKING too) of archiver/, bench/ and tests/."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("archiver", "bench", "tests")
MAX_LINES = 400
# The pipeline and the data path: handed a catalog, a storage and a stop signal, they
# learn nothing of the queue or of the terminal.
DATA_PATH = (
    "archiver.archive",
    "archiver.source",
    "archiver.pgtypes",
    "archiver.parquet",
    "archiver.storage",
    "archiver.bulk",
    "archiver.driver_check",
    "archiver.catalog",
    "archiver.restore",
    "archiver.files",
    "archiver.ledger",
    "archiver.verify",
    "archiver.delta",
    "archiver.lifecycle",
)
NOT_IN_DATA_PATH = ("archiver.terminal", "archiver.cli", "archiver.commands")
# The queue reaches the data path by one door: the Catalog seam (a job's checkpoint).
QUEUE_DOOR = "archiver.catalog"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for tree in TREES
        for path in (ROOT / tree).rglob("*.py")
        if "node_modules" not in path.parts
    }


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _resolve(name: str) -> str | None:
    """The project module an import of `name` loads (its longest known prefix)."""
    known = modules()
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str) -> set[str]:
    path = modules()[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for target in targets:
            if resolved := _resolve(target):
                found.add(resolved)
    found.discard(name)
    return found


@cache
def graph() -> dict[str, frozenset[str]]:
    return {name: frozenset(imports_of(name)) for name in modules()}


def cycles() -> Iterator[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> Iterator[list[str]]:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph()[node]:
            if nxt not in index:
                yield from visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                yield sorted(component)

    for node in sorted(graph()):
        if node not in index:
            yield from visit(node)


def reachable(start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph()[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def long_module_exceptions() -> set[str]:
    """The paths named under "Long modules" in docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Long modules", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^- `([^`]+\.py)`", section, re.MULTILINE))


def test_the_walk_sees_the_whole_house() -> None:
    # A rule over nothing would pass: the graph must hold the modules and edges it checks.
    assert {"archiver.archive.chunk", "bench.run", "tests.support"} <= modules().keys()
    assert "archiver.source.binding" in graph()["archiver.archive.take"]
    assert "archiver.storage.seam" in graph()["archiver.storage.azure"]  # a `from` import


def test_no_import_circles() -> None:
    found = list(cycles())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def unit_of(name: str) -> str:
    """The room an archiver module is in: its package under archiver (archiver.delta),
    or the module itself where it stands alone (archiver.ledger). Each job kind's module
    is a room of its own (archiver.kinds.publish): the package only gathers them, and an
    operation a kind runs may queue another kind."""
    parts = name.split(".")
    return ".".join(parts[:3] if parts[1:2] == ["kinds"] else parts[:2])


def unit_cycles(edges: dict[str, frozenset[str]]) -> list[str]:
    """Imports that run from one of archiver's rooms back up to a room that imports it
    (directly or through others): the module graph folded into rooms, its circles."""
    rooms: dict[str, set[str]] = {}
    why: dict[tuple[str, str], str] = {}
    for name, imported in edges.items():
        if not _under(name, ("archiver",)) or name == "archiver":
            continue
        for other in imported:
            if _under(other, ("archiver",)) and other != "archiver":
                a, b = unit_of(name), unit_of(other)
                if a != b:
                    rooms.setdefault(a, set()).add(b)
                    why.setdefault((a, b), f"{name} imports {other}")
    found = []
    for a, targets in sorted(rooms.items()):
        for b in sorted(targets):
            seen, todo = set(), [b]  # does b reach back to a?
            while todo:
                room = todo.pop()
                if room == a:
                    found.append(why[(a, b)])
                    break
                if room not in seen:
                    seen.add(room)
                    todo.extend(rooms.get(room, ()))
    return found


def test_no_import_runs_back_up_to_a_room_that_imports_it() -> None:
    assert unit_cycles(graph()) == []
    # the rule sees one: a file's facts reaching into the Delta publisher that reads them
    tied = {
        "archiver.files.rewrite": frozenset({"archiver.delta.facts"}),
        "archiver.delta.convert": frozenset({"archiver.files.rewrite"}),
        "archiver.delta.facts": frozenset(),
    }
    assert unit_cycles(tied) == [
        "archiver.delta.convert imports archiver.files.rewrite",
        "archiver.files.rewrite imports archiver.delta.facts",
    ]


def test_the_data_path_knows_nothing_of_the_queue_or_the_console() -> None:
    for name in modules():
        if _under(name, DATA_PATH):
            reached = {m for m in reachable(name) if _under(m, NOT_IN_DATA_PATH)}
            assert not reached, f"{name} reaches {sorted(reached)}"
            if name != QUEUE_DOOR:
                assert "archiver.store.jobs" not in graph()[name], f"{name} imports the queue"


def test_production_never_imports_the_testing_seams() -> None:
    for name, imported in graph().items():
        if _under(name, ("archiver",)) and not _under(name, ("archiver.testing",)):
            wrong = {m for m in imported if _under(m, ("archiver.testing",))}
            assert not wrong, f"{name} imports {sorted(wrong)}"


def test_bench_and_tests_do_not_import_each_other() -> None:
    for name, imported in graph().items():
        for mine, other in (("bench", "tests"), ("tests", "bench")):
            if _under(name, (mine,)):
                wrong = {m for m in imported if _under(m, (other,))}
                assert not wrong, f"{name} imports {sorted(wrong)}"


# The layers docs/architecture.md draws, top first: a module imports its own layer's
# and those below, never one above.
LAYERS: tuple[tuple[str, ...], ...] = (
    (  # entry points
        "archiver.__main__", "archiver.cli", "archiver.commands", "archiver.operations", "archiver.doctor", "archiver.grants", "archiver.query",
        "archiver.interrupt", "archiver.web", "archiver.serve", "archiver.worker",
        "archiver.scheduler", "archiver.maintenance", "archiver.metrics", "archiver.terminal",
        "archiver.kinds",
    ),
    ("archiver.policy",),  # policies
    ("archiver.archive",),  # the pipeline
    (  # the data path
        "archiver.source", "archiver.pgtypes", "archiver.parquet", "archiver.storage",
        "archiver.catalog", "archiver.restore", "archiver.verify", "archiver.delta",
        "archiver.ledger", "archiver.driver_check",
        "archiver.files", "archiver.lifecycle", "archiver.context", "archiver.iceberg",
    ),
    ("archiver.store", "archiver.bulk", "archiver.bulk_parameters", "archiver.db"),  # the store, its drivers
    (  # foundations
        "archiver.model", "archiver.limits", "archiver.config", "archiver.errors",
        "archiver.ident", "archiver.text", "archiver.logs", "archiver.failpoints",
        "archiver.memory", "archiver.outcome", "archiver.scratch", "archiver.arrow_values",
    ),
)  # fmt: skip


def layer_of(name: str) -> int | None:
    """The layer of an archiver module (the package itself: foundations; the testing
    seams stand beside the house: None)."""
    if name == "archiver":
        return len(LAYERS) - 1
    return next((i for i, prefixes in enumerate(LAYERS) if _under(name, prefixes)), None)


def imports_up(edges: dict[str, frozenset[str]]) -> list[str]:
    """Imports of a module from a layer above its own."""
    wrong = []
    for name, imported in edges.items():
        mine = layer_of(name)
        for other in imported:
            theirs = layer_of(other)
            if mine is not None and theirs is not None and theirs < mine:
                wrong.append(f"{name} imports {other}, a layer up")
    return sorted(wrong)


def importing_test_modules(edges: dict[str, frozenset[str]]) -> list[str]:
    """Test modules importing another test module (shared helpers live in support
    modules: tests/support/__init__.py, harness.py, *_check.py and the like)."""

    def is_test(name: str) -> bool:
        return name.startswith("tests.") and name.rpartition(".")[2].startswith("test_")

    return sorted(
        f"{name} imports {other}"
        for name, imported in edges.items()
        if is_test(name)
        for other in imported
        if is_test(other)
    )


# What opens a PostgreSQL session or the archive's storage: the context (archiver.context)
# with the drivers and the storage it opens them through, and besides it only cli's signal
# handling (archiver.interrupt: ending a command's sessions from another) and serve, whose
# sessions to the catalog and to its definitions server are its own, held as it runs.
# Everything else is handed a context. The testing seams stand beside the house.
OPENS_SESSIONS = (
    "archiver.context", "archiver.db", "archiver.bulk", "archiver.storage",
    "archiver.interrupt", "archiver.serve", "archiver.testing",
)  # fmt: skip
_DRIVERS = {"db", "asyncpg", "psycopg", "pq", "PGconn", "dbapi", "adbc_driver_postgresql"}
_OPENERS = {"open_bulk", "open_storage", "BulkPool", "AzureStorage", "LocalStorage"}


def _opens(call: ast.Call, drivers_connect: set[str]) -> str | None:
    """The call's name when it opens a session or a storage (a driver's connect or
    create_pool, whether called through its module or imported by name, and archiver's
    own openers), else None."""
    func, names = call.func, []
    while isinstance(func, ast.Attribute):
        names.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        names.append(func.id)
    names.reverse()
    if not names:
        return None
    opener = names[-1] in _OPENERS or (
        names[-1] in ("connect", "create_pool") and len(names) > 1 and names[-2] in _DRIVERS
    )
    return (
        ".".join(names) if opener or names == [n for n in names if n in drivers_connect] else None
    )


def ambient_state_and_own_sessions(sources: dict[str, str]) -> list[str]:
    """Where a module reads a ContextVar (or makes one), or opens a session or a storage
    of its own, outside OPENS_SESSIONS: "module: what"."""
    found = []
    for name, source in sorted(sources.items()):
        tree = ast.parse(source)
        drivers_connect = {  # connect or create_pool imported by name from a driver
            a.asname or a.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] in _DRIVERS
            for a in node.names
            if a.name in ("connect", "create_pool")
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                module = node.module if isinstance(node, ast.ImportFrom) else None
                if "contextvars" in {module, *(a.name for a in node.names)}:
                    found.append(f"{name}: imports contextvars")
            elif (
                isinstance(node, ast.Call)
                and not _under(name, OPENS_SESSIONS)
                and (opened := _opens(node, drivers_connect)) is not None
            ):
                found.append(f"{name}: {opened}()")
    return found


def test_nothing_below_the_entry_points_finds_its_sessions_on_its_own() -> None:
    """Sessions and storage come from the context a module is handed, never from ambient
    state (a ContextVar) nor opened on the spot (docs/architecture.md, "The context")."""
    sources = {n: p.read_text() for n, p in modules().items() if _under(n, ("archiver",))}
    assert ambient_state_and_own_sessions(sources) == []
    caught = ambient_state_and_own_sessions(
        {
            "archiver.ok": "async def f(ctx):\n    async with ctx.catalog() as c: ...",
            "archiver.a": "from contextvars import ContextVar",
            "archiver.b": "from archiver import db\nasync def f(u):\n    await db.connect(u)",
            "archiver.c": "def f(s):\n    return open_storage(s)",
            "archiver.d": "import psycopg\ndef f(u):\n    psycopg.connect(u)",
            "archiver.e": "from archiver.db import connect as c\nasync def f(u):\n    await c(u)",
            "archiver.f": "def f(connect):\n    connect()",
            "archiver.serve.e": "def f(u):\n    open_bulk(u)",
        }
    )
    assert caught == [
        "archiver.a: imports contextvars",
        "archiver.b: db.connect()",
        "archiver.c: open_storage()",
        "archiver.d: psycopg.connect()",
        "archiver.e: c()",
    ]


def test_no_module_is_named_like_a_package_it_is_not_part_of() -> None:
    """`archiver/serve/archive.py` read as part of `archiver/archive/`: a reader following
    a name should land in the package it names."""
    ours = {n: p for n, p in modules().items() if _under(n, ("archiver",))}
    packages = {n.rsplit(".", 1)[-1] for n, p in ours.items() if p.name == "__init__.py"}
    wrong = sorted(
        n
        for n, p in ours.items()
        if p.name != "__init__.py"
        and p.stem in packages
        and not n.startswith(f"archiver.{p.stem}.")
    )
    assert wrong == []


def test_every_archiver_module_has_a_layer() -> None:
    lost = [
        n
        for n in modules()
        if _under(n, ("archiver",)) and not _under(n, ("archiver.testing",)) and layer_of(n) is None
    ]
    assert not lost, f"modules in no layer of LAYERS: {lost}"


def test_no_import_goes_up_the_layers() -> None:
    assert imports_up(graph()) == []
    # the rule sees one: the data path reaching into the pipeline
    up = {
        "archiver.ledger": frozenset({"archiver.archive.names"}),
        "archiver.archive.names": frozenset(),
    }
    assert imports_up(up) == ["archiver.ledger imports archiver.archive.names, a layer up"]


def test_no_test_module_imports_another() -> None:
    assert importing_test_modules(graph()) == []
    both = {
        "tests.integration.test_erase": frozenset({"tests.integration.test_console"}),
        "tests.integration.test_console": frozenset(),
    }
    assert importing_test_modules(both) == [
        "tests.integration.test_erase imports tests.integration.test_console"
    ]


KIND_NAMES = {"archive", "publish", "purge", "noop"}  # archiver.kinds.registry's names


def kind_branches(source: str) -> list[str]:
    """Where code names one job kind: a `*_TASK` constant, or a kind's name compared.
    The worker and its maintenance ask archiver.kinds instead."""
    found = []
    for node in ast.walk(ast.parse(source)):
        named = (isinstance(node, ast.Attribute) and node.attr.endswith("_TASK")) or (
            isinstance(node, ast.Name) and node.id.endswith("_TASK")
        )
        compared = isinstance(node, ast.Compare) and any(
            isinstance(c, ast.Constant) and c.value in KIND_NAMES
            for c in [node.left, *node.comparators]
        )
        if named or compared:
            found.append(f"line {getattr(node, 'lineno', 0)}: {ast.unparse(node)}")
    return found


def test_the_worker_never_branches_on_a_job_kind() -> None:
    for name in ("archiver.worker", "archiver.maintenance"):
        assert kind_branches(modules()[name].read_text()) == [], name
    # the rule sees one: the worker's old branch
    old = "if job.task_name == jobqueue.PURGE_TASK:\n    pass\nif kind == 'publish':\n    pass"
    assert sorted(kind_branches(old)) == [
        "line 1: jobqueue.PURGE_TASK",
        "line 3: kind == 'publish'",
    ]


def test_modules_stay_short_unless_named() -> None:
    allowed = long_module_exceptions()
    too_long = {
        str(path.relative_to(ROOT)): n
        for path in modules().values()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    unexplained = {p: n for p, n in too_long.items() if p not in allowed}
    assert not unexplained, f"over {MAX_LINES} lines, not in docs/architecture.md: {unexplained}"
    stale = allowed - too_long.keys()
    assert not stale, f"named as long in docs/architecture.md but no longer are: {stale}"


def test_no_module_only_forwards() -> None:
    for name, path in modules().items():
        body = ast.parse(path.read_text()).body
        statements = [
            s
            for s in body
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
            and not (isinstance(s, ast.ImportFrom) and s.module == "__future__")
        ]
        forwards = statements and all(
            isinstance(s, ast.Import | ast.ImportFrom)
            or (
                isinstance(s, ast.Assign)
                and any(getattr(t, "id", "") == "__all__" for t in s.targets)
            )
            for s in statements
        )
        assert not forwards, f"{name} only re-exports what other modules define"


def test_every_package_ships_in_the_wheel() -> None:
    """pyproject.toml lists the packages by hand: a new one left out installs nothing
    (archiver/files/ did, and only test_wheel's wheel noticed)."""
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    packages = {
        module_name(path.parent / "__init__.py")
        for path in (ROOT / "archiver").rglob("__init__.py")
    }
    assert packages - listed == set(), "packages missing from pyproject.toml"


Declared = dict[str, dict[str, tuple[str, str]]]  # family -> command -> (function, module)


def declared_commands() -> Declared:
    """Each command family's commands, as its add_parsers declares them: the function
    each one runs and the module that function lives in."""
    import argparse

    from archiver import commands
    from archiver.commands.args import Subcommands

    found: Declared = {}
    for family in commands.FAMILIES:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        family.add_parsers(Subcommands(sub, argparse.ArgumentParser(add_help=False)))
        found[family.__name__] = {
            name: (p.get_default("func").__name__, p.get_default("func").__module__)
            for name, p in sub.choices.items()
        }
    return found


def commands_not_declared_one_way(declared: Declared, cli_source: str) -> list[str]:
    """The one way to add a command (archiver/commands/__init__.py): its parser and its
    `cmd_<name>` in the same family module; cli.py declares none."""
    wrong = [
        f"{name}: runs {module}.{func}, declared in {family}"
        for family, named in declared.items()
        for name, (func, module) in named.items()
        if func != "cmd_" + name.replace("-", "_") or module != family
    ]
    if "add_parser(" in cli_source or "set_defaults(" in cli_source:
        wrong.append("archiver/cli.py declares a command")
    return wrong


def test_every_command_is_declared_one_way() -> None:
    from archiver.cli import build_parser

    declared = declared_commands()
    cli = (ROOT / "archiver" / "cli.py").read_text()
    assert commands_not_declared_one_way(declared, cli) == []
    every = {name for named in declared.values() for name in named}
    [sub] = [a for a in build_parser()._actions if isinstance(a.choices, dict)]
    assert every == set(sub.choices or {})  # every command the CLI has is in a family
    # the rule sees the old shape: a handler in one module, its arguments in another
    old = {"archiver.commands.housekeeping": {"purge": ("cmd_purge", "archiver.commands_x")}}
    assert commands_not_declared_one_way(old, 'p = sub.add_parser("migrate")') == [
        "purge: runs archiver.commands_x.cmd_purge, declared in archiver.commands.housekeeping",
        "archiver/cli.py declares a command",
    ]


# What an operator does to jobs and tables: the store's functions for it, and the audit.
OPERATOR_CALLS = frozenset(
    ("cancel", "retry", "pause_job", "resume_job", "pause_table", "resume_table", "set_limits")
)


def operator_calls(source: str) -> list[str]:
    """Where code changes a job or a table as an operator would (`jobs.cancel(…)`, …) or
    writes the audit (`audit.record(…)`, a Queue's `record_action(…)`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            name = owner.id if isinstance(owner, ast.Name) else ""
            if (
                (name == "jobs" and node.func.attr in OPERATOR_CALLS)
                or (name == "audit" and node.func.attr == "record")
                or node.func.attr == "record_action"  # the Queue's audit of an action
            ):
                found.append(f"line {node.lineno}: {name}.{node.func.attr}")
    return found


def test_operator_actions_happen_in_one_module() -> None:
    """The CLI and the console act through archiver.operations.actions alone."""
    for name, path in modules().items():
        mine = name == "archiver.operations.actions" or _under(
            name, ("archiver.store", "archiver.testing")
        )
        if mine or not _under(name, ("archiver",)):
            continue
        assert operator_calls(path.read_text()) == [], name
    # the rule sees the shape it replaces: a command calling the store and the audit itself
    old = (
        "async def cmd_retry(conn, job_id):\n"
        "    await jobs.retry(conn, job_id)\n"
        "    await audit.record(conn, 'retry', f'job {job_id}', 'queued again')\n"
    )
    assert operator_calls(old) == ["line 2: jobs.retry", "line 3: audit.record"]


# A benchmark's figure in a docstring or comment: "measured", a duration in ms, CPU-s, an
# approximate time or a range of times ("~2.9 s", "0.35-0.5 s"), a range of MB ("185-205
# MB"). A setting ("every 0.3 s", "8 MB batches") is not one. Figures live in docs/.
FIGURE = re.compile(
    r"\bmeasured\b|\d ?ms\b|CPU-s|~\d+(\.\d+)? s\b|\d-\d+(\.\d+)? s\b|\d+-\d+ MB", re.I
)


def quoted_figures(source: str) -> list[str]:
    """The comments and docstrings of `source` that quote a benchmark figure."""
    import io
    import tokenize

    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and FIGURE.search(token.string):
            found.append(f"line {token.start[0]}: {token.string.strip()}")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            figure = FIGURE.search(str(node.value.value))
            if figure:
                found.append(f"line {node.lineno}: {figure.group(0)}")
    return found


def test_no_docstring_or_comment_quotes_a_benchmark_figure() -> None:
    for name, path in modules().items():
        if _under(name, ("archiver",)):
            assert quoted_figures(path.read_text()) == [], name
    old = (
        "def read():\n"
        '    """Reading every old row cost 0.45 s of its ~2.9 s (measured here)."""\n'
        "    # ~3 ms of this process's CPU, against ~29 ms\n"
    )
    assert quoted_figures(old) == ["line 3: # ~3 ms of this process's CPU, against ~29 ms",
                                   "line 2: ~2.9 s"]  # fmt: skip


PUBLISHER_LOCK = ("delta_lock", "delta_unlock", "delta_try_lock", "delta_locked")


def lock_queries(source: str) -> list[str]:
    """Where code names one of the publisher lock's queries (`query("delta_lock")`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and node.value in PUBLISHER_LOCK:
            found.append(f"line {node.lineno}: {node.value}")
    return found


def test_the_publisher_lock_has_one_owner() -> None:
    """archiver.store.publisher_lock alone takes, checks and releases a Delta table's publisher
    lock; the publisher, the reaping of retired files and a rehydration call it."""
    for name, path in modules().items():
        if _under(name, ("archiver",)) and name != "archiver.store.publisher_lock":
            assert lock_queries(path.read_text()) == [], name
    old = 'await conn.execute(db.query("delta_lock"), here, t)\n'
    assert lock_queries(old) == ["line 1: delta_lock"]


STATE_TABLES = (
    "background_jobs", "archive_files", "archive_ledger", "delta_tables", "archiver_audit",
    "archiver_paused_tables", "archiver_job_counts", "archiver_maintenance",
    "archiver_file_counts", "archive_verifications", "archiver_reads", "archive_access",
)  # fmt: skip
STATE_SQL = re.compile(r"\b(FROM|JOIN|UPDATE|INTO)\s+(" + "|".join(STATE_TABLES) + r")\b", re.I)


def inline_state_sql(source: str) -> list[str]:
    """The string constants of `source` that are SQL on a state table."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            hit = STATE_SQL.search(node.value)
            if hit:
                found.append(f"line {node.lineno}: {hit.group(0)}")
    return found


STATE_VIEWS = (
    "archiver_archive_files", "archiver_failed_jobs", "archiver_job_summary",
    "archiver_paused", "archiver_running_jobs", "archive_reads",
)  # fmt: skip
STATE_READ = re.compile(
    r"\b(FROM|JOIN|UPDATE|INTO)\s+(" + "|".join(STATE_TABLES + STATE_VIEWS) + r")\b", re.I
)


def _called(node: ast.Call) -> str | None:
    func = node.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)


def named_state_reads(source: str) -> list[str]:
    """The calls in `source` that run a named statement reading or writing a state table
    or one of the ops views over them (a lock's statement, or a look-up of PostgreSQL's
    own catalog, reads neither): `query("name")`, and a call handing the name to any
    helper of the module's that looks a name it is given up (`self._rows("delta_state")`,
    where `_rows(self, name)` runs `query(name)`)."""
    from archiver.db import _queries

    known = _queries()
    tree = ast.parse(source)
    runners = {"query"}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            given = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Call)
                    and _called(node) == "query"
                    and node.args
                    and isinstance(node.args[0], ast.Name)
                    and node.args[0].id in given
                ):
                    runners.add(fn.name)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) in runners and node.args:
            name = node.args[0]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                sql = known.get(name.value, "")
                if STATE_READ.search(re.sub(r"--[^\n]*", "", sql)):
                    found.append(f"line {node.lineno}: {name.value}")
    return sorted(found)


def test_state_tables_are_read_through_the_store() -> None:
    """Outside store/, no module runs a named statement on a state table or an ops view:
    it calls the owner's typed function (the soak's checker apart, as above)."""
    wrong = {
        name: found
        for name, path in modules().items()
        if _under(name, ("archiver",)) and not _under(name, ("archiver.store", "archiver.testing"))
        if (found := named_state_reads(path.read_text()))
    }
    assert wrong == {}
    # the shapes reads had before: the console and the job's catalog running named reads
    old = 'rows = await conn.fetch(query("table_ledger"), t)\nfetch(c, query("next_part"))\n'
    assert named_state_reads(old) == ["line 1: table_ledger", "line 2: next_part"]
    # and a helper of the module's own handed a statement's name, as the publisher had
    helper = (
        "def _rows(self, name, *params):\n"
        "    return run(query(name), params)\n"
        'n, p = self._rows("delta_state")[0]\n'
        'choose("cancel")\n'
    )
    assert named_state_reads(helper) == ["line 3: delta_state"]


def test_sql_on_a_state_table_is_written_in_the_store() -> None:
    """Every statement on archiver's own tables is named in a store/*.sql file and read
    or written through its store module (the soak's checker, which reads them with code
    of its own, apart)."""
    for name, path in modules().items():
        if not _under(name, ("archiver",)) or _under(name, ("archiver.store", "archiver.testing")):
            continue
        assert inline_state_sql(path.read_text()) == [], name
    old = 'CATALOGUED = "SELECT EXISTS (SELECT 1 FROM archive_files WHERE source_table = $1)"\n'
    assert inline_state_sql(old) == ["line 1: FROM archive_files"]


def commit_hashes(text: str) -> list[str]:
    """Words that look like a commit hash: 7-40 hex digits, letters and digits both."""
    words = re.findall(r"(?<![.\w])[0-9a-f]{7,40}(?![.\w])", text)
    return [w for w in words if re.search("[a-f]", w) and re.search("[0-9]", w)]


def test_the_docs_say_what_is_not_which_commit() -> None:
    """History stays in git: README and docs/ name at most a handful of commits (an
    upstream fix pinned, the bench's baseline)."""
    root = Path(__file__).resolve().parents[2]
    named = {
        str(path.relative_to(root)): commit_hashes(path.read_text())
        for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    }
    assert sum(len(h) for h in named.values()) <= 6, {k: v for k, v in named.items() if v}
    assert commit_hashes("at 82728a7 on 2026-11-24; 1.2345678901234568e+29") == ["82728a7"]


MAX_FUNCTION_LINES = 80


def long_functions(source: str) -> list[str]:
    """The functions of `source` (methods and nested ones each on their own) over
    MAX_FUNCTION_LINES lines, decorators and docstring included."""
    return [
        f"line {node.lineno}: {node.name} ({length} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (length := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES  # type: ignore[operator]
    ]


def test_no_function_is_over_80_lines() -> None:
    found = {
        name: long
        for name, path in modules().items()
        if _under(name, ("archiver",)) and (long := long_functions(path.read_text()))
    }
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines: {found}"
    # the rule sees one: a function of 81 lines
    body = "".join(f"    x = {i}\n" for i in range(MAX_FUNCTION_LINES))
    assert long_functions(f"def f():\n{body}\n\ndef g():\n    pass\n") == ["line 1: f (81 lines)"]
