"""SQLAlchemy 2 (psycopg) as one person against `archiver serve`: the inspector's tables,
then each statement given, one JSON list of [outcome, rows or SQLSTATE, message].
A refused sign-in: {"signin": [SQLSTATE, message]}.
Usage: python access_sqlalchemy.py SERVE_URL SQL..."""

import json
import sys

from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import DBAPIError

url, *statements = sys.argv[1:]
engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
try:
    out = {"tables": sorted(inspect(engine).get_table_names()), "statements": []}
except DBAPIError as exc:
    print(json.dumps({"signin": [exc.orig.sqlstate, str(exc.orig).strip().splitlines()[-1]]}))
    sys.exit(0)
with engine.connect() as conn:
    for statement in statements:
        try:
            rows = conn.execute(text(statement)).fetchall()
            out["statements"].append(["ok", len(rows), ""])
        except DBAPIError as exc:
            conn.rollback()
            said = str(exc.orig).splitlines()[0]
            out["statements"].append(["refused", exc.orig.sqlstate, said])
print(json.dumps(out))
