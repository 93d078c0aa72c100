"""A table holding every type archiver promises to round-trip exactly, with edge values
and NULLs, and the SQL to compare two such tables with EXCEPT ALL."""

from __future__ import annotations

ALLTYPES_DDL = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS integer CHECK (VALUE > 0);
CREATE TYPE pair AS (a integer, b text);
CREATE TABLE alltypes (
  id bigint PRIMARY KEY,
  created_at timestamptz NOT NULL,
  c_int2 smallint, c_int4 integer, c_int8 bigint,
  c_num numeric(12,2), c_num_big numeric(50,10), c_num_u numeric,
  c_real real, c_double double precision,
  c_bool boolean, c_text text, c_varchar varchar(20), c_char char(5),
  c_bytea bytea, c_date date, c_ts timestamp, c_tstz timestamptz,
  c_time time, c_timetz timetz, c_interval interval, c_uuid uuid,
  c_json json, c_jsonb jsonb, c_inet inet, c_cidr cidr, c_mac macaddr,
  c_money money, c_bit bit(8), c_varbit varbit,
  c_enum mood, c_domain posint,
  c_int_arr integer[], c_text_arr text[], c_num_arr numeric[], c_ts_arr timestamptz[],
  c_date_arr date[], c_float_arr float8[], c_uuid_arr uuid[], c_enum_arr mood[],
  c_int_2d integer[][], c_pair pair, c_range int4range, c_tsrange tstzrange,
  c_xml xml, c_point point
)
"""


def _columns(ddl: str) -> tuple[str, ...]:
    body = ddl.split("CREATE TABLE alltypes (")[1].rsplit(")", 1)[0]
    items, depth, start = [], 0, 0
    for i, c in enumerate(body):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if c == "," and depth == 0:
            items.append(body[start:i])
            start = i + 1
    items.append(body[start:])
    return tuple(item.split()[0] for item in items)


# Every column of the table, in order.
ALLTYPES_COLUMNS = _columns(ALLTYPES_DDL)

# Row g of the bulk: created g minutes after 2020-01-01 UTC; each column NULL in its own
# seventh of the rows.
ALLTYPES_FILL = """
INSERT INTO alltypes
SELECT g, timestamptz '2020-01-01 00:00:00+00' + make_interval(mins => g),
  CASE WHEN g % 7 = 0 THEN NULL ELSE (g % 30000 - 15000)::smallint END,
  CASE WHEN g % 7 = 1 THEN NULL ELSE g * 7919 - 2000000000 END,
  CASE WHEN g % 7 = 2 THEN NULL ELSE g::bigint * 3037000493 END,
  CASE WHEN g % 7 = 3 THEN NULL ELSE round(g * 1.37 - 5000, 2) END,
  CASE WHEN g % 7 = 4 THEN NULL ELSE (g::numeric * 10 ^ 35 + 1 / g::numeric)::numeric(50,10) END,
  CASE WHEN g % 7 = 5 THEN NULL ELSE (g::numeric ^ 20 + 1 / 3::numeric) END,
  CASE WHEN g % 7 = 6 THEN NULL ELSE (g / 3.0)::real END,
  CASE WHEN g % 7 = 0 THEN NULL ELSE g / 7.0::float8 END,
  CASE WHEN g % 7 = 1 THEN NULL ELSE g % 2 = 0 END,
  CASE WHEN g % 7 = 2 THEN NULL ELSE 'text ' || g || E' \u00e9\u4e2d\t"q"' END,
  CASE WHEN g % 7 = 3 THEN NULL ELSE 'v' || g END,
  CASE WHEN g % 7 = 4 THEN NULL ELSE 'c' || (g % 99) END,
  CASE WHEN g % 7 = 5 THEN NULL ELSE decode(md5(g::text), 'hex') END,
  CASE WHEN g % 7 = 6 THEN NULL ELSE date '1999-12-31' + g END,
  CASE WHEN g % 7 = 0 THEN NULL ELSE timestamp '1999-12-31 23:59:59.123456' + make_interval(hours => g) END,
  CASE WHEN g % 7 = 1 THEN NULL ELSE timestamptz '1969-07-20 20:17:40.000001+00' + make_interval(days => g) END,
  CASE WHEN g % 7 = 2 THEN NULL ELSE time '00:00:00.000001' + make_interval(secs => g * 13) END,
  CASE WHEN g % 7 = 3 THEN NULL ELSE (time '12:00' + make_interval(mins => g))::timetz END,
  CASE WHEN g % 7 = 4 THEN NULL ELSE make_interval(months => g % 25 - 12, days => g % 40 - 20, secs => g * 1.000001) END,
  CASE WHEN g % 7 = 5 THEN NULL ELSE md5('u' || g)::uuid END,
  CASE WHEN g % 7 = 6 THEN NULL ELSE ('{"b": ' || g || ',  "a": [1, 2.50], "b": 0}')::json END,
  CASE WHEN g % 7 = 0 THEN NULL ELSE jsonb_build_object('g', g, 'nested', jsonb_build_array(g, NULL, 'x')) END,
  CASE WHEN g % 7 = 1 THEN NULL ELSE ('10.' || (g % 256) || '.0.1/' || (8 + g % 24))::inet END,
  CASE WHEN g % 7 = 2 THEN NULL ELSE ('10.' || (g % 256) || '.0.0/16')::cidr END,
  CASE WHEN g % 7 = 3 THEN NULL ELSE ('08:00:2b:01:' || lpad(to_hex(g % 256), 2, '0') || ':03')::macaddr END,
  CASE WHEN g % 7 = 4 THEN NULL ELSE (g * 1.01)::numeric::money END,
  CASE WHEN g % 7 = 5 THEN NULL ELSE (g % 256)::bit(8) END,
  CASE WHEN g % 7 = 6 THEN NULL ELSE substr((g::bit(32))::text, 1, 1 + g % 31)::varbit END,
  CASE WHEN g % 7 = 0 THEN NULL ELSE (ARRAY['sad', 'ok', 'happy'])[1 + g % 3]::mood END,
  CASE WHEN g % 7 = 1 THEN NULL ELSE 1 + g % 1000 END,
  CASE WHEN g % 7 = 2 THEN NULL ELSE ARRAY[g, NULL, -g] END,
  CASE WHEN g % 7 = 3 THEN NULL ELSE ARRAY['a' || g, NULL, 'NULL', 'b,"c}'] END,
  CASE WHEN g % 7 = 4 THEN NULL ELSE ARRAY[g / 3::numeric, NULL, 'NaN'] END,
  CASE WHEN g % 7 = 5 THEN NULL ELSE ARRAY[timestamptz '2020-01-01 00:00+00' + make_interval(secs => g), NULL] END,
  CASE WHEN g % 7 = 6 THEN NULL ELSE ARRAY[date '2020-01-01' - g] END,
  CASE WHEN g % 7 = 0 THEN NULL ELSE ARRAY[g / 9.0, 'NaN', '-Infinity', NULL]::float8[] END,
  CASE WHEN g % 7 = 1 THEN NULL ELSE ARRAY[md5('a' || g)::uuid, NULL] END,
  CASE WHEN g % 7 = 2 THEN NULL ELSE ARRAY['ok', NULL]::mood[] END,
  CASE WHEN g % 7 = 3 THEN NULL ELSE ARRAY[[g, 2], [3, NULL]] END,
  CASE WHEN g % 7 = 4 THEN NULL ELSE ROW(g, 'p ' || g)::pair END,
  CASE WHEN g % 7 = 5 THEN NULL ELSE int4range(g, g + 10) END,
  CASE WHEN g % 7 = 6 THEN NULL ELSE tstzrange('2020-01-01', '2020-01-01'::timestamptz + make_interval(days => g)) END,
  CASE WHEN g % 7 = 0 THEN NULL ELSE ('<r g="' || g || '">x</r>')::xml END,
  CASE WHEN g % 7 = 1 THEN NULL ELSE point(g, -g / 3.0) END
