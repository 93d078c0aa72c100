"""Restore onto the table as it is years later: columns matched by name, added columns
take their defaults, widened types cast, a value that no longer fits named, generated
columns computed again, identity values kept, dropped columns refused unless asked, one
restore across files written under different schema versions."""

from __future__ import annotations

from tests.support import assert_refused, run_cli, sql, sql_value, start_worker
from tests.support.harness import Harness

TABLE = """
CREATE TABLE items (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at date NOT NULL,
    qty        integer NOT NULL,
    price      numeric(8,2) NOT NULL,
    total      numeric GENERATED ALWAYS AS (qty * price) STORED,
    weight     integer,
    old_col    text,
    note       varchar(20)
);
INSERT INTO items (created_at, qty, price, weight, old_col, note)
SELECT date '2020-01-01' + g, g, g * 1.5, g * 10, 'old ' || g,
       CASE WHEN g <= 40 THEN 'note-' || lpad(g::text, 6, '0') ELSE 'n' END
FROM generate_series(1, 60) g;
"""


def archive(env: dict[str, str], before: str) -> None:
    assert run_cli(env, "enqueue", "--table", "items", "--before", before).returncode == 0
    assert start_worker(env, "--burst").wait(60) == 0


def test_restore_onto_a_changed_schema(h: Harness) -> None:
    url = h.url
    sql(url, TABLE)
    original = {r["id"]: dict(r) for r in sql(url, "SELECT * FROM items WHERE id <= 40")}
    archive(h.env, "2020-01-22")  # version 1: ids 1-20
    sql(url, "ALTER TABLE items ADD COLUMN added text DEFAULT 'fresh'")
    sql(url, "ALTER TABLE items ALTER COLUMN weight TYPE bigint")
    sql(url, "UPDATE items SET added = 'v2' WHERE id <= 40")
    archive(h.env, "2020-02-11")  # version 2: ids 21-40, with `added`
    sql(url, "ALTER TABLE items DROP COLUMN old_col")
    assert sql_value(url, "SELECT count(*) FROM items") == 20

    sql(url, "ALTER TABLE items ALTER COLUMN note TYPE varchar(5)")
    narrow = h.cli("restore", "--table", "items", "--ignore-dropped-columns")
    assert_refused(
        narrow,
        "column 'note': an archived character varying(20) value does not fit",
        "character varying(5)",
        code=1,
    )
    sql(url, "ALTER TABLE items ALTER COLUMN note TYPE text")

    dropped = h.cli("restore", "--table", "items")
    assert_refused(
        dropped, "archived columns old_col no longer exist in", "--ignore-dropped-columns", code=1
    )
    assert sql_value(url, "SELECT count(*) FROM items") == 20

    dry = h.cli("restore", "--table", "items", "--ignore-dropped-columns", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    said = [line for line in dry.stdout.splitlines() if ": columns: " in line]
    assert len(said) == 2, dry.stdout  # one line per schema version
    assert "added added (its default)" in said[0] and "weight: integer -> bigint (cast)" in said[0]
    assert "added added" not in said[1] and "weight" not in said[1]
    for line in said:
        assert "dropped old_col (left out)" in line and "generated total (computed again)" in line
        assert "note: character varying(20) -> text (cast)" in line
    assert (
        "would restore 40 rows from 2 files into public.items; they would leave the archive: "
        "2 files emptied" in dry.stdout
    )
    assert sql_value(url, "SELECT count(*) FROM items") == 20

    done = h.cli("restore", "--table", "items", "--ignore-dropped-columns")
    assert done.returncode == 0, done.stderr
    back = {r["id"]: dict(r) for r in sql(url, "SELECT * FROM items WHERE id <= 40")}
    assert sorted(back) == sorted(original)  # identity values kept
    for i, row in back.items():
        was = original[i]
        fields = ("created_at", "qty", "price", "weight", "note")
        assert [row[f] for f in fields] == [was[f] for f in fields]
        assert row["total"] == row["qty"] * row["price"]  # computed again
        assert row["added"] == ("fresh" if i <= 20 else "v2")
    # the identity goes on from where it was: a new row does not collide
    assert (
        sql_value(
            url, "INSERT INTO items (created_at, qty, price) VALUES (now(), 1, 1) RETURNING id"
        )
        == 61
    )


def test_a_retyped_key_under_an_insert_rule_moves_back_once(h: Harness) -> None:
    """A key retyped since it was archived (numeric(10,1) to numeric(10,2): 0.5 prints
    0.50) in a table with a DO ALSO rule ON INSERT: the rows a ranged restore put back
    leave the archive, the others stay in it, each row in one place."""
    from decimal import Decimal

    url = h.url
    sql(
        url,
        "CREATE TABLE prices (k numeric(10,1) PRIMARY KEY, created_at date NOT NULL);"
        "INSERT INTO prices SELECT g / 2.0, date '2020-01-01' + g FROM generate_series(1, 60) g;"
        "CREATE TABLE prices_log (n int);"
        "CREATE RULE logged AS ON INSERT TO prices DO ALSO INSERT INTO prices_log VALUES (1)",
    )
    assert run_cli(h.env, "enqueue", "--table", "prices", "--before", "2021-01-01").returncode == 0
    assert start_worker(h.env, "--burst").wait(60) == 0
    sql(url, "ALTER TABLE prices ALTER COLUMN k TYPE numeric(10,2)")
    done = h.cli("restore", "--table", "prices", "--from", "2020-02-01")
    assert done.returncode == 0, done.stderr
    live = {Decimal(r["k"]) for r in sql(url, "SELECT k::text AS k FROM prices")}
    archived = [Decimal(str(r["k"])) for r in h.archived("public.prices")]
    assert len(live) == 30 and len(archived) == 30, (len(live), len(archived))
    assert not live & set(archived)  # each row in one place
    assert sql_value(url, "SELECT count(*) FROM prices_log") == 30  # the rule ran for each
