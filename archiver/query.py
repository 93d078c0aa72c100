"""`archiver query`: SQL over the archived tables in place, with an embedded DuckDB and its
delta and azure extensions, loaded from their PyPI wheels (nothing is downloaded at run
time), and the parts of a query every mode shares: its refusals, its run and its
output. The views (each archived table named as in PostgreSQL) are archiver.live's."""

from __future__ import annotations

import glob
import json
import os
import site
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from archiver.config import Settings, StorageLocation
from archiver.delta.location import connection_string_parts, table_uri
from archiver.errors import ConfigError

EXTENSIONS = ("delta", "azure")
SOURCE = "_archiver_source"  # the column archiver.live's views add: 'live' or 'archive'


def _extension(name: str) -> str:
    """The extension file inside its `duckdb-extension-<name>` wheel."""
    for root in [*site.getsitepackages(), site.getusersitepackages()]:
        found = glob.glob(f"{root}/duckdb_extension_{name}/extensions/*/{name}.duckdb_extension")
        if found:
            return found[0]
    raise ConfigError(
        f"the DuckDB {name} extension is not installed (pip: duckdb-extension-{name})"
    )


def load_extension(con: Any, name: str) -> None:
    """Load DuckDB extension `name` from its wheel."""
    con.execute(f"LOAD '{_extension(name)}'")


@contextmanager
def engine(settings: Settings, location: StorageLocation) -> Iterator[Any]:
    """A DuckDB connection with the delta and azure extensions loaded and a secret for
    the storage at `location` (the views are the caller's: archiver.live)."""
    import duckdb

    con = duckdb.connect(
        config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}
    )
    try:
        for name in EXTENSIONS:
            load_extension(con, name)
        if location.scheme == "az":
            _azure_secret(con, settings)
        yield con
    finally:
        con.close()


def pin_scans(con: Any, sql: str) -> None:
    """Every read of the source in `sql` at the imported snapshot. DuckDB 1.5.5's
    postgres scanner reads a big table in ctid ranges on several connections, the others
    pinned to an export of its transaction's snapshot; but in a statement with more than
    one scan of the attached database it reads the first range of each such scan on a
    pooled connection it never pins (duckdb-postgres b7632f3 fixes it, after 1.5.5): rows
    committed after the snapshot are then read or missed (tests/test_with_live_commits.py).
    Without ctid ranges, every scan runs on the transaction's own connection: alone, it
    streams; beside others, each is read into memory first (the scanner's way of sharing
    one connection). So ranges only where the plan has exactly one scan of the source."""
    con.execute("SET pg_use_ctid_scan = false")
    try:
        plan = con.execute(f"EXPLAIN (FORMAT json) {sql}").fetchall()[0][1]
    except Exception:  # the statement's own error is the query's to report
        return
    if _scans(json.loads(plan)) == 1:
        con.execute("SET pg_use_ctid_scan = true")


def _scans(node: Any) -> int:
    """The POSTGRES_SCAN operators of a physical plan (EXPLAIN's JSON)."""
    if isinstance(node, list):
        return sum(_scans(n) for n in node)
    if not isinstance(node, dict):
        return 0
    return (node.get("name") == "POSTGRES_SCAN") + _scans(node.get("children", []))


def delta_scan(location: StorageLocation, table: str) -> str:
    """SQL: the Delta table of `table` (schema.table), every column."""
    uri = table_uri(location, table).replace("'", "''")
    return f"SELECT * FROM delta_scan('{uri}')"


def _azure_secret(con: Any, settings: Settings) -> None:
    """The worker's own Azure credentials, as a DuckDB secret. Azurite: the delta
    extension takes any devstoreaccount1 secret for the emulator and finds its port in
    AZURITE_BLOB_STORAGE_URL only (duckdb-delta), so that is set from the BlobEndpoint."""
    if settings.azure_connection_string:
        parts = connection_string_parts(settings.azure_connection_string)
        endpoint = parts.get("BlobEndpoint", "")
        if parts.get("AccountName") == "devstoreaccount1" and endpoint:
            url = urlsplit(endpoint)
            os.environ["AZURITE_BLOB_STORAGE_URL"] = f"{url.scheme}://{url.netloc}"
        secret = settings.azure_connection_string.replace("'", "''")
        con.execute(f"CREATE SECRET archive (TYPE azure, CONNECTION_STRING '{secret}')")
        return
    assert settings.azure_account_url
    account = (urlsplit(settings.azure_account_url).hostname or "").split(".")[0]
    con.execute(
        "CREATE SECRET archive (TYPE azure, PROVIDER credential_chain, "
        f"ACCOUNT_NAME '{account.replace(chr(39), '')}')"
    )


FORMATS = ("table", "csv", "json", "parquet")


def check_format(fmt: str, output: str | None) -> None:
    from archiver.errors import InputError

    if fmt == "parquet" and output is None:
        raise InputError("query: --format parquet needs --output FILE")


