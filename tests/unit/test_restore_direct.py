"""Which archived columns go straight into their table by COPY (archiver.restore.direct):
only the pairs of PostgreSQL type and Arrow type whose binary form is known to be read as
the same value; everything else is staged."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from archiver.restore.direct import Straight, _converter, _uuid_bytes


def test_the_known_pairs_go_straight_in() -> None:
    for type_sql, arrow in (
        ("bigint", pa.int64()), ("integer", pa.int32()), ("smallint", pa.int16()),
        ("double precision", pa.float64()), ("real", pa.float32()), ("boolean", pa.bool_()),
        ("date", pa.date32()), ("bytea", pa.binary()), ("text", pa.string()),
        ("json", pa.string()), ("jsonb", pa.string()), ("uuid", pa.string()),
        ("character(3)", pa.string()), ("character varying(12)", pa.string()),
        ("character varying", pa.string()), ("numeric(12,2)", pa.decimal128(12, 2)),
        ("timestamp with time zone", pa.timestamp("us", tz="UTC")),
        ("timestamp without time zone", pa.timestamp("us")),
        ("text[]", pa.list_(pa.string())), ("bigint[]", pa.list_(pa.int64())),
    ):  # fmt: skip
        assert _converter(type_sql, False, arrow) is not None, (type_sql, arrow)
    assert _converter("mood", True, pa.dictionary(pa.int32(), pa.string())) is not None


def test_anything_else_is_staged() -> None:
    for type_sql, arrow in (
        ("bigint", pa.float64()),  # read without an error, as another number: never
        ("double precision", pa.int64()),
        ("integer", pa.int64()),
        ("timestamp with time zone", pa.timestamp("us")),  # the zone decides the meaning
        ("timestamp without time zone", pa.timestamp("us", tz="UTC")),
        ("timestamp with time zone", pa.timestamp("ns", tz="UTC")),
        ("numeric", pa.string()), ("numeric(12,2)", pa.decimal128(12, 3)),
        ("numeric(1000,2)", pa.string()), ("interval", pa.string()),
        ("time without time zone", pa.string()), ("mood", pa.string()),  # not known an enum
        ("character varying(5)[]", pa.list_(pa.string())), ("integer[][]", pa.list_(pa.int32())),
        ("uuid", pa.binary()), ("jsonb", pa.binary()), ("my_domain", pa.string()),
    ):  # fmt: skip
        assert _converter(type_sql, False, arrow) is None, (type_sql, arrow)


def test_uuid_text_becomes_its_sixteen_bytes_or_nothing() -> None:
    text = pa.array(
        ["12345678-9abc-def0-1234-56789ABCDEF0", None, "00000000-0000-0000-0000-000000000001"]
    )
    raw = _uuid_bytes(pa.chunked_array([text[:1], text[1:]]))
    assert raw is not None and raw.type == pa.binary(16)
    assert raw.to_pylist() == [bytes.fromhex("123456789abcdef0123456789abcdef0"), None,
                               bytes(15) + b"\x01"]  # fmt: skip
    assert _uuid_bytes(text.slice(1)).to_pylist() == raw.to_pylist()[1:]  # type: ignore[union-attr]
    assert _uuid_bytes(text.slice(0, 0)).to_pylist() == []  # type: ignore[union-attr]
    hyphens_elsewhere = "1234-5678-9abc-def0-1234-56789abcdef0"  # PostgreSQL reads it alike
    assert _uuid_bytes(pa.array([hyphens_elsewhere])).to_pylist() == raw.to_pylist()[:1]  # type: ignore[union-attr]
    for bad in ("12345678-1234-5678-1234-56781234567g", "{12345678-1234-5678-1234-567812345678}",
                "12345678-1234-5678-1234-5678 2345678", "12345678-1234-5678-1234-5678123456789",
                "ü2345678-1234-5678-1234-567812345678"):  # fmt: skip
        assert _uuid_bytes(pa.array([bad, None])) is None, bad


def test_batches_stream_the_file_beside_the_columns_converted_whole(tmp_path: Path) -> None:
    """Read as COPY takes them, across row groups and batches, each uuid (converted whole
    beforehand) stays on its own row."""
    ids = list(range(23))
    uuids = [None if i % 5 == 0 else f"{i:08x}-0000-4000-8000-{i:012x}" for i in ids]
    path = tmp_path / "f.parquet"
    table = pa.table({"id": ids, "customer": uuids, "mood": ["ok", "meh"] * 11 + ["ok"]})
    pq.write_table(table, path, row_group_size=7)
    file = pq.ParquetFile(path)
    whole = _uuid_bytes(file.read(columns=["customer"]).column("customer"))
    assert whole is not None
    same = _converter("bigint", False, pa.int64())
    text = _converter("text", False, pa.string())
    assert same is not None and text is not None
    straight = Straight(
        {"id": same, "customer": _uuid_bytes, "mood": text},
        {"customer": whole},
        pa.schema([("id", pa.int64()), ("customer", pa.binary(16)), ("mood", pa.string())]),
    )
    batches = list(straight.batches(file, rows=4))
    assert max(b.num_rows for b in batches) == 4 and len(batches) > 23 // 4
    got = pa.Table.from_batches(batches)
    assert got.column("id").to_pylist() == ids
    assert got.column("mood").to_pylist() == table.column("mood").to_pylist()
    expected = [None if u is None else uuid.UUID(u).bytes for u in uuids]
    assert got.column("customer").to_pylist() == expected


def test_a_file_of_uuids_alone_streams_its_row_count(tmp_path: Path) -> None:
    """Nothing left to stream but the rows' count: each batch as long as the file's."""
    uuids = [f"{i:08x}-0000-4000-8000-{i:012x}" for i in range(9)]
    path = tmp_path / "u.parquet"
    pq.write_table(pa.table({"customer": uuids}), path, row_group_size=4)
    file = pq.ParquetFile(path)
    whole = _uuid_bytes(file.read().column("customer"))
    assert whole is not None
    straight = Straight({"customer": _uuid_bytes}, {"customer": whole},
                        pa.schema([("customer", pa.binary(16))]))  # fmt: skip
    got = pa.Table.from_batches(list(straight.batches(file, rows=3)))
    assert got.column("customer").to_pylist() == [uuid.UUID(u).bytes for u in uuids]
