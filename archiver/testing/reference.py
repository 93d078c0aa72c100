"""The reference `orders` table: the shape of a real OLTP table (bigint key, uuid, enum,
numeric(12,2), char(3), two timestamptz, jsonb, text[], text, and NULLs in every nullable
column), generated in SQL. Used by the tests, the demo and the benchmark.

    python -m bench.reference postgresql://... 1000000
"""

from __future__ import annotations

import asyncio
import sys

import asyncpg

ORDERS_DDL = """
CREATE TYPE order_status AS ENUM ('new', 'paid', 'shipped', 'cancelled');
CREATE TABLE orders (
    id          bigint PRIMARY KEY,
    customer    uuid,
    status      order_status,
    total       numeric(12,2),
    currency    char(3),
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz,
    details     jsonb,
    tags        text[],
    note        text
);
CREATE INDEX orders_created_at ON orders (created_at);
"""

# Row g: created g minutes before 2025-01-01 00:00 UTC, every 7th value NULL where nullable.
ORDERS_FILL = """
INSERT INTO orders
SELECT g,
       CASE WHEN g % 7 = 0 THEN NULL ELSE md5(g::text)::uuid END,
       CASE WHEN g % 7 = 1 THEN NULL ELSE (ARRAY['new','paid','shipped','cancelled'])[1 + g % 4]::order_status END,
       CASE WHEN g % 7 = 2 THEN NULL ELSE round((g % 100000) * 1.37, 2) END,
       CASE WHEN g % 7 = 3 THEN NULL ELSE (ARRAY['EUR','USD','GBP'])[1 + g % 3] END,
       timestamptz '2025-01-01 00:00:00+00' - make_interval(mins => g::int),
       CASE WHEN g % 7 = 4 THEN NULL ELSE timestamptz '2025-01-01 00:00:00+00' - make_interval(secs => g::double precision) END,
       CASE WHEN g % 7 = 5 THEN NULL ELSE jsonb_build_object('sku', 'A' || g, 'qty', g % 9, 'gift', g % 2 = 0) END,
       CASE WHEN g % 7 = 6 THEN NULL ELSE ARRAY['t' || (g % 5), NULL, 'x'] END,
       CASE WHEN g % 11 = 0 THEN NULL ELSE 'note ' || g END
FROM generate_series($1::bigint, $2::bigint) g
"""


async def seed_orders_async(url: str, rows: int, first: int = 1) -> None:
    conn = await asyncpg.connect(url)
    try:
        if await conn.fetchval("SELECT to_regclass('public.orders') IS NULL"):
            await conn.execute(ORDERS_DDL)
        await conn.execute(ORDERS_FILL, first, first + rows - 1)
        await conn.execute("ANALYZE orders")
    finally:
        await conn.close()


def seed_orders(url: str, rows: int, first: int = 1) -> None:
    """Create (if missing) and fill the orders table with ids first..first+rows-1; row g
    was created g minutes before 2025-01-01 00:00 UTC."""
    asyncio.run(seed_orders_async(url, rows, first))


if __name__ == "__main__":
    seed_orders(sys.argv[1], int(sys.argv[2]))
