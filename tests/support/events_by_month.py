"""`events`, a table partitioned by month (two years and a DEFAULT partition), as the
partition tests and the grants tests use it."""

from __future__ import annotations

from tests.support import sql

CUTOFF = "2024-01-15"  # 2023's twelve months whole; January 2024 partly; DEFAULT by rows
MONTHS = [f"{y}-{m:02d}" for y in (2023, 2024) for m in range(1, 13)]


def seed(url: str, per_month: int = 40, *, key_on_each_partition: bool = False) -> None:
    """`events`, by month, its key on the table (or, as some schemas have it, declared on
    each partition and none on the table)."""
    table_key = "" if key_on_each_partition else ", PRIMARY KEY (id, created_at)"
    statements = [
        "CREATE TABLE customers (id int PRIMARY KEY)",
        "INSERT INTO customers SELECT generate_series(1, 10)",
        "CREATE TABLE events (id bigint NOT NULL, created_at date NOT NULL, customer int, "
        f"payload text{table_key}) PARTITION BY RANGE (created_at)",
        "CREATE TABLE events_default PARTITION OF events DEFAULT",
    ]
    names = ["events_default"]
    for month in MONTHS:
        name = "events_" + month.replace("-", "_")
        names.append(name)
        y, m = map(int, month.split("-"))
        upper = f"{y + (m == 12)}-{m % 12 + 1:02d}-01"
        statements += [
            f"CREATE TABLE {name} PARTITION OF events FOR VALUES FROM ('{month}-01') TO ('{upper}')",
            f"ALTER TABLE {name} ADD FOREIGN KEY (customer) REFERENCES customers",
        ]
    if key_on_each_partition:
        statements += [f"ALTER TABLE {name} ADD PRIMARY KEY (id, created_at)" for name in names]
    statements += [
        "INSERT INTO events SELECT i, DATE '2023-01-01' + (i % 730), 1 + i % 10, 'e' || i "
        f"FROM generate_series(1, {per_month * 24}) i",
        "INSERT INTO events SELECT 100000 + i, DATE '2019-06-01' + i, 1, 'old' "
        "FROM generate_series(1, 5) i",  # the DEFAULT partition: by rows
        "ANALYZE events",
    ]
    sql(url, ";\n".join(statements) + ";")
