"""A whole file goes back by one COPY straight into its table where every column arrives
in its type's own binary form (archiver.restore.direct), and by the staging table's
INSERT … SELECT otherwise: either way each value comes back exactly as it was archived,
compared as PostgreSQL prints the whole row."""

from __future__ import annotations

import pytest

from tests.support.harness import Harness

SCHEMA = """
CREATE TYPE mood AS ENUM ('calm', 'tense', 'élan');
CREATE TABLE shipments (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at timestamptz NOT NULL,
    small      smallint, medium integer, ratio double precision, level real,
    done       boolean, due date, local_at timestamp,
    amount     numeric(12,2), code character(3), label character varying(12), body text,
    doc        json, meta jsonb, ref uuid, mood mood, blob bytea,
    tags       text[], counts bigint[], flags boolean[],
    doubled    bigint GENERATED ALWAYS AS (medium * 2) STORED
);
"""
FILL = """
INSERT INTO shipments (created_at, small, medium, ratio, level, done, due, local_at,
                       amount, code, label, body, doc, meta, ref, mood, blob, tags, counts, flags)
SELECT timestamptz '2024-06-01 00:00+00' - make_interval(hours => g),
       CASE WHEN g % 5 = 0 THEN NULL ELSE (g % 30000)::smallint END,
       CASE WHEN g % 5 = 1 THEN NULL ELSE g * 1000 END,
       CASE g % 7 WHEN 0 THEN 'NaN'::float8 WHEN 1 THEN -0.0 WHEN 2 THEN NULL ELSE g / 3.0 END,
       CASE WHEN g % 5 = 2 THEN NULL ELSE (g / 7.0)::real END,
       CASE WHEN g % 3 = 0 THEN NULL ELSE g % 2 = 0 END,
       date '1999-12-31' + g,
       timestamp '1970-01-01' + make_interval(days => g, secs => g / 1000.0),
       CASE WHEN g % 4 = 0 THEN NULL ELSE round((g - 250) * 13.37, 2) END,
       (ARRAY['EUR', 'US', NULL])[1 + g % 3],
       CASE WHEN g % 6 = 0 THEN NULL ELSE 'ünï ' || g END,
       repeat('x', g % 40) || E'\\n\\t"\\\\',
       CASE WHEN g % 5 = 3 THEN NULL ELSE ('{"b": ' || g || ',  "a": [1, "two"]}')::json END,
       CASE WHEN g % 5 = 4 THEN NULL ELSE jsonb_build_object('k', g, 'nested', jsonb_build_object('ü', g % 2 = 0)) END,
       CASE WHEN g % 8 = 0 THEN NULL ELSE md5(g::text)::uuid END,
       CASE WHEN g % 9 = 0 THEN NULL ELSE (ARRAY['calm', 'tense', 'élan'])[1 + g % 3]::mood END,
       CASE WHEN g % 10 = 0 THEN NULL ELSE decode(md5(g::text), 'hex') || '\\x00'::bytea END,
       CASE g % 4 WHEN 0 THEN NULL WHEN 1 THEN '{}' ELSE ARRAY['a' || g, NULL, 'ü'] END,
       CASE WHEN g % 4 = 0 THEN NULL ELSE ARRAY[g, -g, 9223372036854775807] END,
       CASE WHEN g % 4 = 1 THEN NULL ELSE ARRAY[true, NULL, false] END
FROM generate_series(1, 600) g;
"""


def rows(h: Harness) -> list[str]:
    return [r["t"] for r in h.sql("SELECT t::text AS t FROM shipments t ORDER BY id")]


def restore_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if " rows restored" in line]


@pytest.fixture
def shipped(h: Harness) -> list[str]:
    h.sql(SCHEMA)
    h.sql(FILL)
    before = rows(h)
    h.archive("--table", "shipments", "--before", "2025-01-01", "--chunk-rows", "200")
    assert h.value("SELECT count(*) FROM shipments") == 0
    return before


