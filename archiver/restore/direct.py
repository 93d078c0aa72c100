"""A whole file straight into its table: one COPY (ADBC ingest) instead of COPY into a
staging table and INSERT … SELECT with casts.

The staging path reads every row twice and casts every value in SQL, about twice the
time of COPY into the table itself (docs/performance.md, "Restore at scale"). Binary COPY writes each value in the form its column's
own type receives (the type's `recv` function), so where every archived column arrives
in exactly that form, with the same meaning, the file's columns can go straight in:
int8/int4/int2, float8/float4, boolean, date, timestamp and timestamptz (in
microseconds), numeric(p,s) from a decimal of the same precision and scale, bytea, the
types whose binary form is their text (text, varchar, char, json, an enum's label),
jsonb (its text behind the format's version byte), uuid (its 16 bytes, decoded from the
archived text) and one-dimensional arrays of int8/int4/int2/float8/float4/boolean/text.
Anything else -- a domain, an interval, a time or an unconstrained numeric (archived as
text), a type changed since, a special value carried by a `__pg_text` companion -- and
any target where COPY is not what INSERT is (a rule, a BEFORE INSERT row trigger that
may skip rows, row-level security, a view) takes the staging path, whose casts decide.
The pairs are a list of what is known, never a guess: a wrong pair (int8 into a float8
column) would be read without an error, so nothing outside it goes straight in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from archiver.arrow_values import scalar
from archiver.bulk import BulkCursor
from archiver.pgtypes.sql import PG_TEXT_SUFFIX
from archiver.restore.remap import ColumnMap, execute

# Whether COPY writes into the table as INSERT would: no rule, no BEFORE INSERT row
# trigger on it or a partition (one that returns NULL skips the row, which the staging
# path then finds by key), no row-level security (COPY FROM refuses it), an ordinary or
# partitioned table.
_COPY_IS_INSERT = """
SELECT c.relkind IN ('r', 'p') AND NOT c.relrowsecurity
   AND NOT EXISTS (SELECT FROM pg_rewrite r WHERE r.ev_class = c.oid AND r.ev_type = '3')
   AND NOT EXISTS (SELECT FROM pg_trigger t WHERE t.tgenabled <> 'D'
                   AND (t.tgrelid = c.oid  -- a plain table has no partition tree
                        OR t.tgrelid IN (SELECT relid FROM pg_partition_tree(c.oid)))
                   AND (t.tgtype & 1) = 1 AND (t.tgtype & 2) = 2 AND (t.tgtype & 4) = 4)
