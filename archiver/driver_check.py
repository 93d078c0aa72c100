"""The check that the ADBC driver in use writes values back exactly, as a restore stages a
file through it (doctor runs it too): some builds of the driver did not, without an error."""

from __future__ import annotations

import adbc_driver_manager

from archiver.bulk import BulkConnection
from archiver.errors import first_line

# Values of the kinds a restore writes back through the driver. Some builds of it wrote
# two of them wrong without an error: NULL elements of arrays as "" and 0 (the 1.12.0
# wheel, and a 1.13.0 development snapshot built from source), uuid as bytea (1.12.0).
_PROBE = """SELECT ARRAY['a', NULL, '']::text[] AS text_array, ARRAY[1, NULL]::int8[] AS int8_array,
  ''::text AS empty_text, NULL::text AS null_text,
  'f47ac10b-58cc-4372-a567-0e02b2c3d479'::uuid AS uuid, '{"k": [1, null, ""]}'::jsonb AS jsonb,
  timestamptz '2024-02-29 12:34:56.789012+00' AS timestamptz, '\\x00ff'::bytea AS bytea"""
_PROBE_TABLE = "archiver_driver_probe"


def driver_round_trip(conn: BulkConnection) -> list[str] | None:
    """Read values through the driver and write them back through it (as a restore stages
    a file), then compare their text forms in PostgreSQL: "<column> <read> came back
    <written>" for each that changed, or None where the role may not create a temporary
    table (which restore needs too). Rolls back: call it before other work."""
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT has_database_privilege(current_database(), 'TEMPORARY')")
            if not cur.fetchall()[0][0]:
                return None
            cur.execute(_PROBE)
            table = cur.fetch_arrow_table()
            cur.adbc_ingest(_PROBE_TABLE, table, mode="create", temporary=True)
            names = table.column_names
            pairs = ", ".join(f"p.{n}::text, w.{n}::text" for n in names)
            cur.execute(f"SELECT {pairs} FROM ({_PROBE}) p, pg_temp.{_PROBE_TABLE} w")
            row = cur.fetchall()[0]
    except adbc_driver_manager.Error as exc:
        return [f"the round trip failed: {first_line(exc)}"]
    finally:
        conn.rollback()
    return [
        f"{name} {row[2 * i]!r} came back {row[2 * i + 1]!r}"
        for i, name in enumerate(names)
        if row[2 * i] != row[2 * i + 1]
    ]
