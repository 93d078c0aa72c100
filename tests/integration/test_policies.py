"""The config file: `archiver policies` lists valid policies and refuses every bad one with
one line naming the policy and the key; settings come from the file, the environment wins."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from archiver.testing.reference import seed_orders
from tests.support import assert_refused, run_cli, sql_value

GOOD = """
[[policy]]
name = "orders-yearly"
table = "public.orders"
column = "created_at"
older_than = "365 days"
schedule = "0 2 * * *"
mode = "move"
"""


@pytest.fixture
def orders(database_url: str) -> str:
    seed_orders(database_url, 10)
    return database_url


def policies(env: dict[str, str], tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "archiver.toml"
    config.write_text(text)
    return run_cli(env, "--config", str(config), "policies")


def test_lists_policies_with_next_fire_times(
    env: dict[str, str], orders: str, tmp_path: Path
) -> None:
    text = GOOD + GOOD.replace("orders-yearly", "paris").replace(
        'mode = "move"', 'mode = "copy"\ntimezone = "Europe/Paris"'
    )
    (tmp_path / "archiver.toml").write_text(text)
    result = run_cli({**env, "ARCHIVER_CONFIG": str(tmp_path / "archiver.toml")}, "policies")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("orders-yearly: move public.orders.created_at older than 365 days")
    assert lines[1].startswith("  next ") and "T02:00:00+00:00  cutoff " in lines[1]
    assert "T00:00:00+00:00" in lines[1].split("cutoff")[1]
    assert len([line for line in lines if line.startswith("  next ")]) == 6
    assert any("T02:00:00+01:00" in line for line in lines[4:])  # Paris in winter


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        (('"0 2 * * *"', '"61 2 * * *"'), ["policy 'orders-yearly': schedule:", "61"]),
        (('"0 2 * * *"', '"0 2 * *"'), ["policy 'orders-yearly': schedule:", "5 cron fields"]),
        (('"0 2 * * *"', '"0 2 * * 1-5"'), ["policy 'orders-yearly': schedule:", "weekday"]),
        (
            ('"public.orders"', '"nosuch"'),
            ["policy 'orders-yearly': table:", "table nosuch not found"],
        ),
        (
            ('"created_at"', '"nosuch"'),
            ["policy 'orders-yearly': column:", "column nosuch not found"],
        ),
        (('"created_at"', '"note"'), ["policy 'orders-yearly': column:", "not a date"]),
        (
            ('mode = "move"', 'mode = "move"\ncolour = "red"'),
            ["'orders-yearly': colour: unknown key"],
        ),
        (('"365 days"', '"a year"'), ["policy 'orders-yearly': older_than:", "'a year'"]),
        (('mode = "move"', 'mode = "shred"'), ["policy 'orders-yearly': mode:"]),
        (('mode = "move"', 'timezone = "Mars/Base"'), ["policy 'orders-yearly': timezone:"]),
        (('schedule = "0 2 * * *"\n', ""), ["policy 'orders-yearly': schedule: missing"]),
        (('name = "orders-yearly"\n', ""), ["policy #1: name: missing"]),
    ],
)
def test_refuses_bad_policy(
    env: dict[str, str], orders: str, tmp_path: Path, change: tuple[str, str], needles: list[str]
) -> None:
    assert change[0] in GOOD
    assert_refused(policies(env, tmp_path, GOOD.replace(*change, 1)), *needles)
    assert sql_value(orders, "SELECT count(*) FROM background_jobs") == 0


def test_refuses_duplicate_name(env: dict[str, str], orders: str, tmp_path: Path) -> None:
    result = policies(env, tmp_path, GOOD + GOOD)
    assert_refused(result, "policy 'orders-yearly': name: duplicate")


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ("[settings]\npoll_intervall = 1\n" + GOOD, ["unknown key 'poll_intervall'"]),
        (
            "[settings]\nupload_concurrency = 'lots'\n" + GOOD,
            ["[settings] upload_concurrency", "'lots'"],
        ),
        ("[sched]\n" + GOOD, ["unknown key 'sched'"]),
        ("[[policy]\n", ["invalid TOML"]),
        ("", ["no [[policy]]"]),
    ],
)
def test_refuses_bad_file(
    env: dict[str, str], orders: str, tmp_path: Path, text: str, needles: list[str]
) -> None:
    assert_refused(policies(env, tmp_path, text), *needles)


def test_environment_overrides_the_file(env: dict[str, str], orders: str, tmp_path: Path) -> None:
    text = "[settings]\nlog_format = 'xml'\ndatabase_url = 'postgresql://nobody@127.0.0.1:1/x'\n"
    assert policies({**env, "ARCHIVER_LOG_FORMAT": "json"}, tmp_path, text + GOOD).returncode == 0
    without_env = {k: v for k, v in env.items() if k != "ARCHIVER_DATABASE_URL"}
    result = policies({**without_env, "ARCHIVER_LOG_FORMAT": "json"}, tmp_path, text + GOOD)
    assert_refused(result, "cannot connect to PostgreSQL", "127.0.0.1:1")
    assert_refused(policies(env, tmp_path, text + GOOD), "[settings] log_format", "'xml'")


def test_missing_config_file(env: dict[str, str], orders: str, tmp_path: Path) -> None:
    assert_refused(run_cli(env, "policies"), "no config file", "ARCHIVER_CONFIG")
    result = run_cli(env, "--config", str(tmp_path / "nope.toml"), "scheduler")
    assert_refused(result, "nope.toml")


def test_scheduler_refuses_a_grace_longer_than_the_retention(
    env: dict[str, str], orders: str, tmp_path: Path
) -> None:
    """A slot whose finished job was pruned must lie beyond the grace, or it could come back."""
    config = tmp_path / "archiver.toml"
    config.write_text("[settings]\nscheduler_grace = 7200\nretention_days = 0.05\n" + GOOD)
    result = run_cli(env, "--config", str(config), "scheduler", timeout=60)
    assert_refused(
        result, "ARCHIVER_SCHEDULER_GRACE (7200s)", "ARCHIVER_RETENTION_DAYS (0.05 days)"
    )
    assert sql_value(orders, "SELECT count(*) FROM background_jobs") == 0


def test_config_before_or_after_the_subcommand(
    env: dict[str, str], orders: str, tmp_path: Path
) -> None:
    config = tmp_path / "archiver.toml"
    config.write_text(GOOD)
    before = run_cli(env, "--config", str(config), "policies", "--count", "1")
    after = run_cli(env, "policies", "--count", "1", "--config", str(config))
    verbose_after = run_cli(env, "--config", str(config), "policies", "-v")
    assert before.returncode == after.returncode == verbose_after.returncode == 0, after.stderr
    assert before.stdout == after.stdout and before.stdout.startswith("orders-yearly: move")
    missing = run_cli(env, "policies", "--config", str(tmp_path / "nope.toml"))
    assert missing.returncode == 1 and "nope.toml" in missing.stderr
