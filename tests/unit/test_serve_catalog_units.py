"""archiver serve's reading of statements (PostgreSQL's parser, through pglast), the
narrowing of the cluster's shared relations, and the binary forms of the types it
announces by OID, each against what PostgreSQL itself does. The same paths meet real
clients and a real PostgreSQL in tests/integration/test_serve_clients.py and
tests/integration/test_serve_catalog.py."""

from __future__ import annotations

import struct

import pytest

from archiver.serve import statements
from archiver.serve.compound import parse_array, parse_record
from archiver.serve.narrowing import SHARED, narrowed
from archiver.serve.registry import Registry

CATALOGS = frozenset({"pg_class", "pg_type", "pg_namespace", "pg_database"})


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("SELECT * FROM orders WHERE id = $1", "select"),
        ("select pg_catalog.version()", "catalog"),
        ("SELECT 1", "catalog"),
        (
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace",
            "catalog",
        ),
        ("SELECT * FROM information_schema.tables", "catalog"),
        ("SELECT * FROM orders o JOIN pg_class c ON true", "mixed"),
        ("WITH pg_class AS (SELECT 1) SELECT * FROM pg_class", "catalog"),
        ("WITH x AS (SELECT * FROM orders) SELECT * FROM x", "select"),
        # a WITH query's own body reads the relation it is named after; later ones read it
        ("WITH orders AS (SELECT * FROM orders WHERE id = 1) SELECT * FROM orders", "select"),
        ("WITH orders AS (SELECT 1 AS id), b AS (SELECT * FROM orders) SELECT * FROM b", "catalog"),
        ("WITH b AS (SELECT * FROM orders), orders AS (SELECT 1) SELECT * FROM b", "select"),
        ("SELECT (WITH orders AS (SELECT 1) SELECT * FROM orders), * FROM orders", "select"),
        (
            "WITH RECURSIVE orders(n) AS (SELECT 1 UNION ALL SELECT n FROM orders) SELECT 1",
            "catalog",
        ),
        ("FROM orders SELECT *", "select"),  # DuckDB's syntax: DuckDB's to read
        ("INSERT INTO orders VALUES (1)", "select"),  # refused by DuckDB's side in its words
        ("BEGIN ISOLATION LEVEL REPEATABLE READ", "begin"),
        ("COMMIT AND CHAIN", "begin"),
        ("SET TIME ZONE 'Asia/Kolkata'", "set"),
        ("SET ROLE postgres", "refused"),
        ("SHOW transaction isolation level", "show"),
        ("DISCARD ALL", "discard"),
        ("DECLARE c CURSOR WITH HOLD FOR SELECT * FROM orders", "declare"),
        ("DECLARE c SCROLL CURSOR FOR SELECT 1", "refused"),
        ("FETCH BACKWARD 1 FROM c", "refused"),
        ("PREPARE TRANSACTION 'x'", "refused"),
        ("-- a comment alone", "empty"),
    ],
)
def test_each_statement_goes_where_postgresql_s_parser_says(text: str, kind: str) -> None:
    assert statements.classify(text, CATALOGS).kind == kind


def test_cursors_and_settings_as_postgresql_reads_them() -> None:
    declared = statements.classify(
        'DECLARE "c d" CURSOR WITH HOLD FOR SELECT 1 FOR UPDATE', CATALOGS
    )
    assert (declared.name, declared.value, declared.hold) == ("c d", "SELECT 1 FOR UPDATE", True)
    for text, count in (
        ("FETCH c", 1),
        ("FETCH ALL FROM c", None),
        ("FETCH 0 c", 0),
        ("FETCH 7 IN c", 7),
    ):
        assert statements.classify(text, CATALOGS).count == count, text
    assert statements.classify("SET search_path = public, sales", CATALOGS).name == "search_path"
    assert statements.classify("RESET ALL", CATALOGS).name == "all"
    assert statements.classify("SET LOCAL TimeZone TO 'UTC'", CATALOGS).local