def test_every_type_it_takes_goes_straight_in_and_back_exactly(
    h: Harness, shipped: list[str]
) -> None:
    done = h.cli("restore", "--table", "shipments")
    assert done.returncode == 0, done.stderr
    lines = restore_lines(done.stderr)
    assert len(lines) == 3 and all("by COPY straight in" in line for line in lines), lines
    assert rows(h) == shipped  # every value, the generated column recomputed alike
    assert h.value("SELECT count(*) FROM archive_files WHERE state = 'committed'") == 0
    h.sql("INSERT INTO shipments (created_at) VALUES (now())")  # the identity goes on
    assert h.value("SELECT max(id) FROM shipments") == 601


def test_a_special_value_a_rule_or_a_skipping_trigger_takes_the_staging_path(
    h: Harness, shipped: list[str]
) -> None:
    """A file holding 'infinity' (kept by its __pg_text companion) is staged, the others
    go straight in; a table with an INSERT rule or a BEFORE INSERT trigger is staged."""
    h.sql("TRUNCATE shipments")
    h.sql("INSERT INTO shipments (created_at, local_at) VALUES ('2023-01-01', 'infinity')")
    h.archive("--table", "shipments", "--before", "2025-01-01")
    h.sql("CREATE TABLE shipments_log (n int)")
    h.sql(
        "CREATE RULE logged AS ON INSERT TO shipments DO ALSO INSERT INTO shipments_log VALUES (1)"
    )
    done = h.cli("restore", "--table", "shipments")
    assert done.returncode == 0, done.stderr
    lines = restore_lines(done.stderr)
    assert len(lines) == 4 and not any("straight" in line for line in lines), lines
    assert h.value("SELECT count(*) FROM shipments_log") == 601  # INSERT, rule applied
    restored = rows(h)
    assert restored[:-1] == shipped and "infinity" in restored[-1]
    # a range moved back under the rule: the rows it took found by their keys as text
    h.archive("--table", "shipments", "--before", "2025-01-01")
    part = h.cli("restore", "--table", "shipments", "--from", "2024-05-20")
    assert part.returncode == 0, part.stderr
    back = h.value("SELECT count(*) FROM shipments")
    assert 0 < back < 601 and h.value("SELECT count(*) FROM shipments_log") == 601 + back
    assert h.value("SELECT count(*) FROM shipments WHERE created_at < '2024-05-20'") == 0
    live = {r["id"] for r in h.sql("SELECT id FROM shipments")}
    archived = [r["id"] for r in h.archived("public.shipments")]
    assert len(archived) == 601 - back and not live & set(archived)  # each row in one place
    done = h.cli("restore", "--table", "shipments")  # the rest, under the rule still
    assert done.returncode == 0, done.stderr
    assert rows(h) == restored
    h.sql("DROP RULE logged ON shipments")
    h.archive("--table", "shipments", "--before", "2025-01-01", "--chunk-rows", "1000")
    done = h.cli("restore", "--table", "shipments")  # 601 rows, one file with infinity
    assert done.returncode == 0 and not any("straight" in x for x in restore_lines(done.stderr))
    h.archive("--table", "shipments", "--before", "2025-01-01", "--chunk-rows", "300")
    h.sql(
        "CREATE FUNCTION keep_all() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;"
        "CREATE TRIGGER keep_all BEFORE INSERT ON shipments FOR EACH ROW EXECUTE FUNCTION keep_all()"
    )
    done = h.cli("restore", "--table", "shipments")
    assert done.returncode == 0, done.stderr
    assert not any("straight" in line for line in restore_lines(done.stderr))
    assert rows(h)[:-1] == shipped


def test_a_key_already_there_refuses_the_whole_restore_in_one_line(
    h: Harness, shipped: list[str]
) -> None:
    h.sql("INSERT INTO shipments (id, created_at) OVERRIDING SYSTEM VALUE VALUES (450, now())")
    done = h.cli("restore", "--table", "shipments")
    assert done.returncode == 1 and done.stderr.strip().splitlines()[-1].startswith(
        "archiver: error: archived rows of"
    ), done.stderr
    assert "(constraint shipments_pkey)" in done.stderr
    assert h.value("SELECT count(*) FROM shipments") == 1  # nothing restored
    assert h.value("SELECT count(*) FROM archive_files WHERE state = 'committed'") == 3