FROM generate_series(1, $1::int) g
"""

# Edge values: the extremes and special values of each type, and an all-NULL row.
ALLTYPES_EDGES = r"""
INSERT INTO alltypes VALUES
(100001, '2019-06-01', -32768, -2147483648, -9223372036854775808, 'NaN',
 -1234567890123456789012345678901234567890.0123456789, 'NaN', 'NaN', '-Infinity', true,
 E'it''s \\ "q"\ttab\nnl\u0001', 'héllo', 'ab', '\x00ff10', '-infinity', 'infinity', '-infinity',
 '24:00:00', '23:59:59.999999+14:59', '178000000 years 11 months -2147483648 days -2562047788:00:54.775807',
 '00000000-0000-0000-0000-000000000000', '{"b": 1, "a":  [1,2], "b": 2}', '{"b": 1, "a": [1, 2.50]}',
 '2001:db8::1/64', '10.0.0.0/8', 'ff:ff:ff:ff:ff:ff', '-92233720368547758.08', B'10101010', B'101',
 'happy', 5, '[0:2]={1,NULL,3}', '{"a",NULL,"b,c","NULL",""}', '{1.5,NaN,NULL,Infinity}',
 '{2020-01-01 00:00:00+00,NULL,infinity,-infinity}', '{infinity,NULL}', '{NaN,Infinity,-Infinity}',
 '{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}', '{{sad,ok},{happy,NULL}}',
 '{{{1,2},{3,NULL}},{{5,6},{7,8}}}', '(1,"x y")', '[1,10)', '[2020-01-01,infinity)', '<a>x</a>', '(1.5,2)'),
