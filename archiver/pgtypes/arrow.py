"""The Arrow side of the type table: what each PostgreSQL value becomes in Parquet, the
values the driver hands over that Arrow cannot hold, and the way back for restore."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from archiver.arrow_values import int64s, scalar, strings
from archiver.pgtypes.sql import NUMERIC_NAN_UNSCALED, decimal_of

Converter = Callable[[pa.Array], pa.Array]


def _field_meta(field: pa.Field, key: str) -> str | None:
    meta = field.metadata or {}
    value = meta.get(key.encode())
    return value.decode() if value is not None else None


def _interval_to_struct(array: pa.Array) -> pa.Array:
    """month_day_nano (Parquet cannot store it) as {months, days, microseconds}, kept
    apart. Vectorized: the 16-byte values are read as int32/int32/int64 views of the
    same buffer (PostgreSQL intervals hold whole microseconds)."""
    n, offset = len(array), array.offset
    data = array.buffers()[1]
    as_int32 = pa.Array.from_buffers(pa.int32(), 4 * (n + offset), [None, data])
    as_int64 = pa.Array.from_buffers(pa.int64(), 2 * (n + offset), [None, data])
    starts = int64s(offset, offset + n)
    one, two, four = scalar(1), scalar(2), scalar(4)
    months = pc.take(as_int32, pc.multiply(starts, four))
    days = pc.take(as_int32, pc.add(pc.multiply(starts, four), one))
    nanos = pc.take(as_int64, pc.add(pc.multiply(starts, two), one))
    micros = pc.divide(nanos, scalar(1000))
    return pa.StructArray.from_arrays(
        [months, days, micros], fields=list(INTERVAL_STRUCT), mask=array.is_null()
    )


INTERVAL_STRUCT = pa.struct(
    [("months", pa.int32()), ("days", pa.int32()), ("microseconds", pa.int64())]
)


def converter_for(field: pa.Field) -> tuple[pa.Field, Converter | None]:
    """The Parquet-side field for one column, and how to convert its arrays (None: as is)."""
    t = field.type
    if isinstance(t, pa.OpaqueType):
        target: pa.DataType | None = None
        if t.type_name == "numeric":
            typmod = _field_meta(field, "POSTGRESQL:typmod")
            ps = decimal_of(int(typmod)) if typmod else None
            if ps is not None:
                p, s = ps
                target = pa.decimal128(p, s)  # p <= 38: see pgtypes.sql.decimal_of
        if target is not None:
            decimal = target
            return field.with_type(decimal), lambda a: pc.cast(a.storage, decimal)
        # Exact text form; the column's PostgreSQL type is in the file's metadata.
        return field.with_type(t.storage_type), lambda a: a.storage
    if t == pa.month_day_nano_interval():
        return field.with_type(INTERVAL_STRUCT), _interval_to_struct
    return field, None


def unscaled_column(field: pa.Field, precision: int, scale: int) -> tuple[pa.Field, Converter]:
    """converter_for a numeric(p, s) column selected as its unscaled int64: a Decimal128
    field that says numeric, as the driver says of a numeric it reads itself (it said
    int8, the type the column was selected as)."""
    typmod = ((precision << 16) | scale) + 4  # the inverse of pgtypes.sql.decimal_of
    meta = {b"POSTGRESQL:type": b"numeric", b"POSTGRESQL:typmod": str(typmod).encode()}
    decimal = pa.decimal128(precision, scale)
    return field.with_type(decimal).with_metadata(meta), unscaled_decimal(precision, scale)


def unscaled_decimal(precision: int, scale: int) -> Converter:
    """int64 unscaled values (see pgtypes.sql.SCALED_MAX_PRECISION) -> Decimal128(p, s):
    cast to Decimal128(19, 0), which holds every int64 exactly, then read the same 128-bit
    integers with the column's scale."""
    target = pa.decimal128(precision, scale)

    def convert(array: pa.Array) -> pa.Array:
        wide = pc.cast(array, pa.decimal128(19, 0))
        return pa.Array.from_buffers(
            target, len(wide), wide.buffers(), null_count=wide.null_count, offset=wide.offset
        )

    return convert


# What the ADBC driver (1.13) makes of values PostgreSQL holds but Arrow's types do not:
# +-infinity, and timestamps within ~30 years of PostgreSQL's maximum, wrap around int64
# (dates: int32) on the shift from the 2000 to the 1970 epoch, landing far below
# PostgreSQL's minimum (4714-11-24 BC); numeric NaN comes as 'nan'. Nothing real lies there, so each is found exactly, set NULL in
# its column and written as PostgreSQL text into the `<name>__pg_text` companion.
_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970
_PG_MIN_TIMESTAMP_US = -210_866_803_200_000_000
_PG_MIN_DATE_DAYS = -2_440_588
_DAY_US = 86_400_000_000


