"""The catalog SQL of clients that cannot run here, written to ask what their sources
ask (read there; no .NET and no Grafana run on this machine):

- Npgsql, Power BI's driver (src/Npgsql/PostgresDatabaseInfo.cs, LoadBackendTypes): one
  simple query of four statements at connect -- version(); every base, range,
  multirange, enum and domain type, arrays told apart by their receive function
  (`array_recv` in pg_proc: an empty pg_proc loads no type), with their element, range
  subtype or domain base type, free-standing composites and arrays of those; the
  composites' fields; the enums' labels in their sort order. It reads each column as
  text and crashes on a NULL where it expects a value.
- Grafana's PostgreSQL data source (postgresMetaQuery.ts): the server's version number,
  whether TimeScaleDB is there, the schemas, the tables (named bare where the search
  path finds them), a table's columns and their types.
"""

from __future__ import annotations

NPGSQL_TYPES = """SELECT version();

SELECT n.nspname, k.oid, k.typname, k.kind, k.typnotnull, k.inner_oid
FROM (
    SELECT t.oid, t.typnamespace, t.typname, t.typnotnull, c.relkind,
           CASE WHEN p.proname = 'array_recv' THEN 'a' ELSE t.typtype END AS kind,
           CASE WHEN p.proname = 'array_recv' THEN t.typelem
                WHEN t.typtype = 'r' THEN r.rngsubtype
                WHEN t.typtype = 'm' THEN (SELECT r2.rngtypid FROM pg_range r2 WHERE r2.rngmultitypid = t.oid)
                WHEN t.typtype = 'd' THEN t.typbasetype END AS inner_oid
    FROM pg_type t
    LEFT JOIN pg_class c ON c.oid = t.typrelid
    LEFT JOIN pg_proc p ON p.oid = t.typreceive
    LEFT JOIN pg_range r ON r.rngtypid = t.oid
) AS k
JOIN pg_namespace n ON n.oid = k.typnamespace
LEFT JOIN pg_type inner_t ON inner_t.oid = k.inner_oid
LEFT JOIN pg_class inner_c ON inner_c.oid = inner_t.typrelid
LEFT JOIN pg_proc inner_p ON inner_p.oid = inner_t.typreceive
WHERE k.kind IN ('b', 'r', 'm', 'e', 'd')
   OR (k.kind = 'c' AND k.relkind = 'c')  -- free-standing composites, not tables' rows
   OR (k.kind = 'p' AND k.typname IN ('record', 'void'))
   OR (k.kind = 'a' AND (
        (CASE WHEN inner_p.proname = 'array_recv' THEN 'a' ELSE inner_t.typtype END) IN ('b', 'r', 'm', 'e', 'd')
        OR (inner_t.typtype = 'p' AND inner_t.typname IN ('record', 'void'))
        OR (inner_t.typtype = 'c' AND inner_c.relkind = 'c')))
ORDER BY CASE WHEN k.kind IN ('b', 'e', 'p') THEN 0 WHEN k.kind = 'r' THEN 1 WHEN k.kind = 'm' THEN 2
              WHEN k.kind = 'c' THEN 3 WHEN k.kind = 'd' THEN 4 ELSE 5 END;

-- the fields of the free-standing composites
SELECT t.oid, a.attname, a.atttypid
FROM pg_type t
JOIN pg_class c ON c.oid = t.typrelid
JOIN pg_attribute a ON a.attrelid = t.typrelid
WHERE t.typtype = 'c' AND c.relkind = 'c' AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY t.oid, a.attnum;

-- the enums' labels
SELECT t.oid, e.enumlabel FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid
ORDER BY t.oid, e.enumsortorder;
"""

_ON_SEARCH_PATH = """quote_ident(table_schema) IN (
    SELECT CASE WHEN trim(part[i]) = '"$user"' THEN user ELSE trim(part[i]) END
    FROM string_to_array(current_setting('search_path'), ',') AS part,
         generate_series(array_lower(string_to_array(current_setting('search_path'), ','), 1),
                         array_upper(string_to_array(current_setting('search_path'), ','), 1)) AS i)"""

