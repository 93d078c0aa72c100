"""An import of archiver's own inside a function is there for one reason: the module it
loads brings what the commands that never use it must not pay for at start-up -- a
heavy dependency (the CLI's reports import no pyarrow, Azure SDK, APScheduler, psycopg
or DuckDB: tests/unit/test_imports.py; nor prometheus_client, the worker's and the
console's) or the archive pipeline (`archiver.archive`, some forty modules a report
never runs). Every other import of archiver's own is at the top of its module, where a
reader finds it, and none repeats one made there."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What archiver defers on purpose: imported where a command uses it, never at start-up.
DEFERRED = (
    "pyarrow", "azure", "apscheduler", "adbc_driver_postgresql", "duckdb", "deltalake",
    "starlette", "uvicorn", "jinja2", "pglast", "psycopg", "polars", "pandas",
    "prometheus_client", "pyiceberg", "sqlalchemy",
)  # fmt: skip
PIPELINE = "archiver.archive"


@cache
def modules() -> dict[str, Path]:
    found = {}
    for path in (ROOT / "archiver").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _resolve(name: str) -> str | None:
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """What an import statement names: `a.b` of `import a.b`, `a.b` and `a.b.c` of
    `from a.b import c`, relative ones made absolute."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def _package(name: str) -> str:
    return name if modules()[name].name == "__init__.py" else name.rpartition(".")[0]


def _top_level(name: str) -> list[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported (TYPE_CHECKING's apart)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.append(node)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(ast.parse(modules()[name].read_text()).body)
    return found


@cache
def brings(name: str) -> frozenset[str]:
    """The deferred dependencies importing archiver module `name` loads (its own
    top-level imports, its packages' and theirs, followed)."""
    seen: set[str] = set()
    heavy: set[str] = set()
    todo = [name]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        if module == PIPELINE or module.startswith(PIPELINE + "."):
            heavy.add(PIPELINE)
        parts = module.split(".")
        todo += [
            ".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in modules()
        ]
        for node in _top_level(module):
            for target in _targets(node, _package(module)):
                if (mine := _resolve(target)) is not None:
                    todo.append(mine)
                elif target.split(".")[0] in DEFERRED:
                    heavy.add(target.split(".")[0])
    return frozenset(heavy)


def needless_deferrals(name: str, source: str) -> list[str]:
    """The imports of archiver's own inside functions of module `name` (`source`) that
    defer nothing heavy, or repeat one of its top-level imports."""
    tree = ast.parse(source)
    top = {
        (alias.name, node.module if isinstance(node, ast.ImportFrom) else None)
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            package = _package(name) if name in modules() else name
            loaded = {
                mine
                for target in _targets(node, package)
                if target.startswith("archiver") and (mine := _resolve(target)) not in (None, name)
            }
            if not loaded:
                continue
            shown = max(loaded, key=len)
            module = node.module if isinstance(node, ast.ImportFrom) else None
            if any((alias.name, module) in top for alias in node.names):
                found.append(f"line {node.lineno}: {shown}: imported at the top already")
            elif not any(brings(m) for m in loaded):
                found.append(f"line {node.lineno}: {shown}: defers nothing heavy")
    return found


def test_imports_inside_functions_defer_something_heavy() -> None:
    wrong = {
        name: found
        for name, path in modules().items()
        if not name.startswith("archiver.testing")
        if (found := needless_deferrals(name, path.read_text()))
    }
    assert wrong == {}
    # the rule sees both shapes: a light module deferred, a top-level import repeated
    shapes = (
        "from archiver.errors import InputError\n"
        "def f():\n"
        "    from archiver.ident import quote_ident\n"
        "    from archiver.errors import InputError\n"
        "def g():\n"
        "    from archiver.parquet import writer_options\n"  # brings pyarrow: deferred
    )
    assert needless_deferrals("archiver.example", shapes) == [
        "line 3: archiver.ident: defers nothing heavy",
        "line 4: archiver.errors: imported at the top already",
    ]
    assert "pyarrow" in brings("archiver.parquet")
