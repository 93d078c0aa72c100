"""`archiver doctor` on a good deployment and on a broken one: one line per check, and a
non-zero exit naming every problem."""

from __future__ import annotations

import adbc_driver_postgresql

from archiver.testing.reference import seed_orders
from archiver.testing.services import free_port
from tests.support import assert_refused, fresh_database, run_cli, sql
from tests.support.harness import Harness

POLICY = """
[[policy]]
name = "orders"
table = "public.orders"
older_than = "30 days"
schedule = "0 2 * * *"
"""


def test_a_good_deployment(h: Harness) -> None:
    h = h.with_env(ARCHIVER_READER_RETENTION=str(7 * 86400))  # the default (the harness: 0)
    seed_orders(h.url, 10)
    config = h.tmp / "archiver.toml"
    config.write_text(POLICY)
    result = h.cli("doctor", "--config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert all(line.startswith("ok  ") for line in lines), lines
    names = [line.split(":")[0][6:] for line in lines]
    assert names == [
        "queue database",
        "schema",
        "queue privileges",
        "bulk driver",
        "clock",
        "policies",
        "privileges on public.orders",
        "storage",
        # what the container keeps and protects (Azurite: none of it), for purge and erase
        "storage hierarchical namespace",
        "storage blob soft delete",
        "storage immutability",
        "storage blob versioning",
        "storage index tags",
        "storage access tiers",
        "readers' retention",
    ]
    assert "auth: connection string" in lines[7] and "1 valid" in lines[5]
    assert "purged and erased files are gone at once" in lines[9]
    assert "this credential may set them" in lines[-2]
    assert (
        "7 days (ARCHIVER_READER_RETENTION)" in lines[-1] and "0 files (0 B) kept now" in lines[-1]
    )
    wheel = f"adbc-driver-postgresql {adbc_driver_postgresql.__version__}, the wheel's library"
    assert wheel in lines[3]


def test_a_broken_deployment(h: Harness) -> None:
    config = h.tmp / "archiver.toml"
    config.write_text(POLICY)
    dead = f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:{free_port()}/devstoreaccount1;"
    with fresh_database("archiver_doctor") as empty:  # never migrated, no orders table
        broken = {**h.env, "ARCHIVER_DATABASE_URL": empty, "AZURE_STORAGE_CONNECTION_STRING": dead}
        result = run_cli(broken, "doctor", "--config", str(config))
        sql(empty, "SELECT 1")
    assert result.returncode == 1, result.stdout + result.stderr
    failed = {
        line.split(":")[0][6:]: line
        for line in result.stdout.splitlines()
        if line.startswith("FAIL")
    }
    assert set(failed) == {"schema", "queue privileges", "policies", "storage"}, result.stdout
    assert "run `archiver migrate`" in failed["schema"]
    assert "table public.orders not found" in failed["policies"]
    assert "a2V5" not in result.stdout + result.stderr and "Traceback" not in result.stderr

    unreachable = {**h.env, "ARCHIVER_DATABASE_URL": f"postgresql://u:pw@127.0.0.1:{free_port()}/x"}
    result = run_cli(unreachable, "doctor")
    assert result.returncode == 1 and result.stdout.startswith("FAIL  queue database")
    assert "pw" not in result.stdout


def test_archivers_schema_off_the_search_path_is_named(h: Harness) -> None:
    """A role hardened with an empty search_path does not see archiver's tables: doctor
    names the schema they are in, and every other command points at doctor."""
    name = h.url.rsplit("/", 1)[1]
    h.sql(f"ALTER DATABASE {name} SET search_path = ''")
    result = h.cli("doctor")
    assert result.returncode == 1
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("FAIL  schema")]
    assert "archiver's tables are in schema public, which is not on this role's" in line
    status = h.cli("status")
    assert_refused(status, "`archiver doctor` names it", code=1)
