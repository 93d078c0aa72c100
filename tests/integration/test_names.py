"""Names as PostgreSQL reads them, in every command, a policy and the console: a schema
and table of an EF Core or Rails application (`"Sales"."Orders"`, `"CreatedAt"`), a bare
name resolved through the search_path, a name two schemas hold, and a mixed-case name
typed unquoted, which PostgreSQL folds (archiver.ident, source.tables.find_table)."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from tests.support import assert_refused
from tests.support.console import Console
from tests.support.harness import Harness

SCHEMA = """
CREATE SCHEMA "Sales";
CREATE TABLE "Sales"."Orders" (
  "Id" bigint PRIMARY KEY, "CreatedAt" timestamptz NOT NULL,
  "Customer Name" text, "total, eur" numeric(12, 2)
);
CREATE INDEX ON "Sales"."Orders" ("CreatedAt");
INSERT INTO "Sales"."Orders"
SELECT g, timestamptz '2023-01-01' + g * interval '1 hour', 'customer ' || (g % 10), g * 1.5
FROM generate_series(1, 500) g;
CREATE TABLE public.orders (id bigint PRIMARY KEY, created_at timestamptz NOT NULL);
CREATE TABLE "Sales".orders (id bigint PRIMARY KEY, created_at timestamptz NOT NULL);
INSERT INTO "Sales".orders SELECT g, '2023-01-01' FROM generate_series(1, 20) g;
"""


def queued(h: Harness) -> int:
    return int(h.value("SELECT count(*) FROM background_jobs"))


def test_postgresql_names_in_every_command_the_console_and_a_policy(
    h: Harness, tmp_path: Path
) -> None:
    h.sql(SCHEMA)
    before = ("--before", "2023-01-15")
    # unquoted, the names fold to lower case, as in psql: one line naming what was meant
    bad = h.cli("enqueue", "--table", "Sales.Orders", "--column", '"CreatedAt"', *before)
    assert_refused(bad, 'table sales.orders not found; there is "Sales"."Orders"')
    bad = h.cli("enqueue", "--table", '"Sales"."Orders"', "--column", "CreatedAt", *before)
    assert_refused(
        bad, 'column createdat not found in table "Sales"."Orders"; there is "CreatedAt"'
    )
    bad = h.cli("enqueue", "--table", '"Sales"."Orders', *before)
    assert_refused(bad, "a double quote is not closed")
    assert queued(h) == 0

    job = h.archive("--table", '"Sales"."Orders"', "--column", '"CreatedAt"', *before)
    archived = h.value(
        "SELECT sum(row_count) FROM archive_files WHERE source_table = 'Sales.Orders'"
    )
    assert archived == 335 == 500 - h.value('SELECT count(*) FROM "Sales"."Orders"')

    # a bare name: the search_path decides, as in psql; one that two schemas hold means
    # the first one's, and says so
    h.sql(
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET search_path = \"Sales\", public', "
        "current_database()); END $$"
    )
    plan = h.cli("enqueue", "--table", "orders", "--before", "2024-01-01", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert 'orders is "Sales".orders, the first schema on the search_path' in plan.stderr
    assert "public.orders too" in plan.stderr

    # a CLI change to the mixed-case table named bare, then its page in the console,
    # reached by the address its links use and by the bare name
    config = tmp_path / "archiver.toml"
    config.write_text(
        '[[policy]]\nname = "sales-orders"\ntable = \'"Orders"\'\ncolumn = \'"CreatedAt"\'\n'
        'older_than = "30 days"\nschedule = "0 2 * * *"\n'
    )
    policies = h.cli("--config", str(config), "policies")
    assert policies.returncode == 0, policies.stderr
    assert "Sales.Orders" in policies.stdout, policies.stdout
    paused = h.cli("pause", "--table", '"Orders"')
    assert paused.returncode == 0, paused.stderr
    assert "table Sales.Orders paused" in paused.stdout
    console = Console(h, tmp_path, {"ARCHIVER_CONFIG": str(config)})
    try:
        status, archive = console.get("/archive")
        link = "/archive/" + urllib.parse.quote('"Sales"."Orders"')
        assert status == 200 and f'href="{link}"' in archive.replace("%2F", "/"), archive
        for address in (link, "/archive/" + urllib.parse.quote('"Orders"')):
            status, page = console.get(address)
            assert status == 200, (address, page)
            assert "<td>pause</td><td>paused</td>" in page, address  # the CLI's change
            assert "<li>sales-orders: move" in page, address  # the policy feeding it
            assert "archiver verify --table &#34;Sales&#34;.&#34;Orders&#34;" in page
        status, _ = console.get("/archive/" + urllib.parse.quote("Sales.Orders"))
        assert status == 404  # sales.orders, which has no archive
    finally:
        console.stop()
    resumed = h.cli("resume", "--table", '"Sales"."Orders"')
    assert resumed.returncode == 0, resumed.stderr

    # the archive's commands take the same names; --where is DuckDB's SQL, which quotes
    # names as PostgreSQL does
    erased = h.cli(
        "erase", "--table", '"Sales"."Orders"', "--where", "\"Customer Name\" = 'customer 3'"
    )
    assert erased.returncode == 0, erased.stderr
    restored = h.cli("restore", "--table", '"Orders"')
    assert restored.returncode == 0, restored.stderr
    assert h.value('SELECT count(*) FROM "Sales"."Orders"') == 500 - 34  # g % 10 = 3, g <= 335
    assert h.value("SELECT count(*) FROM background_jobs WHERE id = $1::uuid", job) == 1


MIXED_CASE_SHAPES = """
CREATE SCHEMA "Sales";
CREATE TABLE "Sales"."Orders" ("Id" bigint PRIMARY KEY, "CreatedAt" timestamptz NOT NULL,
                               "Customer" text);