def test_columns_are_named_and_traced_as_postgresql_does() -> None:
    text = ("SELECT count(*), o.id, id::text, 1::int, 'a', coalesce(a, b), x AS y, "
            "(SELECT max(z) FROM t), EXISTS (SELECT 1), CASE WHEN a THEN b END FROM orders o")  # fmt: skip
    found = statements.classify(text, CATALOGS)
    assert found.names == ("count", "id", "id", "int4", "?column?", "coalesce", "y", "max",
                           "exists", "case")  # fmt: skip
    assert found.origins is not None
    assert found.origins[:3] == (None, (None, "orders", "id"), None)  # plainly a column, or not
    origins = statements.classify("SELECT o.id, status, 1 FROM public.orders o", CATALOGS).origins
    assert origins == (("public", "orders", "id"), ("public", "orders", "status"), None)
    assert statements.classify("SELECT * FROM orders", CATALOGS).origins == (
        (None, "orders", None),
    )
    assert statements.classify("SELECT a FROM x UNION SELECT b FROM y", CATALOGS).names == ("a",)


def test_the_shared_relations_are_narrowed_to_serve_s_own() -> None:
    said = narrowed(
        "SELECT d.datname, pg_catalog.version() FROM pg_catalog.pg_database d", "PG 15 (x)"
    )
    assert "current_database()" in said and "'PG 15 (x)'" in said and " AS version" in said
    assert narrowed("SELECT relname FROM pg_class", "v") == "SELECT relname FROM pg_class"
    assert "pg_backend_pid()" in narrowed("SELECT * FROM pg_stat_activity", "v")
    cte = "WITH pg_roles AS (SELECT 1 AS rolname) SELECT rolname FROM pg_roles"
    assert narrowed(cte, "v") == cte  # a name the statement defines is its own
    # but for that WITH query's own body, which reads the shared relation: narrowed there
    own = "WITH pg_database AS (SELECT * FROM pg_database) SELECT datname FROM pg_database"
    said = narrowed(own, "v")
    assert said.count("current_database()") == 1 and said.endswith("FROM pg_database")
    assert {"pg_database", "pg_roles", "pg_stat_activity", "pg_locks", "pg_shdescription"} <= set(
        SHARED
    )


def test_the_column_lists_leave_out_what_serve_shows_by_name_only() -> None:
    for text in (
        "SELECT attname FROM pg_attribute",
        "SELECT a.attname FROM pg_catalog.pg_attribute a",
        "SELECT column_name FROM information_schema.columns",
        "SELECT * FROM information_schema.column_privileges",
    ):
        said = narrowed(text, "v")
        assert "'_archiver_file'" in said and "'__pg_text'" in said, said
    # a column written with its relation's schema (SQLAlchemy's) reads the subquery
    said = narrowed(
        "SELECT pg_catalog.pg_attribute.attname FROM pg_catalog.pg_attribute "
        "WHERE pg_catalog.pg_attribute.attnum > 0",
        "v",
    )
    assert said.startswith("SELECT pg_attribute.attname FROM (SELECT") and said.endswith(
        "AS pg_attribute WHERE pg_attribute.attnum > 0"
    ), said
    # a relation of that name in no catalog's schema is the client's own
    assert narrowed("SELECT 1 FROM public.pg_attribute", "v") == "SELECT 1 FROM public.pg_attribute"
    assert narrowed("SELECT 1 FROM columns", "v") == "SELECT 1 FROM columns"


def _registry() -> Registry:
    # (oid, typname, typtype, typsend, typelem, typbasetype, typlen, typcategory,
    #  typdelim, rngsubtype, range of a multirange, composite attributes): pg_type's own
    rows = [
        (23, "int4", "b", "int4send", 0, 0, 4, "N", ",", None, None, []),
        (25, "text", "b", "textsend", 0, 0, -1, "S", ",", None, None, []),
        (1007, "_int4", "b", "array_send", 23, 0, -1, "A", ",", None, None, []),
        (1184, "timestamptz", "b", "timestamptz_send", 0, 0, 8, "D", ",", None, None, []),
        (3904, "int4range", "r", "range_send", 0, 0, -1, "R", ",", 23, None, []),
        (4451, "int4multirange", "m", "multirange_send", 0, 0, -1, "R", ",", None, 3904, []),
        (3910, "tstzrange", "r", "range_send", 0, 0, -1, "R", ",", 1184, None, []),
        (90001, "pair", "c", "record_send", 0, 0, -1, "C", ",", None, None, [23, 25]),
        (90002, "mood", "e", "enum_send", 0, 0, 4, "E", ",", None, None, []),
        (90003, "posint", "d", "domain_send", 0, 23, 4, "N", ",", None, None, []),
        (90004, "_pair", "b", "array_send", 90001, 0, -1, "A", ",", None, None, []),
        (869, "inet", "b", "inet_send", 0, 0, -1, "I", ",", None, None, []),
        (600, "point", "b", "point_send", 0, 0, 16, "G", ",", None, None, []),
        (1560, "bit", "b", "bit_send", 0, 0, -1, "V", ",", None, None, []),
        (3614, "tsvector", "b", "tsvectorsend", 0, 0, -1, "U", ",", None, None, []),
    ]
    return Registry(rows, {"pair": (90001, -1), "posint": (90003, -1), "tsvector": (3614, -1)})


