"""How an error becomes one line: a PostgreSQL error raised in a server function (a
trigger's) says which."""

from __future__ import annotations

from typing import ClassVar

from archiver.errors import error_line


class AdbcLike(Exception):
    details = ((b"PG_DIAG_SQLSTATE", b"42501"),)


class AsyncpgLike(Exception):
    context = 'SQL statement "INSERT INTO log VALUES (1)"\nPL/pgSQL function log_it() line 3 at SQL statement'


class DetailsOnly(Exception):
    details = ((b"PG_DIAG_CONTEXT", b'SQL function "f" statement 1'),)


def test_error_line_names_the_function_an_error_was_raised_in() -> None:
    adbc = AdbcLike(
        "UNAUTHORIZED: [libpq] ERROR:  permission denied for table log\n"
        'CONTEXT:  SQL statement "INSERT INTO log VALUES (1)"\n'
        "PL/pgSQL function inner() line 2 at SQL statement\n"
        "PL/pgSQL function outer() line 1 at PERFORM\n. SQLSTATE: 42501"
    )
    assert error_line(adbc) == (
        "AdbcLike: UNAUTHORIZED: [libpq] ERROR:  permission denied for table log "
        "(raised in PL/pgSQL function outer() line 1 at PERFORM)"
    )
    same_line = AdbcLike("ERROR:  boom\nCONTEXT:  PL/pgSQL function t() line 1 at RAISE")
    assert (
        error_line(same_line)
        == "AdbcLike: ERROR:  boom (raised in PL/pgSQL function t() line 1 at RAISE)"
    )
    assert error_line(AsyncpgLike("permission denied for table log")).endswith(
        "(raised in PL/pgSQL function log_it() line 3 at SQL statement)"
    )
    assert (
        error_line(DetailsOnly("boom"))
        == 'DetailsOnly: boom (raised in SQL function "f" statement 1)'
    )
    plain = AdbcLike('ERROR:  relation "x" does not exist\n. SQLSTATE: 42P01')
    assert error_line(plain) == 'AdbcLike: ERROR:  relation "x" does not exist'
    assert error_line(ValueError()) == "ValueError"


class OtherDetails(Exception):
    details: ClassVar[dict[str, str]] = {"code": "BlobNotFound"}  # another library's kind


class WeirdDetails(Exception):
    details = 3


def test_other_libraries_details_are_left_alone() -> None:
    assert error_line(OtherDetails("not found")) == "OtherDetails: not found"
    assert error_line(WeirdDetails("odd")) == "WeirdDetails: odd"
