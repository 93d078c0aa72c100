"""The DuckDB a query runs in: its extensions (azure, delta, the postgres scanner) loaded
from their PyPI wheels, nothing downloaded at run time, and each only where the query
needs it; a secret for the storage; the statement run, its errors with what DuckDB
cannot know, and its output."""

from __future__ import annotations

import functools
import glob
import os
import re
import site
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from archiver.config import Settings, StorageLocation, connection_string_parts
from archiver.delta.location import table_uri
from archiver.errors import ConfigError, InputError, first_line

SOURCE = "_archiver_source"  # the column archiver.live's views add: 'live' or 'archive'


@functools.cache
def _extension(name: str) -> str:
    """The extension file inside its `duckdb-extension-<name>` wheel (looked up once: a
    query loads delta for each Delta table it reads)."""
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


def connect() -> Any:
    """A DuckDB connection that loads no extension by itself (nothing downloaded, none
    loaded but by load_extension).

    DuckDB checks an extension's signature each time a process loads it, by hashing the
    whole file: most of a short query's CPU (delta's file is 82 MB; docs/performance.md,
    "Live and archived rows"). The files archiver loads are its pinned wheels', by their path,
    so the check is skipped. No statement can load another: `archiver query` runs one
    SELECT (query.statement.refuse_writes; a LOAD is refused before DuckDB sees it, with
    --allow-local-files too), erase's --where is an expression, serve refuses LOAD
    itself and turns DuckDB's loading off before its first statement."""
    import duckdb

    return duckdb.connect(
        config={
            "autoinstall_known_extensions": "false",
            "autoload_known_extensions": "false",
            "allow_unsigned_extensions": "true",
        }
    )


@contextmanager
def engine(settings: Settings, location: StorageLocation) -> Iterator[Any]:
    """A DuckDB connection (`connect`) with a secret for the storage at `location` and
    the azure extension where that is Azure (the views are the caller's:
    archiver.query.views). delta_scan loads delta, and the live source the scanner, only
    when a query reads through them."""
    con = connect()
    try:
        if location.scheme == "az":
            load_extension(con, "azure")
            _azure_secret(con, settings)
        yield con
    finally:
        con.close()


def confine(con: Any, location: StorageLocation) -> None:
    """From here on `con` reads the archive at `location` and nothing else, as serve's
    DuckDB does: no local file, no other URL (read_csv('/etc/passwd') refused), no
    setting changed by the statement."""
    con.execute("SET allowed_directories = $1", [[location.reader_uri("")]])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def delta_scan(con: Any, location: StorageLocation, table: str) -> str:
    """SQL: the Delta table of `table` (schema.table), every column; the delta
    extension loaded into `con` for it."""
    load_extension(con, "delta")
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

    if fmt == "parquet" and output is None:
        raise InputError("query: --format parquet needs --output FILE")


def execute(
    con: Any, sql: str, fmt: str, output: str | None, *, explain: bool, live: bool = False
) -> Any:
    """Run `sql` on `con`: the text of a table or of EXPLAIN ANALYZE, or an Arrow table."""
    import duckdb

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
    named = re.search(r'Referenced column "([^"]+)" not found', text)  # not a candidate's
    if isinstance(exc, duckdb.BinderException) and named and named.group(1) == SOURCE:
        if not live:
            return f" ({SOURCE} is a column of query --with-live, over live and archived rows)"
        return (
            f" ({SOURCE} is a column of the tables archiver has archived or queued; "
            "a table never archived is read as it is, all of it live)"
        )
    if live or not (isinstance(exc, duckdb.CatalogException) and "Table with name" in text):
        return ""
    try:
        [(archived,)] = con.sql("SELECT getvariable('archiver_archived')").fetchall()
    except duckdb.Error:
        return ""
    return (
        f" (archived tables here: {', '.join(archived or []) or 'none yet'}; "
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


def _json_line(row: dict[str, Any]) -> str:
    import json

    return json.dumps(row, default=str, ensure_ascii=False) + "\n"
