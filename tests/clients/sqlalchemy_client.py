"""SQLAlchemy 2 (psycopg) and pandas against `archiver serve`, beside the same calls
against the source database: what Superset's database sync and a notebook's
pandas.read_sql call. Prints one JSON object for tests/integration/test_serve_clients.py to compare.
Usage: python sqlalchemy_client.py SERVE_URL SOURCE_URL ID..."""

import json
import sys

import pandas as pd
from sqlalchemy import create_engine, inspect

serve_url, source_url, *ids = sys.argv[1:]
TABLES = (("orders", None), ("alltypes", None), ("Order Lines", "Sales"))


def described(engine):
    inspector = inspect(engine)
    out = {
        "schemas": sorted(inspector.get_schema_names()),
        "tables": sorted(inspector.get_table_names()),
        "sales": sorted(inspector.get_table_names(schema="Sales")),
        "columns": {},
        "keys": {},
        "foreign": {},
        "indexes": {},
    }
    for table, schema in TABLES:
        columns = inspector.get_columns(table, schema=schema)
        out["columns"][table] = [[c["name"], str(c["type"]), c["nullable"]] for c in columns]
        out["keys"][table] = inspector.get_pk_constraint(table, schema=schema)[
            "constrained_columns"
        ]
        out["foreign"][table] = inspector.get_foreign_keys(table, schema=schema)
        out["indexes"][table] = [i["name"] for i in inspector.get_indexes(table, schema=schema)]
    out["comment"] = inspector.get_table_comment("Order Lines", schema="Sales")["text"]
    return out


serve = create_engine(serve_url.replace("postgresql://", "postgresql+psycopg://"))
source = create_engine(source_url.replace("postgresql://", "postgresql+psycopg://"))
query = "SELECT id, status, total, created_at, note, tags FROM {} WHERE id IN ({}) ORDER BY id"
frame = pd.read_sql(query.format("orders", ", ".join(ids)), serve)
want = pd.read_sql(query.format("untouched", ", ".join(ids)), source)
try:
    pd.testing.assert_frame_equal(frame, want)
    same = "same"
except AssertionError as exc:
    same = str(exc)
print(
    json.dumps(
        {
            "serve": described(serve),
            "source": described(source),
            "frame": same,
            "rows": len(frame),
            "dtypes": {k: str(v) for k, v in frame.dtypes.items()},
        }
    )
)