def test_binary_forms_of_the_types_announced_by_oid() -> None:
    types = _registry()
    # composites: field count, then each field's type and value (PostgreSQL's record_send)
    assert types.binary(90001, '(7,"a b")') == struct.pack("!iIi", 2, 23, 4) + struct.pack("!i", 7) + struct.pack("!Ii", 25, 3) + b"a b"  # fmt: skip
    assert types.binary(90001, "(,)") == struct.pack("!iIiIi", 2, 23, -1, 25, -1)
    # ranges: flags (empty 1, [ 2, ] 4, no lower 8, no upper 16), then the bounds
    assert types.binary(3904, "empty") == b"\x01"
    assert types.binary(3904, "[1,10)") == b"\x02" + struct.pack("!ii", 4, 1) + struct.pack(
        "!ii", 4, 10
    )
    assert types.binary(3904, "(,5]") == bytes([0x04 | 0x08]) + struct.pack("!ii", 4, 5)
    assert types.binary(4451, "{[1,3),[5,6)}")[:4] == struct.pack("!i", 2)
    # arrays of any dimension, lower bounds kept
    two = types.binary(1007, "{{1,2},{3,NULL}}")
    assert two[:12] == struct.pack("!iiI", 2, 1, 23) and two[12:28] == struct.pack(
        "!iiii", 2, 1, 2, 1
    )
    assert types.binary(1007, "[0:1]={5,6}")[12:20] == struct.pack("!ii", 2, 0)
    assert types.binary(1007, "{}") == struct.pack("!iiI", 0, 0, 23)
    assert types.binary(90004, '{"(1,x)",NULL}')[:12] == struct.pack("!iiI", 1, 1, 90001)
    # enums as their label, domains as their base type, inet, point, bits
    assert types.binary(90002, "happy") == b"happy"
    assert types.binary(90003, "5") == struct.pack("!i", 5)
    assert types.binary(869, "10.1.0.1/8") == bytes([2, 8, 0, 4, 10, 1, 0, 1])
    assert types.binary(600, "(1.5,-2)") == struct.pack("!dd", 1.5, -2.0)
    assert types.binary(1560, "101") == struct.pack("!i", 3) + bytes([0b10100000])
    # announced: a domain as its base type; a type without a binary form as text (None)
    assert types.announce("posint") is not None and types.announce("posint").oid == 23  # type: ignore[union-attr]
    assert types.announce("tsvector") is None


def test_timestamps_inside_types_are_written_in_the_session_zone() -> None:
    from archiver.serve.text import Zone

    types, kolkata = _registry(), Zone("Asia/Kolkata")
    assert types.zoned(3910) and not types.zoned(3904)
    assert types.rezone(3910, '["2020-01-01 00:00:00+00","2020-01-02 00:00:00+00")', kolkata) == (
        '["2020-01-01 05:30:00+05:30","2020-01-02 05:30:00+05:30")'
    )
    assert types.rezone(3910, "(,infinity)", kolkata) == "(,infinity)"


def test_array_and_record_texts_read_back() -> None:
    assert parse_array("{{1,2},{3,NULL}}") == ([(2, 1), (2, 1)], ["1", "2", "3", None])
    assert parse_array('{"a,b","c\\"d"}') == ([(2, 1)], ["a,b", 'c"d'])
    assert parse_record('(1,"x ""y""",,"")') == ["1", 'x "y"', None, ""]
