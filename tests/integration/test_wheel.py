"""Installed the way production installs it: a wheel built from this checkout, into a fresh
virtualenv outside it, then `archiver migrate` on an empty database, a real move, and the
moved rows read back through `archiver serve` and `archiver attach` (postgres_fdw). Then
the same venv beside numpy, then beside numpy and pandas, as data teams' environments hold
them: a worker, serve and the console start and work in each (pyarrow's pandas shim and
DuckDB look for pandas on their own; nothing archiver plants may change what they find)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from archiver.testing.reference import seed_orders
from archiver.testing.services import free_port
from tests.support import ROOT, fresh_database, sql, sql_value

pytestmark = pytest.mark.slow


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (args, result.stdout[-3000:], result.stderr[-3000:])
    return result.stdout


def test_wheel_migrates_an_empty_database_and_moves_rows(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        tmp_path,
    )
    (wheel,) = dist.glob("archiver-*.whl")
    listing = run([sys.executable, "-m", "zipfile", "-l", str(wheel)], tmp_path)
    assert "archiver/migrations/001_queue_and_catalog.sql" in listing
    assert "archiver/migrations/ops/pause_table.sql" in listing

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], tmp_path)
    archiver = str(venv / "bin" / "archiver")
    store = tmp_path / "store"
    with fresh_database("archiver_wheel") as url:  # empty: no template
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "ARCHIVER_DATABASE_URL": url,
            "ARCHIVER_STORAGE_URL": f"file://{store}",
        }
        outside = tmp_path  # not the checkout: nothing may come from it
        applied = run([archiver, "migrate"], outside, env)
        assert applied.startswith("applied 001_queue_and_catalog.sql"), applied
        assert run([archiver, "migrate"], outside, env).strip() == "schema is up to date"
        seed_orders(url, 2_000)
        run([archiver, "enqueue", "--table", "orders", "--before", "2024-12-31"], outside, env)
        run([archiver, "worker", "--burst"], outside, env)
        assert sql_value(url, "SELECT status FROM background_jobs") == "completed"
        moved = sql_value(url, "SELECT sum(row_count) FROM archive_files")
        assert moved > 0 and moved == 2_000 - sql_value(url, "SELECT count(*) FROM orders")
        assert sorted(p.name for p in store.rglob("*.parquet")) == sorted(
            Path(r["path"]).name for r in sql(url, "SELECT path FROM archive_files")
        )

        # the archive in the database's own SQL: serve from the venv, attach, the view
        port = free_port()
        env["ARCHIVER_SERVE_PASSWORD"] = "wheel-serve-password-0123456789"
        log = tmp_path / "serve.log"
        with open(log, "w") as out:
            serve = subprocess.Popen(
                [archiver, "serve", "--bind", f"127.0.0.1:{port}"], cwd=outside, env=env,
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while "listening on" not in log.read_text():
                assert serve.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            attach = [archiver, "attach", "--table", "orders", "--port", str(port)]
            run([*attach, "--sslmode", "disable"], outside, env)
            every = "SELECT count(*), count(DISTINCT id) FROM archive.orders_all"
            assert tuple(sql(url, every)[0]) == (2_000, 2_000)
            assert sql_value(url, "SELECT count(*) FROM archive.orders") == moved
        finally:
            serve.terminate()
            serve.wait(30)
        assert "Traceback" not in log.read_text(), log.read_text()

        # uv (the suite's own installer, make's) installs them in seconds; pip took ~20 s each
        uv = [str(Path(sys.executable).parent / "uv"), "pip", "install", "-q", "--python"]
        for beside, first in ((["numpy"], 2_001), (["pandas"], 4_001)):
            run([*uv, str(venv / "bin" / "python"), *beside], tmp_path)
            seed_orders(url, 2_000, first)
            services_work(archiver, env, outside, url, tmp_path / "-".join(beside))


def services_work(archiver: str, env: dict[str, str], cwd: Path, url: str, logs: Path) -> None:
    """A worker moves the rows enqueued (its ADBC binds parameters), serve answers a
    parameterized read of them and the console its health check, each from `archiver`."""
    logs.mkdir()
    # enqueue binds its parameters through ADBC, and the worker hands Arrow its values
    # and reads its timestamps back, importing no pandas for it, whatever the
    # environment holds (archiver.arrow_values)
    python = str(Path(archiver).parent / "python")
    ran = {}
    for args in (["enqueue", "--table", "orders", "--before", "2024-12-31"], ["worker", "--burst"]):
        done = subprocess.run([python, "-X", "importtime", "-m", "archiver", *args], cwd=cwd,
                              env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
        assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
        assert not re.search(r"\| +pandas$", done.stderr, re.M), f"{args[0]} imported pandas"
        ran[args[0]] = done
    status = "SELECT status FROM background_jobs WHERE id = $1::uuid"
    assert sql_value(url, status, ran["enqueue"].stdout.split()[-1]) == "completed"
    moved = sql_value(url, "SELECT sum(row_count) FROM archive_files")
    services = {
        "serve": [archiver, "serve", "--bind", f"127.0.0.1:{free_port()}"],
        "console": [archiver, "console", "--bind", f"127.0.0.1:{free_port()}"],
    }
    env = {**env, "ARCHIVER_CONSOLE_VIEWER_TOKEN": "wheel-viewer-token-0123456789"}
    started = {}
    for name, args in services.items():
        with open(logs / f"{name}.log", "w") as out:
            started[name] = subprocess.Popen(
                args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT
            )
    try:
        serve_port, console_port = (int(a[-1].rsplit(":", 1)[1]) for a in services.values())
        deadline = time.monotonic() + 60
        while "listening on" not in (logs / "serve.log").read_text():
            assert started["serve"].poll() is None, (logs / "serve.log").read_text()
            assert time.monotonic() < deadline, (logs / "serve.log").read_text()
            time.sleep(0.1)
        import psycopg

        dsn = f"host=127.0.0.1 port={serve_port} dbname=archive user=archiver sslmode=disable"
        password = env["ARCHIVER_SERVE_PASSWORD"]
        with psycopg.connect(dsn, password=password) as conn:
            got = conn.execute("SELECT count(*) FROM orders WHERE id > %s", (0,)).fetchone()
        assert got == (moved,)
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{console_port}/healthz") as r:
                    assert r.status == 200
                    break
            except OSError:
                assert started["console"].poll() is None, (logs / "console.log").read_text()
                assert time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        for proc in started.values():
            proc.terminate()
            proc.wait(30)
    for name in services:
        text = (logs / f"{name}.log").read_text()
        assert "Traceback" not in text, text
