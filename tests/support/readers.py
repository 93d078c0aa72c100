"""What every reader of the archive should see of the all-types table (EXPECTED, selected
in PostgreSQL), and a reader's rows compared with it value by value (`compare`)."""

from __future__ import annotations

import datetime as dt
import decimal
import math
from typing import Any

from tests.support.harness import Harness

# Every type archiver maps to a Delta type of its own, and what archiver publishes as
# text, selected in PostgreSQL as each reader should see it (bulk rows: no special value)
EXPECTED = """
SELECT id, created_at, c_int2, c_int4, c_int8, c_num, c_num_big::text AS c_num_big,
  CASE WHEN c_num_u = trunc(c_num_u, 18) AND abs(c_num_u) < 1e20 THEN c_num_u END AS c_num_u, c_real, c_double, c_bool, c_text, c_varchar, c_char, c_bytea,
  c_date, c_ts, c_tstz, c_time::text AS c_time, c_uuid::text AS c_uuid,
  c_json::text AS c_json, c_jsonb::text AS c_jsonb, c_inet::text AS c_inet,
  c_enum::text AS c_enum, c_domain, c_int_arr, c_text_arr, c_date_arr, c_float_arr,
  c_uuid_arr::text[] AS c_uuid_arr, c_enum_arr::text[] AS c_enum_arr
FROM snapshot WHERE id <= 100000 ORDER BY id
"""


# Column names Spark-family readers refuse, and a timestamp without a zone
AWKWARD = """
CREATE TABLE awkward (
  id bigint PRIMARY KEY, created_at timestamptz NOT NULL,
  "Customer Name" text, "total, eur" numeric(12, 2), "a;b{c}(d)=e" integer,
  "tab\there" text, "new
line" text, "CamelCase" integer, "été" text, "dash-name" integer, "dot.name" integer,
  "quote""d" text, c_ts timestamp
);
INSERT INTO awkward
SELECT g, timestamptz '2023-01-01' + g * interval '1 hour', 'customer ' || g, g * 1.25, g,
  't' || g, 'n' || g, g * 2, 'é' || g, g * 3, g * 4, 'q' || g,
  timestamp '2023-01-01' + g * interval '1 minute'
FROM generate_series(1, 300) g;
"""


def _same(a: Any, b: Any) -> bool:
    """A reader's value against PostgreSQL's: datetimes as instants (a reader may give
    UTC as a zone or not), floats with NaN equal to itself, sequences element-wise."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dt.datetime) and isinstance(b, dt.datetime):
        if (a.tzinfo is None) != (b.tzinfo is None):
            a, b = (
                a.replace(tzinfo=dt.UTC) if a.tzinfo is None else a,
                b.replace(tzinfo=dt.UTC) if b.tzinfo is None else b,
            )
        return bool(a == b)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, decimal.Decimal) or isinstance(b, decimal.Decimal):
        return a is not None and b is not None and decimal.Decimal(a) == decimal.Decimal(b)
    if isinstance(a, bytes | bytearray | memoryview) or isinstance(b, bytes | bytearray):
        return a is not None and b is not None and bytes(a) == bytes(b)
    return bool(a == b)


def compare(reader: str, rows: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert len(rows) == len(expected), (reader, len(rows), len(expected))
    rows = sorted(rows, key=lambda r: r["id"])
    for got, want in zip(rows, expected, strict=True):
        for column, value in want.items():
            assert _same(got[column], value), (reader, want["id"], column, got[column], value)


def daft_azure(h: Harness) -> Any:
    """Daft's configuration for the test's Azurite."""
    from daft.io import AzureConfig

    return AzureConfig(
        storage_account="devstoreaccount1",
        access_key=h.azurite.delta_options["azure_storage_account_key"],
        endpoint_url=f"http://127.0.0.1:{h.azurite.port}/devstoreaccount1",
        use_ssl=False,
    )