GRAFANA = {
    "version": "SELECT current_setting('server_version_num')::int / 100 AS version",
    "timescaledb": "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'",
    "schemas": """SELECT schema_name AS "name" FROM information_schema.schemata
                  WHERE schema_name NOT IN ('information_schema', 'pg_catalog', 'pg_toast')
                  ORDER BY schema_name""",
    "tables": f"""SELECT CASE WHEN {_ON_SEARCH_PATH} THEN quote_ident(table_name)
                              ELSE quote_ident(table_schema) || '.' || quote_ident(table_name) END AS "table"
                  FROM information_schema.tables
                  WHERE quote_ident(table_schema) NOT IN ('information_schema', 'pg_catalog')
                  ORDER BY CASE WHEN {_ON_SEARCH_PATH} THEN 0 ELSE 1 END, 1""",
    "columns": f"""SELECT quote_ident(column_name) AS "column", data_type AS "type"
                   FROM information_schema.columns
                   WHERE CASE WHEN array_length(parse_ident(%s), 1) = 2
                              THEN quote_ident(table_schema) = (parse_ident(%s))[1]
                                   AND quote_ident(table_name) = (parse_ident(%s))[2]
                              ELSE quote_ident(table_name) = %s AND {_ON_SEARCH_PATH} END""",
}

# pgjdbc's DatabaseMetaData (PgDatabaseMetaData.java; the driver itself runs in
# tests/integration/test_serve_clients.py): schemas, tables with their type and remarks, columns with
# their type, default and remarks, the primary key through the index's key columns, and
# the type lookup it makes for an OID it does not know.
PGJDBC = (
    """SELECT nspname AS table_schem, NULL AS table_catalog FROM pg_catalog.pg_namespace
       WHERE nspname <> 'pg_toast' AND (nspname !~ '^pg_temp_' OR nspname = (pg_catalog.current_schemas(true))[1])
       ORDER BY table_schem""",
    """SELECT NULL AS table_cat, n.nspname AS table_schem, c.relname AS table_name,
              CASE WHEN n.nspname ~ '^pg_' OR n.nspname = 'information_schema'
                   THEN CASE c.relkind WHEN 'r' THEN 'SYSTEM TABLE' WHEN 'v' THEN 'SYSTEM VIEW' ELSE NULL END
                   ELSE CASE c.relkind WHEN 'r' THEN 'TABLE' WHEN 'p' THEN 'PARTITIONED TABLE' WHEN 'i' THEN 'INDEX'
                                       WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' WHEN 'c' THEN 'TYPE'
                                       WHEN 'f' THEN 'FOREIGN TABLE' WHEN 'm' THEN 'MATERIALIZED VIEW' END END AS table_type,
              d.description AS remarks
       FROM pg_catalog.pg_namespace n, pg_catalog.pg_class c
       LEFT JOIN pg_catalog.pg_description d
              ON c.oid = d.objoid AND d.objsubid = 0 AND d.classoid = 'pg_class'::regclass
       WHERE c.relnamespace = n.oid AND c.relname LIKE '%'
       ORDER BY table_type, table_schem, table_name""",
    """SELECT * FROM (
         SELECT n.nspname, c.relname, a.attname, a.atttypid, a.attnotnull OR (t.typtype = 'd' AND t.typnotnull) AS attnotnull,
                a.atttypmod, a.attlen, t.typtypmod, row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum) AS attnum,
                nullif(a.attidentity, '') AS attidentity, nullif(a.attgenerated, '') AS attgenerated,
                pg_catalog.pg_get_expr(def.adbin, def.adrelid) AS adsrc, dsc.description, t.typbasetype, t.typtype
         FROM pg_catalog.pg_namespace n
         JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid
         JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
         JOIN pg_catalog.pg_type t ON a.atttypid = t.oid
         LEFT JOIN pg_catalog.pg_attrdef def ON a.attrelid = def.adrelid AND a.attnum = def.adnum
         LEFT JOIN pg_catalog.pg_description dsc ON c.oid = dsc.objoid AND a.attnum = dsc.objsubid
         LEFT JOIN pg_catalog.pg_class dc ON dc.oid = dsc.classoid AND dc.relname = 'pg_class'
         LEFT JOIN pg_catalog.pg_namespace dn ON dc.relnamespace = dn.oid AND dn.nspname = 'pg_catalog'
         WHERE c.relkind IN ('r', 'p', 'v', 'f', 'm') AND a.attnum > 0 AND NOT a.attisdropped
           AND n.nspname LIKE 'public' AND c.relname LIKE 'orders') AS c
       WHERE true ORDER BY nspname, c.relname, attnum""",
    """SELECT result.table_cat, result.table_schem, result.table_name, result.column_name, result.key_seq, result.pk_name
       FROM (SELECT NULL AS table_cat, n.nspname AS table_schem, ct.relname AS table_name, a.attname AS column_name,
                    (information_schema._pg_expandarray(i.indkey)).n AS key_seq, ci.relname AS pk_name,
                    information_schema._pg_expandarray(i.indkey) AS keys, a.attnum AS a_attnum
             FROM pg_catalog.pg_class ct
             JOIN pg_catalog.pg_attribute a ON ct.oid = a.attrelid
             JOIN pg_catalog.pg_namespace n ON ct.relnamespace = n.oid
             JOIN pg_catalog.pg_index i ON a.attrelid = i.indrelid
             JOIN pg_catalog.pg_class ci ON ci.oid = i.indexrelid
             WHERE true AND ct.relname = E'orders' AND i.indisprimary) AS result
       WHERE result.a_attnum = (result.keys).x ORDER BY result.table_name, result.pk_name, result.key_seq""",
    """SELECT typinput = 'pg_catalog.array_in'::regproc AS is_array, typtype, typname, pg_type.oid
       FROM pg_catalog.pg_type
       LEFT JOIN (SELECT ns.oid AS nspoid, ns.nspname, r.r FROM pg_namespace AS ns
                  JOIN (SELECT s.r, (current_schemas(false))[s.r] AS nspname
                        FROM generate_series(1, array_upper(current_schemas(false), 1)) AS s(r)) AS r
                  USING (nspname)) AS sp ON sp.nspoid = typnamespace
       WHERE pg_type.oid = 'order_status'::regtype::oid ORDER BY sp.r, pg_type.oid DESC""",
)

