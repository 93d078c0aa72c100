"""`archiver query --with-live` on a public benchmark's schema: TPC-H (DuckDB's dbgen,
the `duckdb-extension-tpch` wheel) loaded into PostgreSQL with its keys, `orders`
archived with its `lineitem` rows (`--with-children`, by `o_orderdate`), then TPC-H's
queries 1, 3 and 6 through `--with-live` against the same queries through psql over an
untouched copy of the database (whole commands both). Each answer is checked against
PostgreSQL's: a bench that times a wrong answer measures nothing."""

from __future__ import annotations

import glob
import json
import site
import time
import uuid
from decimal import Decimal, InvalidOperation
from typing import Any

from archiver.testing.services import with_database
from bench.common import archiver_cmd, env_for, psql_seconds, run_process, run_workers, sql
from bench.core import Bench

QUERIES = (1, 3, 6)
CUTOFF = "1996-01-01"  # about 55% of the orders (1992-01-01 .. 1998-08-02)
KEYS = (
    "ALTER TABLE customer ADD PRIMARY KEY (c_custkey)",
    "ALTER TABLE orders ADD PRIMARY KEY (o_orderkey)",
    "ALTER TABLE lineitem ADD PRIMARY KEY (l_orderkey, l_linenumber)",
    "ALTER TABLE orders ADD FOREIGN KEY (o_custkey) REFERENCES customer",
    "ALTER TABLE lineitem ADD FOREIGN KEY (l_orderkey) REFERENCES orders ON DELETE CASCADE",
    "CREATE INDEX ON orders (o_orderdate)",
    "VACUUM (ANALYZE) customer, orders, lineitem",
)


def _duckdb(*extensions: str) -> Any:
    import duckdb

    con = duckdb.connect(
        config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}
    )
    root = site.getsitepackages()[0]
    for name in extensions:
        con.execute(f"LOAD '{glob.glob(f'{root}/duckdb_extension_{name}/extensions/*/*')[0]}'")
    return con


def load(url: str, scale: float) -> dict[int, str]:
    """TPC-H at `scale` into the database at `url` (customer, orders, lineitem with their
    keys); the text of the queries."""
    con = _duckdb("tpch", "postgres_scanner")
    con.execute(f"CALL dbgen(sf = {scale})")
    con.execute(f"ATTACH '{url}' AS pg (TYPE postgres)")
    for table in ("customer", "orders", "lineitem"):
        con.execute(f"CREATE TABLE pg.public.{table} AS SELECT * FROM {table}")
    queries = {
        n: q
        for n, q in con.execute(
            f"SELECT query_nr, query FROM tpch_queries() WHERE query_nr IN {QUERIES}"
        ).fetchall()
    }
    con.close()
    for statement in KEYS:
        sql(url, statement)
    return queries


def tpch_with_live(bench: Bench) -> None:
    scale, repeat = bench.args.tpch_scale, bench.args.repeat
    name = f"{bench.dbs.tag}_tpch_{uuid.uuid4().hex[:6]}"
    sql(bench.admin_url, f'CREATE DATABASE "{name}"')
    bench.dbs.made.append(name)
    url = with_database(bench.admin_url, name)
    queries = load(url, scale)
    sql(bench.admin_url, f'CREATE DATABASE "{name}_untouched" TEMPLATE "{name}"')
    bench.dbs.made.append(f"{name}_untouched")
    untouched = with_database(bench.admin_url, f"{name}_untouched")
    env = env_for(url, bench.storage("file"), None, ARCHIVER_DELTA="false")
    for args in (["migrate"], ["enqueue", "--table", "orders", "--column", "o_orderdate",
                               "--before", CUTOFF, "--with-children"]):  # fmt: skip
        run_process(archiver_cmd(*args), env)
    run_workers(env, 1)
    moved = sql(untouched, f"SELECT count(*) FROM orders WHERE o_orderdate < '{CUTOFF}'")[0][0]
    left = sql(url, "SELECT count(*) FROM orders")[0][0]
    if left + moved != sql(untouched, "SELECT count(*) FROM orders")[0][0]:
        raise RuntimeError("the TPC-H move did not take the orders it should have")
    for n, query in queries.items():
        _same_answer(env, untouched, query, n)
        mine = min(_seconds(env, query) for _ in range(repeat))
        theirs = min(psql_seconds(untouched, query) for _ in range(repeat))
        bench.add(f"TPC-H Q{n} (SF {scale:g}), query --with-live, {moved:,} of "
                  f"{moved + left:,} orders archived with their lineitems", mine, theirs, "s",
                  "(reported: psql over an untouched copy)", None)  # fmt: skip


def _seconds(env: dict[str, str], query: str) -> float:
    started = time.monotonic()
    run_process(archiver_cmd("query", "--with-live", query), env)
    return time.monotonic() - started


def _same_answer(env: dict[str, str], untouched: str, query: str, n: int) -> None:
    """--with-live's rows equal PostgreSQL's over the untouched copy (numbers to the
    cent: sums of decimals may differ in their last digits between the engines)."""
    done = run_process(archiver_cmd("query", "--with-live", query, "--format", "json"), env)
    mine = [list(json.loads(line).values()) for line in done.splitlines()]
    theirs = [list(r.values()) for r in sql(untouched, query.rstrip().rstrip(";"))]

    def same(a: object, b: object) -> bool:
        try:
            x, y = Decimal(str(a)), Decimal(str(b))
        except InvalidOperation:
            return str(a) == str(b)
        return abs(x - y) <= Decimal("0.01") + abs(y) * Decimal("1e-9")

    if len(mine) != len(theirs) or not all(
        len(r) == len(t) and all(same(a, b) for a, b in zip(r, t, strict=True))
        for r, t in zip(mine, theirs, strict=True)
    ):
        raise RuntimeError(
            f"TPC-H Q{n}: --with-live answered {mine[:2]}…, PostgreSQL {theirs[:2]}…"
        )
