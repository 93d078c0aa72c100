"""Governed access as the tests meet it: a team of roles made for a test (roles are the
cluster's, shared by the tests running beside it), and a person's connection to serve,
a refusal, a wait for the mirror."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from archiver.testing.services import with_database
from tests.support import sql
from tests.support.harness import Harness
from tests.support.serve import Served, definitions_database

ROWS = 3_000
JDBC = Path("/usr/share/java/postgresql.jar")  # Debian's libpostgresql-jdbc-java
PASSWORD = "a-persons-own-password-0123"
MIRROR_WAIT = 10.0  # a GRANT or REVOKE is in force within this


class Team:
    """Roles of a team, named for the test (roles are the cluster's, shared by tests)."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.tag = uuid.uuid4().hex[:8]
        self.made: list[str] = []

    def name(self, who: str) -> str:
        return f"{who}_{self.tag}"

    def role(self, who: str, *options: str) -> str:
        name = self.name(who)
        self.h.sql(f"CREATE ROLE {name} {' '.join(options)}")
        self.made.append(name)
        return name

    def drop(self) -> None:
        """The roles gone, and what they were granted here and in serve's definitions
        database (its grants mirrored from the live table's)."""
        places = [self.h.url]
        if self.h.value(
            "SELECT 1 FROM pg_database WHERE datname = $1", definitions_database(self.h)
        ):
            places.append(with_database(self.h.url, definitions_database(self.h)))
        for name in reversed(self.made):
            for url in places:
                sql(url, f"DROP OWNED BY {name}")
            self.h.sql(f"DROP ROLE {name}")


@dataclass(frozen=True)
class People:
    """A team as the access tests meet it: a role granted orders, one granted some of its
    columns, one granted nothing, a group granted orders and a member of it, a NOLOGIN
    role and one whose password expired; all but the group sign in with PASSWORD."""

    analyst: str
    support: str
    outsider: str
    readers: str
    member: str
    locked: str
    expired: str


def people(team: Team, columns: str) -> People:
    """The team's roles made and granted on orders (`support`: those `columns`)."""
    login = f"LOGIN PASSWORD '{PASSWORD}'"
    readers = team.role("readers")  # NOLOGIN: a group
    made = People(
        analyst=team.role("analyst", login),
        support=team.role("support", login),
        outsider=team.role("outsider", login),
        readers=readers,
        member=team.role("member", login, "IN ROLE", readers),
        locked=team.role("locked", "NOLOGIN", f"PASSWORD '{PASSWORD}'"),
        expired=team.role("expired", login, "VALID UNTIL '2020-01-01'"),
    )
    team.h.sql(f"GRANT SELECT ON orders TO {made.analyst}, {readers}")
    team.h.sql(f"GRANT SELECT ({columns}) ON orders TO {made.support}")
    return made


def connect(served: Served, user: str, password: str = PASSWORD) -> psycopg.Connection[Any]:
    return psycopg.connect(served.dsn(user=user, password=password), autocommit=True)


def refused(conn: psycopg.Connection[Any], query: str, *params: Any) -> str:
    """The 42501 a statement gets: PostgreSQL's message; the connection still serves."""
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as caught:
        conn.execute(query, params or None)
    assert conn.execute("SELECT 1").fetchone() == (1,)
    return str(caught.value).splitlines()[0]


def sign_in_error(served: Served, user: str, password: str = PASSWORD) -> str:
    with pytest.raises(psycopg.OperationalError) as caught:
        connect(served, user, password).close()
    return str(caught.value).strip().splitlines()[-1].split("FATAL:  ", 1)[-1]


def eventually(check: Callable[[], bool], what: str) -> float:
    """Seconds until `check` holds; fails after MIRROR_WAIT."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < MIRROR_WAIT, what
        time.sleep(0.2)
    return time.monotonic() - start


def allowed(conn: psycopg.Connection[Any], query: str) -> bool:
    try:
        conn.execute(query)
        return True
    except psycopg.errors.InsufficientPrivilege:
        return False