(100002, '2019-06-02', 32767, 2147483647, 9223372036854775807, 9999999999.99,
 9999999999999999999999999999999999999999.9999999999,
 '123456789012345678901234567890123456789012345678901234567890.123456789012345678901234567890',
 'Infinity', 1e308, false, '', '', '', '', '4713-01-01 BC', '4713-01-01 00:00:00 BC', '294276-12-31 23:59:59.999999+00',
 '00:00:00', '00:00:00-15:59', '-178000000 years -1 months 2147483647 days 2562047788:00:54.775807',
 'ffffffff-ffff-ffff-ffff-ffffffffffff', 'null', '{}', '::', '::/0', '00:00:00:00:00:00',
 '92233720368547758.07', B'00000000', B'', 'sad', 2147483647, '{}', '{}', '{}', '{}', '{}', '{}', '{}',
 '{}', '{}', '(,)', 'empty', '(,)', '<b/>', '(0,0)'),
(100003, '2019-06-03', 0, 0, 0, -0.01, 0, '-Infinity', '-0', '-0', NULL, ' ', 'x', 'abcde', '\x', 'infinity',
 '-infinity', 'infinity', '00:00:00.000001', '24:00:00+00', '0', NULL, '[]', '[]', '0.0.0.0', '0.0.0.0/32',
 NULL, 0, NULL, NULL, 'ok', 1, '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}', '{NULL}',
 '{{NULL}}', '(,"")', '(,)', '(,)', NULL, NULL),
(100004, '2019-06-04', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)
"""

# json, xml and point have no equality operator: compared as text. Every other column
# is compared natively, so a changed type or value shows.
COMPARED = (
    "id, created_at, c_int2, c_int4, c_int8, c_num, c_num_big, c_num_u, c_real, c_double, "
    "c_bool, c_text, c_varchar, c_char, c_bytea, c_date, c_ts, c_tstz, c_time, c_timetz, "
    "c_interval, c_uuid, c_json::text, c_jsonb, c_inet, c_cidr, c_mac, c_money, c_bit, "
    "c_varbit, c_enum, c_domain, c_int_arr, c_text_arr, c_num_arr, c_ts_arr, c_date_arr, "
    "c_float_arr, c_uuid_arr, c_enum_arr, c_int_2d, c_pair, c_range, c_tsrange, c_xml::text, "
    "c_point::text, array_dims(c_int_arr), array_dims(c_enum_arr), array_dims(c_int_2d), "
    "c_interval::text, c_num_u::text, c_num_arr::text, c_real::text, c_double::text, "
    "c_float_arr::text"
)


def difference(a: str, b: str) -> str:
    """Rows of table a not in table b, duplicates counted (EXCEPT ALL)."""
    return (
        f"SELECT count(*) FROM (SELECT {COMPARED} FROM {a} EXCEPT ALL SELECT {COMPARED} FROM {b}) d"
    )


ALLTYPES_ROWS = 3000


def seed_alltypes(url: str) -> None:
    """`alltypes` filled (ALLTYPES_ROWS rows and the edge values) and a `snapshot` of it."""
    from tests.support import sql

    sql(url, ALLTYPES_DDL.strip() + ";" + "ANALYZE")
    sql(url, ALLTYPES_FILL, ALLTYPES_ROWS)
    sql(url, ALLTYPES_EDGES)
    sql(url, "CREATE TABLE snapshot AS SELECT * FROM alltypes")
