"""What docs/architecture.md names is there: every file it names (in backticks or in its
diagrams), every method of the context it calls (`ctx.storage()`), every function of a
module it calls by the module's name (`db.query(name)`, `archiver.config.markdown_table()`)
and the signature it gives every command (`cmd_<name>(args, ctx)`). Prose no test reads
drifts; this one is read."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = {".git", ".venv", "node_modules", "build", "clients-venv", "__pycache__"}


@functools.cache
def repository_files() -> tuple[str, ...]:
    found = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if path.is_file() and not SKIPPED & set(rel.parts):
            found.append(rel.as_posix())
    return tuple(found)


def _a_file(name: str) -> bool:
    return any(f == name or f.endswith("/" + name) for f in repository_files())


@functools.cache
def _defined(module: str) -> frozenset[str]:
    """The names defined at the top of an archiver module, and the methods of its classes."""
    base = ROOT / Path(*module.split("."))
    path = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
    if not path.exists():
        return frozenset()
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                names |= {
                    f"{node.name}.{n.name}"
                    for n in node.body
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                }
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return frozenset(names)


def _commands() -> list[tuple[str, list[str]]]:
    """(name, its parameters) of every cmd_ function of archiver/commands/."""
    found = []
    for path in sorted((ROOT / "archiver" / "commands").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith(
                "cmd_"
            ):
                found.append((node.name, [a.arg for a in node.args.args]))
    return found


PATH = re.compile(r"(?<![\w./<-])((?:[\w-]+/)*[\w-]+\.(?:py|sql|toml|conf|sh))(?![\w])")
ALIASES = {"db": "archiver.db", "ctx": "archiver.context.Context"}


def unknown_names(text: str) -> list[str]:
    """What `text` (an architecture document) names that the checkout does not have."""
    quoted = re.findall(r"`([^`\n]+)`", text)
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    unknown = [f"{p} (no such file)" for t in quoted + blocks for p in PATH.findall(t)
               if not _a_file(p)]  # fmt: skip
    for call in re.findall(r"\b((?:archiver\.)?[a-z_]+(?:\.[a-z_]+)*)\(", " ".join(quoted)):
        head, _, name = call.rpartition(".")
        if not head or head.split(".")[0] not in (*ALIASES, "archiver"):
            continue
        module = ALIASES.get(head, head)
        if module.endswith(".Context"):
            if f"Context.{name}" not in _defined(module.rsplit(".", 1)[0]):
                unknown.append(f"{call}() (no such method of the context)")
        elif name not in _defined(module):
            unknown.append(f"{call}() (no such function)")
    commands = _commands()
    for params in re.findall(r"cmd_<name>\(([^)]*)\)", text):
        wanted = [p.strip() for p in params.split(",") if p.strip()]
        wrong = [name for name, got in commands if got != wanted]
        if wrong:
            unknown.append(f"cmd_<name>({params}) ({len(wrong)} commands take otherwise)")
    return unknown


def test_what_the_architecture_names_is_there() -> None:
    assert unknown_names((ROOT / "docs" / "architecture.md").read_text()) == []


def test_a_name_gone_from_the_code_is_found() -> None:
    drifted = """
The write step (`writes.py`) calls `db.query(name)`, `db.nowhere()` and `ctx.storage()`,
`ctx.vanished()`, and `archiver.config.markdown_table()`; each command is
`cmd_<name>(args, settings)`.

```
 2 write    Parquet, streamed (uploads.py)
```
"""
    assert unknown_names(drifted) == [
        "writes.py (no such file)",
        "uploads.py (no such file)",
        "db.nowhere() (no such function)",
        "ctx.vanished() (no such method of the context)",
        f"cmd_<name>(args, settings) ({len(_commands())} commands take otherwise)",
    ]
