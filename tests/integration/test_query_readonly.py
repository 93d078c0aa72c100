"""`archiver query` only reads: every statement that could write to local files, to
storage or to the engine is refused in one line before anything runs (before, a
`COPY … TO` wrote its file and then said the statement returned no rows)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.harness import Harness


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


SOURCE_HINT = "_archiver_source is a column of"  # a candidate then, not the column missing


def test_a_table_with_nothing_archived_is_named_as_such(h: Harness) -> None:
    """DuckDB's own line, and what it cannot know: which tables have an archive here,
    and that `_archiver_source` is a column of those alone."""
    h.sql(
        "CREATE TABLE kept (id int PRIMARY KEY, created_at date);"
        "INSERT INTO kept SELECT i, DATE '2020-01-01' + i FROM generate_series(1, 10) i;"
        "CREATE TABLE never (id int PRIMARY KEY, created_at date);"
        "INSERT INTO never VALUES (1, '2020-01-01')"
    )
    assert "none yet;" in refused(h, "SELECT count(*) FROM never")
    enqueued = h.cli("enqueue", "--table", "kept", "--before", "2020-01-06")
    assert enqueued.returncode == 0, enqueued.stderr
    h.drain()
    line = refused(h, "SELECT count(*) FROM never")
    assert "Table with name never does not exist" in line, line
    assert (
        "(archived tables here: public.kept; a table's live rows are read with --with-live)" in line
    )
    archive_only = refused(h, "SELECT _archiver_source FROM kept")
    assert "(_archiver_source is a column of query --with-live" in archive_only, archive_only
    live = h.cli("query", "--with-live", "SELECT _archiver_source FROM never")
    assert live.returncode == 1 and len(live.stderr.strip().splitlines()) == 1, live.stderr
    assert (
        "_archiver_source is a column of the tables archiver has archived or queued" in live.stderr
    )
    other = h.cli("query", "--with-live", "SELECT customer_id FROM kept")  # _archiver_source
    assert "Referenced column" in other.stderr and SOURCE_HINT not in other.stderr, other.stderr
    both = h.cli("query", "--with-live", "--format", "csv",
                 "SELECT _archiver_source, count(*) FROM kept GROUP BY 1 ORDER BY 1")  # fmt: skip
    assert both.stdout.splitlines()[1:] == ['"archive",4', '"live",6'], both.stdout