# SQLAlchemy 2's PostgreSQL dialect (dialects/postgresql/base.py; the inspector itself
# runs in tests/integration/test_serve_clients.py): the visible tables, a table's columns with type,
# default, NOT NULL, comment, identity and generation, its primary key, foreign keys and
# indexes, the enums with their labels and the domains.
SQLALCHEMY = (
    """SELECT pg_catalog.pg_class.relname FROM pg_catalog.pg_class
       JOIN pg_catalog.pg_namespace ON pg_catalog.pg_namespace.oid = pg_catalog.pg_class.relnamespace
       WHERE pg_catalog.pg_class.relkind = ANY (ARRAY['r', 'p']) AND pg_catalog.pg_class.relpersistence != 't'
         AND pg_catalog.pg_table_is_visible(pg_catalog.pg_class.oid) AND pg_catalog.pg_namespace.nspname != 'pg_catalog'""",
    """SELECT a.attname AS name, pg_catalog.format_type(a.atttypid, a.atttypmod) AS format_type,
              (SELECT pg_catalog.pg_get_expr(d.adbin, d.adrelid) FROM pg_catalog.pg_attrdef d
               WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum AND a.atthasdef) AS "default",
              a.attnotnull AS not_null, c.relname AS table_name, dsc.description AS comment,
              a.attgenerated AS generated, a.attidentity AS identity,
              (SELECT coll.collname FROM pg_catalog.pg_collation coll, pg_catalog.pg_type t
               WHERE coll.oid = a.attcollation AND t.oid = a.atttypid AND a.attcollation <> t.typcollation) AS collation
       FROM pg_catalog.pg_class c
       LEFT JOIN pg_catalog.pg_attribute a ON c.oid = a.attrelid AND a.attnum > 0 AND NOT a.attisdropped
       LEFT JOIN pg_catalog.pg_description dsc ON dsc.objoid = a.attrelid AND dsc.objsubid = a.attnum
       JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
       WHERE c.relkind = ANY (ARRAY['r', 'p', 'f', 'v', 'm']) AND pg_catalog.pg_table_is_visible(c.oid)
         AND n.nspname != 'pg_catalog' AND c.relname IN ('orders', 'Lines')
       ORDER BY c.relname, a.attnum""",
    """SELECT attr.conrelid, array_agg(CAST(attr.attname AS text) ORDER BY attr.ord) AS cols,
              attr.conname, min(attr.description) AS description
       FROM (SELECT con.conrelid, con.conname, con.description, att.attname, con.ord
             FROM (SELECT pg_catalog.pg_constraint.conrelid, pg_catalog.pg_constraint.conname,
                          unnest(pg_catalog.pg_constraint.conkey) AS attnum,
                          generate_subscripts(pg_catalog.pg_constraint.conkey, 1) AS ord,
                          pg_catalog.pg_description.description
                   FROM pg_catalog.pg_constraint
                   LEFT JOIN pg_catalog.pg_description ON pg_catalog.pg_description.objoid = pg_catalog.pg_constraint.oid
                   WHERE pg_catalog.pg_constraint.contype = 'p'
                     AND pg_catalog.pg_constraint.conrelid IN ('orders'::regclass)) AS con
             JOIN pg_catalog.pg_attribute AS att ON con.conrelid = att.attrelid AND con.attnum = att.attnum) AS attr
       GROUP BY attr.conrelid, attr.conname ORDER BY attr.conrelid, attr.conname""",
    """SELECT c.relname, con.conname, pg_catalog.pg_get_constraintdef(con.oid, true) AS condef,
              con.conamespace, nsp_ref.nspname, dsc.description
       FROM pg_catalog.pg_class c
       JOIN pg_catalog.pg_constraint con ON c.oid = con.conrelid AND con.contype = 'f'
       JOIN pg_catalog.pg_class c_ref ON c_ref.oid = con.confrelid
       JOIN pg_catalog.pg_namespace nsp_ref ON c_ref.relnamespace = nsp_ref.oid
       LEFT JOIN pg_catalog.pg_description dsc ON dsc.objoid = con.oid
       WHERE c.relkind = ANY (ARRAY['r', 'p', 'f', 'v', 'm']) AND c.relname = 'orders'
       ORDER BY c.relname, con.conname""",
    """SELECT pg_catalog.pg_index.indrelid, cls_idx.relname AS relname_index, pg_catalog.pg_index.indisunique,
              pg_catalog.pg_constraint.conrelid IS NOT NULL AS has_constraint, pg_catalog.pg_index.indoption,
              cls_idx.reloptions, pg_catalog.pg_am.amname,
              CASE WHEN pg_catalog.pg_index.indpred IS NOT NULL
                   THEN pg_catalog.pg_get_expr(pg_catalog.pg_index.indpred, pg_catalog.pg_index.indrelid) END AS filter_definition,
              pg_catalog.pg_index.indnkeyatts, pg_catalog.pg_index.indnullsnotdistinct,
              pg_catalog.pg_get_indexdef(pg_catalog.pg_index.indexrelid) AS definition
       FROM pg_catalog.pg_index
       JOIN pg_catalog.pg_class AS cls_idx ON pg_catalog.pg_index.indexrelid = cls_idx.oid
       JOIN pg_catalog.pg_am ON cls_idx.relam = pg_catalog.pg_am.oid
       LEFT JOIN pg_catalog.pg_constraint ON pg_catalog.pg_index.indrelid = pg_catalog.pg_constraint.conrelid
            AND pg_catalog.pg_index.indexrelid = pg_catalog.pg_constraint.conindid
            AND pg_catalog.pg_constraint.contype = ANY (ARRAY['p', 'u', 'x'])
       WHERE pg_catalog.pg_index.indrelid IN ('orders'::regclass) AND NOT pg_catalog.pg_index.indisprimary
       ORDER BY pg_catalog.pg_index.indrelid, cls_idx.relname""",
    """SELECT pg_catalog.pg_type.typname AS name, pg_catalog.pg_type_is_visible(pg_catalog.pg_type.oid) AS visible,
              pg_catalog.pg_namespace.nspname AS schema,
              array_agg(pg_catalog.pg_enum.enumlabel ORDER BY pg_catalog.pg_enum.enumsortorder) AS labels
       FROM pg_catalog.pg_type
       JOIN pg_catalog.pg_namespace ON pg_catalog.pg_namespace.oid = pg_catalog.pg_type.typnamespace
       LEFT JOIN pg_catalog.pg_enum ON pg_catalog.pg_type.oid = pg_catalog.pg_enum.enumtypid
       WHERE pg_catalog.pg_type.typtype = 'e'
       GROUP BY pg_catalog.pg_type.typname, pg_catalog.pg_type.oid, pg_catalog.pg_namespace.nspname
       ORDER BY schema, name""",
    """SELECT t.typname AS name, pg_catalog.format_type(t.typbasetype, t.typtypmod) AS attype,
              NOT t.typnotnull AS nullable, t.typdefault AS "default",
              pg_catalog.pg_type_is_visible(t.oid) AS visible, n.nspname AS schema
       FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
       WHERE t.typtype = 'd' ORDER BY n.nspname, t.typname""",
)