def _wrapped(raw: int, bits: int, shift: int) -> int:
    """PostgreSQL's own value (2000 epoch) behind a driver value that wrapped around."""
    span = 1 << bits
    return (raw - shift + span // 2) % span - span // 2


def civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day count since 1970-01-01, any year (H. Hinnant)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, doy - (153 * mp + 2) // 5 + 1


def _timestamp_text(raw: int, with_zone: bool) -> str:
    value = _wrapped(raw, 64, _PG_EPOCH_US)
    if value in (2**63 - 1, -(2**63)):
        return "infinity" if value > 0 else "-infinity"
    micros = value + _PG_EPOCH_US  # a finite timestamp past the driver's range
    days, rest = divmod(micros, _DAY_US)
    year, month, day = civil(days)
    seconds, us = divmod(rest, 1_000_000)
    text = f"{year}-{month:02d}-{day:02d} {seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{us:06d}"
    return text + "+00" if with_zone else text


def _date_text(raw: int) -> str:
    return "infinity" if _wrapped(raw, 32, 10_957) > 0 else "-infinity"


_PY_MIN_DATE_DAYS, _PY_MAX_DATE_DAYS = -719_162, 2_932_896  # 0001-01-01, 9999-12-31
_PY_MIN_US = _PY_MIN_DATE_DAYS * _DAY_US
_PY_MAX_US = (_PY_MAX_DATE_DAYS + 1) * _DAY_US - 1
# compute functions' constants, made once from their buffers (arrow_values)
_TRUE, _FALSE = scalar(True), scalar(False)
_PG_MIN_TIMESTAMP, _PG_MIN_DATE = scalar(_PG_MIN_TIMESTAMP_US), scalar(_PG_MIN_DATE_DAYS)
_NAN_UNSCALED = scalar(NUMERIC_NAN_UNSCALED)


def within_python_range(array: pa.Array) -> pa.Array | None:
    """For a date or timestamp column: True where the value lies in years 1-9999 (what
    Python, and so the catalog's key and range text, can represent) or is NULL. None for
    any other type (nothing to check)."""
    if pa.types.is_date32(array.type):
        raw, lo, hi = array.view(pa.int32()), _PY_MIN_DATE_DAYS, _PY_MAX_DATE_DAYS
    elif pa.types.is_timestamp(array.type):
        raw, lo, hi = array.view(pa.int64()), _PY_MIN_US, _PY_MAX_US
    else:
        return None
    inside = pc.and_(pc.greater_equal(raw, scalar(lo)), pc.less_equal(raw, scalar(hi)))
    return pc.fill_null(inside, _TRUE)


def split_special(array: pa.Array, base_type: str) -> tuple[pa.Array, pa.Array]:
    """(the column with PostgreSQL-only values set NULL, their exact text or NULL)."""
    n = len(array)
    text: Callable[[int], str]
    if base_type in ("timestamp", "timestamptz"):
        raw = array.view(pa.int64())
        mask = pc.less(raw, _PG_MIN_TIMESTAMP)
        zone = base_type == "timestamptz"

        def text(i: int) -> str:
            return _timestamp_text(raw[i].as_py(), zone)

    elif base_type == "date":
        raw = array.view(pa.int32())
        mask = pc.less(raw, _PG_MIN_DATE)

        def text(i: int) -> str:
            return _date_text(raw[i].as_py())

    elif base_type == "numeric" and pa.types.is_int64(array.type):  # unscaled
        mask = pc.equal(array, _NAN_UNSCALED)

        def text(i: int) -> str:
            return "NaN"

    elif base_type == "numeric":
        mask = pc.equal(pc.utf8_lower(array.storage), scalar("nan"))

        def text(i: int) -> str:
            return "NaN"

    else:
        raise ValueError(f"no special values known for {base_type}")
    mask = pc.fill_null(mask, _FALSE)
    if not pc.any(mask).as_py():
        return array, pa.nulls(n, pa.string())
    where = pc.indices_nonzero(mask).to_pylist()
    texts: list[str | None] = [None] * n
    for i in where:
        texts[i] = text(i)
    if isinstance(array.type, pa.BaseExtensionType):
        clean_storage = pc.if_else(mask, scalar(None, array.storage.type), array.storage)
        clean = pa.ExtensionArray.from_storage(array.type, clean_storage)
    else:
        clean = pc.if_else(mask, scalar(None, array.type), array)
    return clean, strings(texts)


def staging_table(table: pa.Table) -> pa.Table:
    """What ADBC ingest can load: every interval struct as PostgreSQL interval text."""
    for i, field in enumerate(table.schema):
        if field.type == INTERVAL_STRUCT:
            col = table.column(i).combine_chunks()
            text = pc.binary_join_element_wise(
                pc.cast(col.field("months"), pa.string()),
                " mons ",
                pc.cast(col.field("days"), pa.string()),
                " days ",
                pc.cast(col.field("microseconds"), pa.string()),
                " microseconds",
                "",
            )
            text = pc.if_else(col.is_valid(), text, pa.scalar(None, pa.string()))
            table = table.set_column(i, pa.field(field.name, pa.string()), text)
    return table


def storage_view(array: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """An extension-typed array's storage (uuid -> 16 bytes), which sorts like PostgreSQL."""
    if isinstance(array.type, pa.BaseExtensionType):
        if isinstance(array, pa.ChunkedArray):
            return pa.chunked_array([c.storage for c in array.chunks], array.type.storage_type)
        return array.storage
    return array
