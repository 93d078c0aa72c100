"""`archiver query` only reads: every statement that could write to local files, to
storage or to the engine is refused in one line before anything runs (before, a
`COPY … TO` wrote its file and then said the statement returned no rows)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import Harness


def refused(h: Harness, sql: str) -> str:
    done = h.cli("query", sql)
    assert done.returncode == 1, (sql, done.stdout, done.stderr)
    assert not done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("archiver: error: query: "), done.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("COPY (SELECT 42 AS x) TO '{path}'", "COPY refused"),
        ("COPY (SELECT 42 AS x) TO '{path}' (FORMAT parquet)", "COPY refused"),
        ("EXPORT DATABASE '{path}'", "EXPORT refused"),
        ("ATTACH '{path}' AS elsewhere", "ATTACH refused"),
        ("INSTALL httpfs", "INSTALL refused"),
        ("LOAD '{path}'", "LOAD refused"),
        ("CREATE TABLE copied AS SELECT 42 AS x", "CREATE refused"),
        ("SET threads = 1", "SET refused"),
        ("EXPLAIN ANALYZE COPY (SELECT 42) TO '{path}'", "EXPLAIN refused"),
        ("SELECT 42; COPY (SELECT 42) TO '{path}'", "2 statements given"),
    ],
)
def test_a_statement_that_writes_is_refused_before_it_runs(
    h: Harness, tmp_path: Path, template: str, says: str
) -> None:
    path = tmp_path / "written"
    line = refused(h, template.format(path=path))
    assert says in line and "nothing ran" in line, line
    assert not path.exists()
    assert not list(tmp_path.iterdir())


def test_a_select_still_runs(h: Harness) -> None:
    done = h.cli("query", "SELECT 42 AS answer", "--format", "csv")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ['"answer"', "42"]