CREATE TABLE "Sales"."Order Lines" (
  "Id" bigint PRIMARY KEY, "OrderId" bigint NOT NULL REFERENCES "Sales"."Orders" ON DELETE CASCADE,
  "Sku" text);
INSERT INTO "Sales"."Orders"
SELECT g, timestamptz '2023-01-01' + g * interval '1 hour', 'c' || (g % 5)
FROM generate_series(1, 200) g;
INSERT INTO "Sales"."Order Lines" SELECT g, 1 + g % 200, 's' || g FROM generate_series(1, 600) g;
CREATE TABLE "Sales"."Events" ("Id" bigint, "At" date NOT NULL, PRIMARY KEY ("Id", "At"))
  PARTITION BY RANGE ("At");
CREATE TABLE "Sales"."Events 2023-01" PARTITION OF "Sales"."Events"
  FOR VALUES FROM ('2023-01-01') TO ('2023-02-01');
CREATE TABLE "Sales"."Events 2023-02" PARTITION OF "Sales"."Events"
  FOR VALUES FROM ('2023-02-01') TO ('2023-03-01');
INSERT INTO "Sales"."Events" SELECT g, date '2023-01-01' + g % 59 FROM generate_series(1, 300) g;
"""


def test_mixed_case_aggregates_and_partitions_move_erase_and_restore(h: Harness) -> None:
    """The commands that look a recorded table up in PostgreSQL's catalog again
    (to_regclass: a partition still attached, an aggregate's foreign keys, key types)
    find a mixed-case one, not its lower-case fold."""
    h.sql(MIXED_CASE_SHAPES)
    orders = '"Sales"."Orders"'
    h.archive("--table", orders, "--column", '"CreatedAt"', "--before", "2023-01-05",
              "--with-children")  # fmt: skip
    assert h.value('SELECT count(*) FROM "Sales"."Orders"') == 200 - 95
    assert h.value('SELECT count(*) FROM "Sales"."Order Lines"') == 600 - 3 * 95
    erased = h.cli("erase", "--table", orders, "--where", "\"Customer\" = 'c1'", "--with-children")
    assert erased.returncode == 0, erased.stderr
    restored = h.cli("restore", "--table", orders)
    assert restored.returncode == 0, restored.stderr
    assert h.value('SELECT count(*) FROM "Sales"."Orders"') == 200 - 19  # c1's 19 erased
    assert h.value('SELECT count(*) FROM "Sales"."Order Lines"') == 600 - 3 * 19
    assert h.value('SELECT count(*) FROM "Sales"."Order Lines" l WHERE NOT EXISTS '
                   '(SELECT FROM "Sales"."Orders" o WHERE o."Id" = l."OrderId")') == 0  # fmt: skip

    events = '"Sales"."Events"'
    h.archive("--table", events, "--column", '"At"', "--before", "2023-02-01",
              "--partitions", "drop", "--chunk-rows", "50")  # fmt: skip
    assert h.value('SELECT to_regclass(\'"Sales"."Events 2023-01"\') IS NULL')  # dropped
    assert h.value('SELECT count(*) FROM "Sales"."Events"') == 300 - 160  # January's
    back = h.cli("restore", "--table", events)
    assert back.returncode == 0, back.stderr
    assert h.value('SELECT count(*) FROM "Sales"."Events"') == 300
