"""Erasing one customer from a big archive: the reference table with a customer column
(each customer's orders within one stretch of ids, as customers come and go over the
years), moved to Azurite and published as a Delta table; then `archiver erase --where
"customer_id = …"`, timed as a whole command against `archiver query` counting the
same rows in the same run (both read the same files' footers and one column); and the
files it rewrote against the files holding the customer's rows, and against all."""

from __future__ import annotations

import time

from archiver.text import counted
from bench.common import CUTOFF, archiver_cmd, env_for, run_process, run_workers, sql
from bench.core import Bench

ERAS = 200  # stretches of consecutive ids, each with its own 100 customers


def erase_at_scale(bench: Bench) -> None:
    rows = bench.args.erase_rows
    url = bench.dbs.copy(rows)
    try:
        era = max(1, rows // ERAS)
        sql(url, "ALTER TABLE orders ADD COLUMN customer_id int")
        sql(url, f"UPDATE orders SET customer_id = ((id - 1) / {era}) * 100 + id % 100")
        sql(url, "VACUUM (ANALYZE) orders")
        customer = (ERAS * 42 // 100) * 100 + 42  # customer 42 of an era in the middle
        lo, hi, erased = sql(
            url,
            "SELECT min(id), max(id), count(*) FROM orders WHERE customer_id = $1",
            customer,
        )[0]
        env = env_for(url, bench.storage("azure"), bench.azurite, ARCHIVER_DELTA="true")
        run_process(archiver_cmd("enqueue", "--table", "orders", "--before", CUTOFF), env)
        run_workers(env, 2)  # the move, then its publication
        total, holding = sql(
            url,
            "SELECT count(*), count(*) FILTER (WHERE min_key[1]::bigint <= $2 "
            "AND max_key[1]::bigint >= $1) FROM archive_files WHERE state = 'committed'",
            lo,
            hi,
        )[0]
        where = f"customer_id = {customer}"
        query = _seconds(env, "query", f"SELECT count(*) FROM orders WHERE {where}")
        erase = _seconds(env, "erase", "--table", "orders", "--where", where)
        rewritten = sql(url, "SELECT count(*) FROM archive_files WHERE path LIKE '%/rewrite-%'")[0][
            0
        ]
        left = sql(url, "SELECT count(*) FROM archive_ledger WHERE rows = $1", erased)[0][0]
        bench.add(f"erase one customer ({counted(erased, 'row')}) from a {rows:,}-row archive",
                  erase, query, "s", "archiver query of the same rows (time reported)",
                  None)  # fmt: skip
        bench.add(f"files that erase rewrote, of {total:,} (the customer's rows in {holding:,})",
                  rewritten, total, "files", "only the files holding them",
                  rewritten == holding and left == 1)  # fmt: skip
    finally:
        bench.dbs.drop(url)


def _seconds(env: dict[str, str], *args: str) -> float:
    started = time.monotonic()
    run_process(archiver_cmd(*args), env, quiet=True)
    return time.monotonic() - started
