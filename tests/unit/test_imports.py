"""Commands that touch no rows stay light: the CLI and what status, jobs, show, cancel,
pause and the queue need import no pyarrow, Azure SDK, APScheduler or psycopg."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("pyarrow", "azure.storage.blob", "apscheduler", "adbc_driver_postgresql.dbapi", "psycopg")


def printed(code: str) -> list[str]:
    """What `code` prints, run in a new interpreter (nothing imported yet), word by word."""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return result.stdout.split()


def test_the_cli_imports_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "import archiver.cli, archiver.store.jobs, archiver.terminal, archiver.bulk\n"
        "import archiver.operations.enqueue, archiver.operations.restore_files, archiver.operations.verify\n"
        "import archiver.operations.inspect, archiver.operations.grants\n"
        "import archiver.model, archiver.limits, archiver.config, archiver.doctor\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    assert printed(code) == []


def test_the_bulk_driver_leaves_pyarrow_dataset_unloaded_until_used() -> None:
    """adbc's dbapi imports pyarrow.dataset for adbc_ingest alone; archiver defers it
    (bulk._DeferredModule) and it still loads, whole, on first use."""
    code = (
        "import sys\n"
        "from archiver import bulk\n"
        "bulk._DeferredModule.install('pyarrow.dataset')\n"
        "import adbc_driver_postgresql.dbapi, pyarrow.dataset\n"
        "print(type(sys.modules['pyarrow.dataset']).__name__)\n"
        "import pyarrow\n"
        "print(pyarrow.dataset.Dataset.__name__, type(sys.modules['pyarrow.dataset']).__name__)\n"
        "from pyarrow.dataset import Scanner\n"
        "print(Scanner.__name__)\n"
    )
    assert printed(code) == ["_DeferredModule", "Dataset", "module", "Scanner"]


def test_the_bulk_driver_does_not_import_polars() -> None:
    """adbc's dbapi imports polars wherever it is installed (0.34 s, for a backend
    archiver never uses); bulk._absent keeps it out of that import and no longer."""
    code = (
        "import sys\n"
        "from archiver import bulk\n"
        "with bulk._absent('polars'):\n"
        "    import adbc_driver_postgresql.dbapi\n"
        "print('polars' in sys.modules)\n"
        "import polars\n"
        "print(type(polars).__name__)\n"
    )
    assert printed(code) == ["False", "module"]


def test_a_query_loads_the_delta_extension_only_to_read_a_delta_table() -> None:
    """Loading DuckDB's delta extension costs 0.6 s of CPU; a query over files or live
    rows (every --with-live query) never needs it, a read of a Delta table does."""
    from archiver.config import Settings, StorageLocation
    from archiver.query.engine import delta_scan, engine

    settings = Settings.from_env({"ARCHIVER_DATABASE_URL": "postgresql://localhost/x"})
    location = StorageLocation.parse("file:///tmp/archive")
    loaded = "SELECT extension_name FROM duckdb_extensions() WHERE loaded ORDER BY 1"
    with engine(settings, location) as con:
        before = [r[0] for r in con.execute(loaded).fetchall()]
        assert "delta_scan('/tmp/archive/public.orders')" in delta_scan(
            con, location, "public.orders"
        )
        after = [r[0] for r in con.execute(loaded).fetchall()]
    assert "delta" not in before and "azure" not in before
    assert "delta" in after
