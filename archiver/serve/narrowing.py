"""A catalog statement as the definitions database runs it: what the cluster shares
beyond that database -- the databases, roles and sessions of the server -- narrowed to
serve's own (each such relation a statement names read as the rows of this database,
this role and this session), and `version()` naming archiver; the statement rewritten
by pglast only where it names one of them, else sent as the client wrote it."""

from __future__ import annotations

import functools
from typing import Any

from pglast import ast, parse_sql
from pglast.stream import RawStream
from pglast.visitors import Visitor

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


@functools.lru_cache(maxsize=1024)
def narrowed(text: str, version: str) -> str:
    """The statement the definitions database runs for a client's: as written, or, where
    it names a shared relation or version() (which says `version`), rewritten and
    deparsed by pglast."""
    tree = parse_sql(text)
    ctes = _Names()
    ctes(tree)
    narrowing = _Narrowing(version, ctes.names)
    narrowing(tree)
    if not narrowing.changed:
        return text
    return str(RawStream()(tree))


class _Names(Visitor):
    """The names a statement's WITH clauses define (the relations it calls its own)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_CommonTableExpr(self, ancestors: Any, node: Any) -> None:
        self.names.add(node.ctename)


class _Narrowing(Visitor):
    def __init__(self, version: str, ctes: set[str]) -> None:
        self.version = version
        self.changed = False
        self.ctes = ctes

    def visit_RangeVar(self, ancestors: Any, node: Any) -> Any:
        if node.schemaname not in (None, "pg_catalog") or node.relname not in SHARED:
            return None
        if node.schemaname is None and node.relname in self.ctes:
            return None
        self.changed = True
        rows = parse_sql(f"SELECT * FROM pg_catalog.{node.relname} WHERE {SHARED[node.relname]}")[0]
        alias = node.alias or ast.Alias(aliasname=node.relname)
        return ast.RangeSubselect(lateral=False, subquery=rows.stmt, alias=alias)

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
