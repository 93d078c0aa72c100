"""Tables that foreign keys reference are never moved: ON DELETE CASCADE would delete
referencing rows nobody archived, SET NULL would change them, RESTRICT would fail every
chunk. Refused at enqueue, dry run and for policies, with one line naming each key, and
again when a job starts (a key added after enqueue)."""

from __future__ import annotations

import subprocess

import pytest

from tests.support import assert_refused
from tests.support.harness import Harness


def refused_in_one_line(result: subprocess.CompletedProcess[str], *says: str) -> None:
    assert_refused(result, *says, code=1)


SCHEMA = """
CREATE TABLE orders (id bigint PRIMARY KEY, created_at date NOT NULL);
INSERT INTO orders SELECT g, date '2020-01-01' + g FROM generate_series(1, 100) g;
CREATE TABLE shipments (id bigint PRIMARY KEY, order_id bigint REFERENCES orders ON DELETE CASCADE);
INSERT INTO shipments SELECT g, g FROM generate_series(1, 100) g;
CREATE TABLE payments (id bigint PRIMARY KEY, order_id bigint,
                       CONSTRAINT pay_order FOREIGN KEY (order_id) REFERENCES orders ON DELETE RESTRICT);
CREATE TABLE notes (id bigint PRIMARY KEY, order_id bigint REFERENCES orders ON DELETE SET NULL);
CREATE SCHEMA billing;
CREATE TABLE billing.invoices (id bigint PRIMARY KEY, order_id bigint REFERENCES orders);
-- a partitioned child whose key is declared on each partition, not on the parent
CREATE TABLE events (id bigint, order_id bigint, at date NOT NULL) PARTITION BY RANGE (at);
CREATE TABLE events_2020 PARTITION OF events FOR VALUES FROM ('2020-01-01') TO ('2021-01-01');
CREATE TABLE events_2021 PARTITION OF events FOR VALUES FROM ('2021-01-01') TO ('2022-01-01');
ALTER TABLE events_2020 ADD CONSTRAINT ev20_order FOREIGN KEY (order_id) REFERENCES orders;
ALTER TABLE events_2021 ADD CONSTRAINT ev21_order FOREIGN KEY (order_id) REFERENCES orders;
CREATE TABLE staff (id bigint PRIMARY KEY, boss bigint REFERENCES staff, created_at date NOT NULL);
"""


def test_a_referenced_table_is_never_moved(h: Harness) -> None:
    h.sql(SCHEMA)
    enqueue = ["enqueue", "--table", "orders", "--before", "2020-03-01"]
    refused_in_one_line(
        h.cli(*enqueue),
        "table public.orders is referenced by foreign keys",
        "public.shipments (shipments_order_id_fkey, ON DELETE CASCADE)",
        "public.payments (pay_order, ON DELETE RESTRICT)",
        "public.notes (notes_order_id_fkey, ON DELETE SET NULL)",
        "billing.invoices (invoices_order_id_fkey, ON DELETE NO ACTION)",
        "public.events_2020 (ev20_order",
        "public.events_2021 (ev21_order",
        "--mode copy",
    )
    refused_in_one_line(h.cli(*enqueue, "--dry-run"), "referenced by foreign keys")
    refused_in_one_line(h.cli(*enqueue, "--parallel", "2"), "referenced by foreign keys")
    refused_in_one_line(
        h.cli("enqueue", "--table", "staff", "--before", "2020-03-01"),
        "public.staff (staff_boss_fkey, ON DELETE NO ACTION)",
    )
    assert h.value("SELECT count(*) FROM background_jobs") == 0

    config = h.tmp / "archiver.toml"
    config.write_text(
        '[[policy]]\nname = "o"\ntable = "orders"\nolder_than = "30 days"\nschedule = "0 2 * * *"\n'
    )
    refused_in_one_line(
        h.cli("policies", "--config", str(config)),
        "policy 'o': table: table public.orders is referenced",
    )

    # copy mode deletes nothing: allowed, and it archives
    h.archive(*enqueue[1:], "--mode", "copy")
    assert h.value("SELECT count(*) FROM orders") == 100
    assert h.value("SELECT sum(row_count) FROM archive_files") == 59


@pytest.mark.parametrize("on_delete", ["CASCADE", "SET NULL"])
def test_a_key_added_after_enqueue_stops_the_job_before_any_delete(
    h: Harness, on_delete: str
) -> None:
    h.sql(
        "CREATE TABLE orders (id bigint PRIMARY KEY, created_at date NOT NULL);"
        "INSERT INTO orders SELECT g, date '2020-01-01' + g FROM generate_series(1, 100) g;"
        "CREATE TABLE shipments (id bigint PRIMARY KEY, order_id bigint);"
        "INSERT INTO shipments SELECT g, g FROM generate_series(1, 100) g;",
    )
    (job_id,) = h.enqueue("--table", "orders", "--before", "2020-03-01", "--max-attempts", "1")
    h.sql(
        f"ALTER TABLE shipments ADD FOREIGN KEY (order_id) REFERENCES orders ON DELETE {on_delete}",
    )
    h.drain()
    job = h.wait_for(job_id, "failed")
    assert "referenced by foreign keys: public.shipments" in job["last_error"]
    assert h.value("SELECT count(*) FROM orders") == 100
    assert h.value("SELECT count(*) FROM shipments WHERE order_id IS NOT NULL") == 100
    assert h.value("SELECT count(*) FROM archive_files") == 0


def test_with_children_refuses_cycles_and_keyless_children_and_suits_policies(
    h: Harness,
) -> None:
    h.sql(SCHEMA)
    refused_in_one_line(
        h.cli("enqueue", "--table", "staff", "--before", "2020-03-01", "--with-children"),
        "foreign keys form a cycle (public.staff -> public.staff)",
    )
    with_children = ["enqueue", "--table", "orders", "--before", "2020-03-01", "--with-children"]
    refused_in_one_line(h.cli(*with_children), "table public.events has no primary key")
    refused_in_one_line(
        h.cli(*with_children, "--dry-run"), "table public.events has no primary key"
    )
    assert not h.sql("SELECT 1 FROM background_jobs")

    h.sql("ALTER TABLE events ALTER id SET NOT NULL, ADD PRIMARY KEY (id, at)")
    config = h.tmp / "archiver.toml"
    config.write_text(
        '[[policy]]\nname = "o"\ntable = "orders"\nolder_than = "30 days"\n'
        'schedule = "0 2 * * *"\nwith_children = true\n'
    )
    checked = h.cli("policies", "--config", str(config))
    assert checked.returncode == 0, checked.stderr