FROM pg_class c WHERE c.oid = to_regclass($1)
"""
_NAMES = """
SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass($1)
"""
# The table's enum columns (their binary form is the label's text).
_ENUMS = """
SELECT a.attname::text FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped AND t.typtype = 'e'
"""

Convert = Callable[[pa.Array], pa.Array]


def _same(*types: pa.DataType) -> Callable[[pa.DataType], Convert | None]:
    def pick(arrow: pa.DataType) -> Convert | None:
        return (lambda a: a) if arrow in types else None

    return pick


def _text(arrow: pa.DataType) -> Convert | None:
    if pa.types.is_dictionary(arrow) and pa.types.is_string(arrow.value_type):
        return lambda a: a.cast(pa.string())
    return (lambda a: a) if pa.types.is_string(arrow) or pa.types.is_large_string(arrow) else None


def _jsonb(arrow: pa.DataType) -> Convert | None:
    if not pa.types.is_string(arrow):
        return None
    version = scalar(b"\x01")  # jsonb's binary form: version 1, then text
    return lambda a: pc.binary_join_element_wise(version, a.cast(pa.binary()), scalar(b""))


_NIL = "00000000-0000-0000-0000-000000000000"


def _uuid_bytes(column: pa.ChunkedArray | pa.Array) -> pa.Array | None:
    """uuid text as its 16 bytes, the whole column in one call; None unless every value
    is 32 hex digits and hyphens (PostgreSQL prints 8-4-4-4-12; its input takes a hyphen
    after any group of four digits, so where they stand does not change the value)."""
    a = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not len(a):
        return pa.nulls(0, pa.binary(16))
    hex_ = pc.replace_substring(pc.fill_null(a, scalar(_NIL)), "-", "")  # new: its text from 0
    lengths = pc.min_max(pc.binary_length(hex_)).as_py()
    offsets = memoryview(hex_.buffers()[1]).cast("i")
    if (lengths["min"], lengths["max"]) != (32, 32) or hex_.offset or offsets[0] != 0:
        return None
    try:  # fromhex skips whitespace: a value holding some comes out short: refused below
        raw = bytes.fromhex(hex_.buffers()[2].to_pybytes()[: 32 * len(hex_)].decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        return None
    if len(raw) != 16 * len(hex_):
        return None
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(16), len(hex_), [None, pa.py_buffer(raw)]
    )
    return pc.if_else(a.is_valid(), fixed, scalar(None, pa.binary(16)))


def _uuid(arrow: pa.DataType) -> Convert | None:
    if arrow == pa.binary(16):
        return lambda a: a
    return _uuid_bytes if pa.types.is_string(arrow) else None


def _timestamp(zoned: bool) -> Callable[[pa.DataType], Convert | None]:
    def pick(arrow: pa.DataType) -> Convert | None:
        ok = pa.types.is_timestamp(arrow) and arrow.unit == "us" and (arrow.tz is not None) == zoned
        return (lambda a: a) if ok else None

    return pick


SCALARS: dict[str, Callable[[pa.DataType], Convert | None]] = {
    "bigint": _same(pa.int64()),
    "integer": _same(pa.int32()),
    "smallint": _same(pa.int16()),
    "double precision": _same(pa.float64()),
    "real": _same(pa.float32()),
    "boolean": _same(pa.bool_()),
    "date": _same(pa.date32()),
    "bytea": _same(pa.binary()),
    "timestamp with time zone": _timestamp(True),
    "timestamp without time zone": _timestamp(False),
    "text": _text,
    "json": _text,
    "jsonb": _jsonb,
    "uuid": _uuid,
}
ELEMENTS = {"bigint": pa.int64(), "integer": pa.int32(), "smallint": pa.int16(),
            "double precision": pa.float64(), "real": pa.float32(), "boolean": pa.bool_(),
            "text": pa.string()}  # fmt: skip


def _converter(type_sql: str, enum: bool, arrow: pa.DataType) -> Convert | None:
    if enum or re.fullmatch(r"character(?: varying)?(?:\(\d+\))?", type_sql):
        return _text(arrow)
    if numeric := re.fullmatch(r"numeric\((\d+),(\d+)\)", type_sql):
        p, s = int(numeric[1]), int(numeric[2])
        ok = pa.types.is_decimal128(arrow) and (arrow.precision, arrow.scale) == (p, s)
        return (lambda a: a) if ok else None
    if type_sql.endswith("[]") and type_sql.count("[]") == 1:
        element = ELEMENTS.get(type_sql[:-2])
        ok = pa.types.is_list(arrow) and element is not None and arrow.value_type == element
        return (lambda a: a) if ok else None
    pick = SCALARS.get(type_sql)
    return pick(arrow) if pick else None


@dataclass(frozen=True)
class Straight:
    """How each of a file's columns is written for COPY: read and converted a batch at a
    time as COPY takes them, so reading the file overlaps with the COPY and holds one
    batch (a jsonb's version byte is such a copy); or converted whole, before the COPY
    starts, where converting checks every value (a uuid's 16 bytes, smaller than its
    text), so no value found wrong stops a COPY half sent."""

    converts: dict[str, Convert]
    ready: dict[str, pa.Array]  # converted whole
    schema: pa.Schema

    def batches(self, file: pq.ParquetFile, rows: int = 65_536) -> pa.RecordBatchReader:
        streamed = [n for n in self.converts if n not in self.ready]

        def each() -> Iterator[pa.RecordBatch]:
            start = 0
            for batch in file.iter_batches(batch_size=rows, columns=streamed):
                yield pa.RecordBatch.from_arrays(
                    [
                        self.ready[n].slice(start, batch.num_rows)
                        if n in self.ready
                        else self.converts[n](batch.column(n))
                        for n in self.converts
                    ],
                    schema=self.schema,
                )
                start += batch.num_rows

        return pa.RecordBatchReader.from_batches(self.schema, each())


def straight_in(
    cur: BulkCursor, file: pq.ParquetFile, target: str, types: dict[str, str], mapped: ColumnMap
) -> Straight | None:
    """How the file's columns go into `target` by COPY exactly as the staging path would
    insert them; None when any column, or the target, needs the staging path. Reads the
    columns it checks (special-value companions, uuids), not the file."""
    schema = file.schema_arrow
    if not file.metadata.num_rows or mapped.retyped:
        return None
    if not execute(cur, _COPY_IS_INSERT, (target,))[0][0]:
        return None
    enums = {r[0] for r in execute(cur, _ENUMS, (target,))}
    converts: dict[str, Convert] = {}
    for name in mapped.values:
        convert = _converter(types[name], name in enums, schema.field(name).type)
        if convert is None:
            return None
        converts[name] = convert
    companions = [n + PG_TEXT_SUFFIX for n in converts if n + PG_TEXT_SUFFIX in schema.names]
    wholes = [n for n, convert in converts.items() if convert is _uuid_bytes]
    if companions and any(
        c.null_count != c.length() for c in file.read(columns=companions).itercolumns()
    ):
        return None  # special values (infinity, NaN, …) only their text keeps
    ready: dict[str, pa.Array] = {}
    for name in wholes:
        whole = _uuid_bytes(file.read(columns=[name]).column(name))
        if whole is None:
            return None
        ready[name] = whole
    fields = []
    for name, convert in converts.items():
        sample = ready[name] if name in ready else convert(pa.array([], schema.field(name).type))
        assert sample is not None  # only a whole-column conversion refuses values
        fields.append(pa.field(name, sample.type))
    return Straight(converts, ready, pa.schema(fields))


def copy_in(cur: BulkCursor, target: str, file: pq.ParquetFile, straight: Straight) -> int:
    """COPY the file's rows into `target` (quoted, as the restore names it): how many.
    (ADBC counts the rows it sent, not the server's count: were a BEFORE INSERT trigger
    to skip some, it would not say so, which is why straight_in refuses such a table.)"""
    [(schema, name)] = execute(cur, _NAMES, (target,))
    rows = straight.batches(file)
    return int(cur.adbc_ingest(name, rows, mode="append", db_schema_name=schema))
