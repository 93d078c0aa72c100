"""Settings: each declared once; parsing, errors naming the key, file keys and the
table in docs/configuration.md all follow from the declaration."""

from __future__ import annotations

from pathlib import Path

import pytest

from archiver.config import FILE_KEYS, SPECS, ConfigFile, Settings, StorageLocation, markdown_table
from archiver.errors import ConfigError

URL = "postgresql://u:secret@db/app"
CONFIGURATION_PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_defaults_and_derived_heartbeat() -> None:
    s = Settings.from_env({"ARCHIVER_DATABASE_URL": URL})
    assert (s.poll_interval, s.lease_seconds, s.heartbeat_seconds) == (2.0, 60.0, 5.0)
    assert s.same_database and s.effective_source_url == URL
    short = Settings.from_env({"DATABASE_URL": URL, "ARCHIVER_LEASE_SECONDS": "8"})
    assert short.heartbeat_seconds == 2.0 and short.database_url == URL


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("ARCHIVER_POLL_INTERVAL", "soon", "ARCHIVER_POLL_INTERVAL: expected a float, got 'soon'"),
        ("ARCHIVER_UPLOAD_CONCURRENCY", "0", "ARCHIVER_UPLOAD_CONCURRENCY: must be at least 1"),
        ("ARCHIVER_LOG_FORMAT", "xml", "ARCHIVER_LOG_FORMAT: expected one of text, json"),
        ("ARCHIVER_SOURCE_URL", "mysql://x", "ARCHIVER_SOURCE_URL: expected a postgresql://"),
    ],
)
def test_a_bad_value_names_its_variable(variable: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        Settings.from_env({"ARCHIVER_DATABASE_URL": URL, variable: value})
    assert str(error.value).startswith(message)


def test_iceberg_needs_the_delta_table_it_mirrors() -> None:
    with pytest.raises(ConfigError, match="ARCHIVER_ICEBERG=true needs ARCHIVER_DELTA=true"):
        Settings.from_env(
            {"ARCHIVER_DATABASE_URL": URL, "ARCHIVER_ICEBERG": "true", "ARCHIVER_DELTA": "false"}
        )
    on = Settings.from_env({"ARCHIVER_DATABASE_URL": URL, "ARCHIVER_ICEBERG": "true"})
    assert on.iceberg and on.iceberg_catalog == "archive"
    with pytest.raises(ConfigError, match="ARCHIVER_ICEBERG_CATALOG: expected a name"):
        Settings.from_env({"ARCHIVER_DATABASE_URL": URL, "ARCHIVER_ICEBERG_CATALOG": "a b"})


def test_missing_database_and_secret_free_errors() -> None:
    with pytest.raises(ConfigError, match="ARCHIVER_DATABASE_URL"):
        Settings.from_env({})
    with pytest.raises(ConfigError) as error:
        Settings.from_env({"ARCHIVER_DATABASE_URL": "mysql://u:secret@h/db"})
    assert "secret" not in str(error.value)


def test_file_keys_come_from_the_variables(tmp_path: Path) -> None:
    assert FILE_KEYS["poll_interval"] == "ARCHIVER_POLL_INTERVAL"
    assert FILE_KEYS["azure_storage_account_url"] == "AZURE_STORAGE_ACCOUNT_URL"
    assert "failpoints" not in FILE_KEYS  # a testing knob: environment only
    path = tmp_path / "a.toml"
    path.write_text(f'[settings]\ndatabase_url = "{URL}"\nlease_seconds = 0.5\n')
    with pytest.raises(ConfigError, match=r"\[settings\] lease_seconds: must be at least 1.0"):
        ConfigFile.read(str(path)).settings_over({})
    path.write_text("[settings]\nlease_secs = 5\n")
    with pytest.raises(ConfigError, match="unknown key 'lease_secs'"):
        ConfigFile.read(str(path))


def test_environment_beats_the_file(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text(f'[settings]\ndatabase_url = "{URL}"\npoll_interval = 9\n')
    s = ConfigFile.read(str(path)).settings_over({"ARCHIVER_POLL_INTERVAL": "3"})
    assert s.poll_interval == 3.0


def test_docs_table_is_the_declarations() -> None:
    assert markdown_table() in CONFIGURATION_PAGE.read_text(), (
        "regenerate with archiver.config.markdown_table()"
    )
    assert len(SPECS) == len(Settings.__dataclass_fields__)


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        ("az://archive/orders/2024", ("az", "archive", "orders/2024")),
        ("file:///var/archive/", ("file", "/var/archive", "")),
    ],
)
def test_storage_locations(url: str, parsed: tuple[str, str, str]) -> None:
    location = StorageLocation.parse(url)
    assert (location.scheme, location.container, location.prefix) == parsed


@pytest.mark.parametrize("url", ["az://Bad_Name/x", "file://host/dir", "s3://b/k"])
def test_bad_storage_locations(url: str) -> None:
    with pytest.raises(ConfigError, match="ARCHIVER_STORAGE_URL"):
        StorageLocation.parse(url)
