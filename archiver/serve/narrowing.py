"""A catalog statement as the definitions database runs it: what the cluster shares
beyond that database -- the databases, roles and sessions of the server -- narrowed to
serve's own (each such relation a statement names read as the rows of this database,
this role and this session), the column lists without the columns serve shows only by
name (archiver.serve.hidden: `_archiver_file` and the exact-text companions, as
PostgreSQL lists no system column there), and `version()` naming archiver; the
statement rewritten by pglast only where it names one of them, else sent as the client
wrote it."""

from __future__ import annotations

import functools
from typing import Any

from pglast import ast, parse_sql
from pglast.stream import RawStream
from pglast.visitors import Visitor

from archiver.serve import hidden

_THIS_DATABASE = (
    "(SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())"
)
_MINE = "pid = pg_catalog.pg_backend_pid()"
# The cluster's shared relations, and which of their rows a client of serve sees.
SHARED = {
    "pg_database": "datname = pg_catalog.current_database()",
    "pg_stat_database": "datname = pg_catalog.current_database()",
    "pg_stat_database_conflicts": "datname = pg_catalog.current_database()",
    "pg_roles": "rolname = CURRENT_USER",
    "pg_user": "usename = CURRENT_USER",
    "pg_authid": "rolname = CURRENT_USER",
    "pg_shadow": "usename = CURRENT_USER",
    "pg_group": "false",
    "pg_auth_members": "false",
    "pg_db_role_setting": "false",
    "pg_shdescription": f"classoid = 'pg_catalog.pg_database'::pg_catalog.regclass AND objoid = {_THIS_DATABASE}",
    "pg_shdepend": f"dbid = {_THIS_DATABASE}",
    "pg_shseclabel": "false",
    "pg_stat_activity": _MINE,
    "pg_locks": _MINE,
    "pg_stat_ssl": _MINE,
    "pg_stat_gssapi": _MINE,
    "pg_stat_progress_analyze": _MINE,
    "pg_stat_progress_basebackup": _MINE,
    "pg_stat_progress_cluster": _MINE,
    "pg_stat_progress_copy": _MINE,
    "pg_stat_progress_create_index": _MINE,
    "pg_stat_progress_vacuum": _MINE,
    "pg_prepared_xacts": "database = pg_catalog.current_database()",
    "pg_replication_slots": "false",
    "pg_replication_origin": "false",
    "pg_replication_origin_status": "false",
    "pg_stat_replication": "false",
    "pg_stat_replication_slots": "false",
    "pg_stat_wal_receiver": "false",
    "pg_stat_subscription": "false",
    "pg_stat_subscription_stats": "false",
    "pg_subscription": "false",
}

# The catalogs that list a table's columns, and the column that names them there
# (information_schema by its name alone: no search path of a client holds it).
COLUMN_LISTS = {
    ("pg_catalog", "pg_attribute"): "attname",
    ("information_schema", "columns"): "column_name",
    ("information_schema", "column_privileges"): "column_name",
    ("information_schema", "role_column_grants"): "column_name",
    ("information_schema", "column_udt_usage"): "column_name",
}


def _rows_shown(schema: str | None, name: str) -> tuple[str, str] | None:
    """Where a relation named so (its schema as written, if it was) is one whose rows a
    client of serve sees only some of: its schema, and the condition on its rows."""
    if schema in (None, "pg_catalog") and name in SHARED:
        return "pg_catalog", SHARED[name]
    column = COLUMN_LISTS.get((schema or "pg_catalog", name))
    if column is None:
        return None
    return schema or "pg_catalog", hidden.catalog_filter(column)


@functools.lru_cache(maxsize=1024)
def narrowed(text: str, version: str) -> str:
    """The statement the definitions database runs for a client's: as written, or, where
    it names a shared relation, a column list or version() (which says `version`),
    rewritten and deparsed by pglast."""
    tree = parse_sql(text)
    hidden: set[int] = set()
    _with_queries(tree, frozenset(), hidden)
    narrowing = _Narrowing(version, hidden)
    narrowing(tree)
    if not narrowing.changed:
        return text
    return str(RawStream()(tree))


def _with_queries(node: Any, names: frozenset[str], found: set[int]) -> None:
    """Into `found`, the RangeVars of a parse that name a WITH query, not a relation: a
    WITH query's name hides a relation's in its statement and in the WITH queries after
    it -- under RECURSIVE in all of them, its own included -- as PostgreSQL resolves
    names (a WITH query named pg_database whose body reads pg_database reads the
    shared relation there, which is narrowed)."""
    if isinstance(node, (list, tuple)):
        for item in node:
            _with_queries(item, names, found)
        return
    if not isinstance(node, ast.Node):
        return
    if isinstance(node, ast.RangeVar):
        if node.schemaname is None and node.relname in names:
            found.add(id(node))
        return
    clause = getattr(node, "withClause", None)
    if clause is not None:
        queries = list(clause.ctes or ())
        defined = [str(q.ctename) for q in queries]
        for i, query in enumerate(queries):
            seen = defined if clause.recursive else defined[:i]
            _with_queries(query.ctequery, names | frozenset(seen), found)
        names |= frozenset(defined)
    for attr in getattr(type(node), "__slots__", ()):
        if attr != "withClause":
            _with_queries(getattr(node, attr), names, found)


class _Narrowing(Visitor):
    def __init__(self, version: str, hidden: set[int]) -> None:
        self.version = version
        self.changed = False
        self.hidden = hidden  # the RangeVars that name a WITH query

    def visit_RangeVar(self, ancestors: Any, node: Any) -> Any:
        shown = _rows_shown(node.schemaname, node.relname)
        if shown is None or id(node) in self.hidden:
            return None
        self.changed = True
        rows = parse_sql(f"SELECT * FROM {shown[0]}.{node.relname} WHERE {shown[1]}")[0]
        alias = node.alias or ast.Alias(aliasname=node.relname)
        return ast.RangeSubselect(lateral=False, subquery=rows.stmt, alias=alias)

    def visit_ColumnRef(self, ancestors: Any, node: Any) -> None:
        """`pg_catalog.pg_attribute.attname` (as SQLAlchemy writes it) read from the
        relation's rows as `pg_attribute.attname`: the subquery in its place is named
        so, in no schema."""
        fields: tuple[Any, ...] = tuple(node.fields or ())
        if len(fields) < 3 or not all(isinstance(f, ast.String) for f in fields[-3:]):
            return
        if _rows_shown(fields[-3].sval, fields[-2].sval) is not None:
            node.fields = tuple(fields[-2:])

    def visit_ResTarget(self, ancestors: Any, node: Any) -> None:
        if _is_version(node.val) and node.name is None:
            node.name = "version"

    def visit_FuncCall(self, ancestors: Any, node: Any) -> Any:
        if not _is_version(node):
            return None
        self.changed = True
        return ast.TypeCast(
            arg=ast.A_Const(val=ast.String(sval=self.version)),
            typeName=ast.TypeName(
                names=(ast.String(sval="pg_catalog"), ast.String(sval="text")), typemod=-1
            ),
        )


def _is_version(node: Any) -> bool:
    if not isinstance(node, ast.FuncCall) or node.args:
        return False
    names = [n.sval for n in node.funcname or ()]
    return names in (["version"], ["pg_catalog", "version"])
