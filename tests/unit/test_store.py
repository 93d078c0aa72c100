"""The single-writer rule of archiver/store: each of archiver's own tables has one owner
module, the only code whose SQL writes it. Read from the source: every named query of
store/*.sql and every string constant of the package's Python."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "archiver" / "store"

# Each state table (every table sql/ creates) and the store module that owns it.
OWNERS = {
    "archiver_reads": "read_audit",
    "archive_access": "access",
    "background_jobs": "jobs",
    "archiver_paused_tables": "jobs",
    "archiver_job_counts": "jobs",
    "archiver_maintenance": "jobs",
    "archive_files": "archive_files",
    "archiver_file_counts": "archive_files",
    "archive_verifications": "archive_files",
    "archive_ledger": "ledger",
    "delta_tables": "publications",
    "archiver_audit": "audit",
    # the Iceberg JDBC catalog's tables: pyiceberg writes them through its SqlCatalog;
    # archiver's one statement on them drops a table no longer kept (iceberg_dropped)
    "iceberg_tables": "publications",
    "iceberg_namespace_properties": "publications",
}
# Statements that write a second table in the same statement, by design (see
# store/publications.py): named here, so a fourth is a decision, not a slip.
JOINT = {
    "delta_number": {"delta_tables", "archive_files"},
    "delta_published": {"delta_tables", "archive_files"},
    "delta_forget": {"delta_tables", "archive_files"},
    "iceberg_dropped": {"delta_tables", "iceberg_tables"},
}
_WRITE = re.compile(
    r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE(?:\s+TABLE)?|MERGE\s+INTO|COPY)"
    r"\s+(?:ONLY\s+)?\"?(\w+)\"?",
    re.IGNORECASE,
)


def written(sql: str) -> set[str]:
    """The state tables a statement writes (comments ignored)."""
    code = re.sub(r"--[^\n]*", "", sql)
    return {t.lower() for t in _WRITE.findall(code) if t.lower() in OWNERS}


def named_queries() -> dict[str, tuple[str, str]]:
    """Every named query of store/*.sql: name -> (the file's owner name, its SQL)."""
    found: dict[str, tuple[str, str]] = {}
    for path in sorted(STORE.glob("*.sql")):
        parts = re.split(r"^-- name: (\w+)\s*$", path.read_text(), flags=re.M)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            assert name not in found, f"two queries named {name}"
            found[name] = (path.stem, body)
    return found


def misplaced(queries: dict[str, tuple[str, str]]) -> list[str]:
    """Named queries writing a table from a file other than its owner's (or, beyond
    JOINT, writing two)."""
    wrong = []
    for name, (owner, sql) in queries.items():
        tables = written(sql)
        if len(tables) > 1 and JOINT.get(name) != tables:
            wrong.append(f"{name} writes {sorted(tables)} in one statement")
        wrong += [
            f"{name} writes {t} from store/{owner}.sql (its owner: store/{OWNERS[t]})"
            for t in tables
            if OWNERS[t] != owner and not (name in JOINT and t in JOINT[name])
        ]
    return sorted(wrong)


def python_sources() -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): path.read_text()
        for path in (ROOT / "archiver").rglob("*.py")
        if "testing" not in path.parts
    }


def strays(sources: dict[str, str], queries: dict[str, tuple[str, str]]) -> list[str]:
    """SQL writing a state table outside its owner: a write query's name used by any
    module but its owner's, or SQL written inline in Python."""
    writers = {name: owner for name, (owner, sql) in queries.items() if written(sql)}
    wrong = []
    for path, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            line = getattr(node, "lineno", 0)
            if (name := _looked_up(node)) is not None:
                owner = writers.get(name)
                if owner is not None and path != f"archiver/store/{owner}.py":
                    wrong.append(f"{path}:{line} runs {name}, which store/{owner} owns")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                wrong += [
                    f"{path}:{line} writes {sorted(t)} inline" for t in [written(node.value)] if t
                ]
    return sorted(wrong)


def _looked_up(node: ast.AST) -> str | None:
    """The name in `query("name")` (archiver.db's look-up of a named query)."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if called == "query" and isinstance(node.args[0].value, str):
            return node.args[0].value
    return None


def test_every_state_table_has_one_owner() -> None:
    created = {
        t.lower()
        for path in (ROOT / "sql").glob("*.sql")
        for t in re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", path.read_text())
    }
    assert created == set(OWNERS), "a table of sql/ with no owner, or an owner of none"
    for owner in set(OWNERS.values()):
        assert (STORE / f"{owner}.py").exists() and (STORE / f"{owner}.sql").exists()


def test_each_named_query_writes_only_its_owners_tables() -> None:
    queries = named_queries()
    assert len(queries) > 100 and sum(bool(written(sql)) for _, sql in queries.values()) > 40
    assert misplaced(queries) == []
    # the rule sees one: the ledger's file claims where they were before the store
    claim = queries["ledger_claim_files"][1]
    assert misplaced({"ledger_claim_files": ("ledger", claim)}) == [
        "ledger_claim_files writes archive_files from store/ledger.sql "
        "(its owner: store/archive_files)"
    ]
    both = "WITH x AS (UPDATE archive_files SET x = 1) UPDATE background_jobs SET y = 2"
    assert misplaced({"q": ("jobs", both)}) == [
        "q writes ['archive_files', 'background_jobs'] in one statement",
        "q writes archive_files from store/jobs.sql (its owner: store/archive_files)",
    ]


def test_only_the_owner_runs_a_write() -> None:
    queries = named_queries()
    assert strays(python_sources(), queries) == []
    # the rule sees both shapes a write took before the store: a named write run by a
    # feature (tiers marking files offline), and SQL inline in Python
    old = {
        "archiver/operations/tiers.py": 'await conn.execute(query("files_tier"), ids, tier)',
        "archiver/live.py": 'SQL = "DELETE FROM background_jobs WHERE id = $1"',
    }
    assert strays(old, queries) == [
        "archiver/live.py:1 writes ['background_jobs'] inline",
        "archiver/operations/tiers.py:1 runs files_tier, which store/archive_files owns",
    ]
