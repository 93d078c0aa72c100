"""Where serve keeps the archived tables' definitions and who reads them: a database of
its own on the catalog's server, owned by a login role that owns nothing else and is
granted nothing else (ARCHIVER_SERVE_DEFINITIONS_DATABASE and _ROLE, by default
`<queue database>_archive` both). archiver's role makes them where they are missing
(CREATE ROLE, CREATE DATABASE); where it may not, one line says what an administrator
runs. Serve sets the role's password at each start (a SCRAM verifier: the password never
reaches the server's statement log) unless ARCHIVER_SERVE_DEFINITIONS_PASSWORD gives it."""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from archiver.config import Settings
from archiver.errors import ConfigError, DatabaseUnavailable, first_line, redact
from archiver.serve.scram import Verifier

_NAME_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1


@dataclass(frozen=True)
class Place:
    """Where the definitions live and who reads them."""

    admin: str  # the queue database's URL (archiver's own role)
    database: str
    role: str
    password: str
    given: bool  # the password is the operator's (ARCHIVER_SERVE_DEFINITIONS_PASSWORD)

    @classmethod
    def of(cls, settings: Settings) -> Place:
        base = conninfo_to_dict(settings.database_url).get("dbname") or "postgres"
        default = f"{base}_archive".encode()[:_NAME_BYTES].decode(errors="ignore")
        given = settings.serve_definitions_password
        return cls(
            settings.database_url,
            settings.serve_definitions_database or default,
            settings.serve_definitions_role or default,
            given or secrets.token_urlsafe(24),
            given is not None,
        )

    def conninfo(self) -> str:
        """How the reader connects: the catalog's server, the definitions database."""
        options = conninfo_to_dict(self.admin)
        options.update(
            dbname=self.database,
            user=self.role,
            password=self.password,
            application_name="archiver serve",
        )
        options.pop("options", None)
        return make_conninfo("", **{k: str(v) for k, v in options.items() if v is not None})


def make(place: Place) -> None:
    """The reader role and the definitions database, made by archiver's role where they
    are missing (the role's password set where serve chose it); one line naming what an
    administrator runs where archiver's role may not."""
    role, database = sql.Identifier(place.role), sql.Identifier(place.database)
    steps = (
        f"CREATE ROLE {place.role} LOGIN PASSWORD '…'; "
        f"CREATE DATABASE {place.database} OWNER {place.role}; "
        f"then set ARCHIVER_SERVE_DEFINITIONS_PASSWORD"
    )
    try:
        with psycopg.connect(place.admin, autocommit=True) as conn:
            found = conn.execute(
                "SELECT rolsuper OR rolcreaterole OR rolcreatedb OR rolbypassrls OR rolreplication "
                "FROM pg_roles WHERE rolname = %s",
                [place.role],
            ).fetchone()
            if found is not None and found[0]:
                raise ConfigError(
                    f"serve: role {place.role} may do more than read its own database "
                    "(superuser, CREATEROLE, CREATEDB, BYPASSRLS or REPLICATION): name another "
                    "in ARCHIVER_SERVE_DEFINITIONS_ROLE"
                )
            if found is None:
                with contextlib.suppress(psycopg.errors.DuplicateObject):  # another serve's
                    conn.execute(
                        sql.SQL(
                            "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE "
                            "NOREPLICATION NOBYPASSRLS"
                        ).format(role)
                    )
            if not place.given:
                secret = Verifier.of(place.password).postgres_secret()
                conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(role, sql.Literal(secret)))
            if conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [place.database]
            ).fetchone():
                return
            member = conn.execute("SELECT pg_has_role(%s, 'USAGE')", [place.role]).fetchone()
            if not (member and member[0]):  # CREATE DATABASE … OWNER needs it
                conn.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(role))
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(
                    sql.SQL(
                        "CREATE DATABASE {} OWNER {} TEMPLATE template0 ENCODING 'UTF8'"
                    ).format(database, role)
                )
            conn.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(database))
    except psycopg.errors.InsufficientPrivilege as exc:
        raise ConfigError(
            f"serve: cannot make the definitions database ({first_line(exc)}): as an "
            f"administrator, run {steps}"
        ) from None
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(
            f"serve: cannot reach {redact(place.admin)}: {first_line(exc)}"
        ) from None