def execute(
    con: Any, sql: str, fmt: str, output: str | None, *, explain: bool, live: bool = False
) -> Any:
    """Run `sql` on `con`: the text of a table or of EXPLAIN ANALYZE, or an Arrow table."""
    import duckdb

    from archiver.errors import InputError, first_line

    try:
        if explain:
            return str(con.sql(f"EXPLAIN ANALYZE {sql}").fetchall()[0][1])
        relation = con.sql(sql)
        if relation is None:
            raise InputError("query: the statement returns no rows (give a SELECT)")
        if fmt == "table" and output is None:
            return str(relation)
        result = relation.arrow()
        return result.read_all() if hasattr(result, "read_all") else result
    except duckdb.Error as exc:
        raise InputError(f"query: {first_line(exc)}{_hint(con, exc, live)}") from None


def _hint(con: Any, exc: Exception, live: bool) -> str:
    """What DuckDB's error cannot know: which tables have an archive here, and where the
    column the live views add comes from."""
    import duckdb

    text = str(exc)
    if isinstance(exc, duckdb.BinderException) and SOURCE in text:
        if not live:
            return f" ({SOURCE} is a column of query --with-live, over live and archived rows)"
        return (
            f" ({SOURCE} is a column of the tables archiver has archived or queued; "
            "a table never archived is read as it is, all of it live)"
        )
    if live or not (isinstance(exc, duckdb.CatalogException) and "Table with name" in text):
        return ""
    try:
        archived = con.sql(
            "SELECT DISTINCT schema_name || '.' || view_name FROM duckdb_views() "
            "WHERE NOT internal AND schema_name <> 'main' ORDER BY 1"
        ).fetchall()
    except duckdb.Error:
        return ""
    return (
        f" (archived tables here: {', '.join(r[0] for r in archived) or 'none yet'}; "
        "a table's live rows are read with --with-live)"
    )


def write(result: Any, fmt: str, output: str | None) -> str | None:
    """`execute`'s result as text in `fmt`, or written to `output` (None)."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if isinstance(result, str):
        return result
    if fmt == "parquet":
        pq.write_table(result, output)
        return None
    if fmt == "csv":
        import io

        buffer = io.BytesIO()
        pacsv.write_csv(result, buffer)
        text = buffer.getvalue().decode()
    elif fmt == "json":
        text = "".join(_json_line(row) for row in result.to_pylist())
    else:
        text = str(result)
    if output is not None:
        with open(output, "w") as f:
            f.write(text)
        return None
    return text


def refuse_writes(sql: str) -> None:
    """Refuse, before anything runs, whatever is not one SELECT: `archiver query` reads.
    DuckDB's own parser says what each statement is, so a COPY … TO, an ATTACH, an
    INSTALL or a CREATE never reaches the engine (nor a second statement after a
    SELECT; EXPLAIN ANALYZE would run what it explains: --explain is the way)."""
    import duckdb

    from archiver.errors import InputError, first_line

    try:
        statements = duckdb.connect().extract_statements(sql)
    except duckdb.Error as exc:
        raise InputError(f"query: {first_line(exc)}") from None
    if len(statements) != 1:
        raise InputError(
            f"query: {len(statements)} statements given; archiver query runs one SELECT, "
            "nothing ran"
        )
    if statements[0].type != duckdb.StatementType.SELECT:
        words = statements[0].query.split()
        kind = words[0].upper() if words else statements[0].type.name
        raise InputError(
            f"query: {kind} refused: archiver query only reads (one SELECT); nothing ran"
        )


def named_tables(sql: str) -> set[str]:
    """The tables a SELECT names, as written (`orders`, `public.orders`), from DuckDB's
    own parse of it."""
    import json

    import duckdb

    serialized = duckdb.connect().execute("SELECT json_serialize_sql($1)", [sql]).fetchone()
    tree = json.loads(serialized[0]) if serialized else {}
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE":
                schema = node.get("schema_name") or ""
                found.add(f"{schema}.{node['table_name']}" if schema else node["table_name"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(tree)
    return found


def refuse_tables(sql: str, refused: dict[str, str]) -> None:
    """One line, before anything runs, when `sql` names a table of `refused` (schema.
    table: why), by its full name or by its bare one where one schema has it."""
    if not refused:
        return
    from archiver.errors import InputError

    named = named_tables(sql)
    bare: dict[str, list[str]] = {}
    for table in refused:
        bare.setdefault(table.split(".", 1)[1], []).append(table)
    for table, why in sorted(refused.items()):
        short = table.split(".", 1)[1]
        if table in named or (short in named and len(bare[short]) == 1):
            raise InputError(why)


def _json_line(row: dict[str, Any]) -> str:
    import json

    return json.dumps(row, default=str, ensure_ascii=False) + "\n"
