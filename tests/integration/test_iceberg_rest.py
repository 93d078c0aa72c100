"""serve's Iceberg REST catalog (ARCHIVER_SERVE_ICEBERG_REST) as a team meets it through
pyiceberg's RestCatalog and plain HTTP (DuckDB's Basic sign-in): each person lists and
loads what the live table's grants let them read whole and reads its rows through the
read-only SAS vended with the load; everyone else is refused in one line; a REVOKE
refuses the next load, and every SAS vended before stops working (the stored access
policy it names is replaced); every token and load is in archive_reads."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest

from archiver.serve.rest import DOOR
from archiver.serve.revoking import REVOKED
from archiver.store import read_audit
from archiver.testing.reference import seed_orders
from archiver.testing.services import free_port
from tests.support import wait_for_text
from tests.support.access import MIRROR_WAIT, PASSWORD, Team, eventually, people
from tests.support.harness import Harness
from tests.support.serve import serving


def http(url: str, method: str = "GET", data: dict[str, str] | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any]:  # fmt: skip
    """(status, JSON body) of one request."""
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    request = urllib.request.Request(url, body, headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            raw = answer.read()
            return answer.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None


def token(uri: str, user: str, password: str = PASSWORD) -> tuple[int, Any]:
    """A token asked for as DuckDB's iceberg extension asks: HTTP Basic."""
    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    return http(f"{uri}/v1/oauth/tokens", "POST", {"grant_type": "client_credentials",
                "scope": "PRINCIPAL_ROLE:ALL"}, {"Authorization": f"Basic {basic}"})  # fmt: skip


def catalog(uri: str, user: str, password: str = PASSWORD) -> Any:
    from pyiceberg.catalog.rest import RestCatalog

    return RestCatalog("archive", **{"uri": uri, "credential": f"{user}:{password}",
                                     "oauth2-server-uri": f"{uri}/v1/oauth/tokens"})  # fmt: skip


def duck_tables(uri: str, user: str) -> list[tuple[str, str]]:
    """The tables DuckDB's iceberg extension finds in the catalog, signed in as `user`."""
    import duckdb

    from tests.support.iceberg import load_extensions

    con = duckdb.connect(
        config={"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}
    )
    try:
        load_extensions(con, "avro", "httpfs", "iceberg")
        con.execute(f"CREATE SECRET rest (TYPE iceberg, CLIENT_ID '{user}', CLIENT_SECRET "
                    f"'{PASSWORD}', OAUTH2_SERVER_URI '{uri}/v1/oauth/tokens')")  # fmt: skip
        con.execute(f"ATTACH 'archive' AS lake (TYPE iceberg, ENDPOINT '{uri}', SECRET rest)")
        return con.execute("SELECT schema_name, table_name FROM duckdb_tables() "
                           "WHERE database_name = 'lake' ORDER BY 1, 2").fetchall()  # fmt: skip
    finally:
        con.close()


def loads_orders(cat: Any) -> bool:
    from pyiceberg.exceptions import ForbiddenError

    try:
        return cat.load_table("public.orders") is not None
    except ForbiddenError:
        return False


def refused_within(cat: Any) -> str:
    """The one line a load of orders is refused with, within the mirror's pass."""
    from pyiceberg.exceptions import ForbiddenError

    started = time.monotonic()
    while True:
        try:
            cat.load_table("public.orders")
        except ForbiddenError as exc:
            return str(exc)
        assert time.monotonic() - started < MIRROR_WAIT, "not in force"
        time.sleep(0.2)


def void_within(container: Any, what: str) -> None:
    """A SAS vended earlier stops working (403) within the mirror's pass and a sweep."""
    from azure.core.exceptions import HttpResponseError

    def refused() -> bool:
        try:
            next(iter(container.list_blobs()))
        except HttpResponseError as exc:
            assert exc.status_code == 403, exc
            return True
        return False

    eventually(refused, what)


def vended_container(uri: str, who: str, container: str) -> tuple[Any, dict[str, list[str]]]:
    """A client of the archive's container by the SAS vended to `who` with a load, and
    the SAS's fields."""
    from azure.storage.blob import ContainerClient

    status, loaded = http(f"{uri}/v1/namespaces/public/tables/orders", headers={
        "Authorization": f"Bearer {token(uri, who)[1]['access_token']}",
        "X-Iceberg-Access-Delegation": "vended-credentials"})  # fmt: skip
    assert status == 200 and loaded["metadata"]["format-version"] in (1, 2)
    (vended,) = loaded["storage-credentials"]
    sas = next(v for k, v in vended["config"].items() if k.startswith("adls.sas-token."))
    endpoint = vended["config"]["adls.connection-string"].split(";")[0].split("=", 1)[1]
    client = ContainerClient.from_container_url(f"{endpoint}/{container}?{sas}")
    return client, urllib.parse.parse_qs(sas)


def test_each_person_loads_and_reads_what_the_live_grants_allow(h: Harness, team: Team) -> None:
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import ContainerClient
    from pyiceberg.exceptions import ForbiddenError, NoSuchTableError, OAuthError

    i = h.with_env(ARCHIVER_DELTA="true", ARCHIVER_ICEBERG="true")
    seed_orders(i.url, 3_000)
    i.archive("--table", "orders", "--before", "2024-12-31")
    archived = i.value("SELECT sum(row_count) FROM archive_files")
    them = people(team, "id, customer, status, created_at")
    analyst, support, outsider = them.analyst, them.support, them.outsider
    member, locked, expired = them.member, them.locked, them.expired
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    with serving(i, ARCHIVER_SERVE_ICEBERG_REST=f"127.0.0.1:{port}") as served:
        wait_for_text(served.log, "Iceberg REST catalog listening", timeout=30)
        # the table whole: listed, loaded, its rows read through the vended SAS
        for who in (analyst, member):
            cat = catalog(uri, who)
            assert cat.list_namespaces() == [("public",)]
            assert cat.list_tables("public") == [("public", "orders")]
            tbl = cat.load_table("public.orders")
            assert tbl.scan().to_arrow().num_rows == archived
        container, said = vended_container(uri, analyst, i.container)
        expiry = time.mktime(time.strptime(said["se"][0], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
        assert 0 < expiry - time.time() <= 3600 + 5, said["se"]
        # its permissions are those of the stored access policy it names: read and list
        owner = ContainerClient.from_connection_string(i.azurite.connection_string, i.container)
        policies = {
            p.id: p.access_policy.permission
            for p in owner.get_container_access_policy()["signed_identifiers"]
        }
        assert "sp" not in said and policies == {said["si"][0]: "rl"}, (said, policies)
        assert any(True for _ in container.list_blobs())
        with pytest.raises(HttpResponseError) as write:
            container.upload_blob("archive/public.orders/forged.parquet", b"x")
        assert write.value.status_code == 403
        members, _ = vended_container(uri, member, i.container)

        # the configured user loads every table
        configured = catalog(uri, served.user, served.password)
        assert configured.list_tables("public") == [("public", "orders")]
        assert configured.load_table("public.orders").scan().to_arrow().num_rows == archived

        # some columns, none: nothing listed, a load refused in one line
        for who, line in (
            (support, "permission denied for table orders: you may read some of its columns only"),
            (outsider, "permission denied for table orders"),
        ):
            cat = catalog(uri, who)
            assert cat.list_tables("public") == [] and cat.list_namespaces() == []
            with pytest.raises(ForbiddenError) as caught:
                cat.load_table("public.orders")
            one = str(caught.value)
            assert len(one.splitlines()) == 1, one
            assert one.startswith(f"ForbiddenException: {line}"), one
        with pytest.raises(NoSuchTableError):
            catalog(uri, analyst).load_table("public.no_such_table")

        # sign-in: a wrong secret the same whether the role exists or not
        wrong = token(uri, analyst, "not-the-password")
        ghost = token(uri, f"ghost_{team.tag}")
        assert wrong[0] == ghost[0] == 401 and wrong[1] == ghost[1], (wrong, ghost)
        assert token(uri, expired) == ghost
        assert (
            token(uri, locked)[1]["error_description"]
            == f'role "{locked}" is not permitted to log in'
        )
        with pytest.raises(OAuthError):
            catalog(uri, f"ghost_{team.tag}")
        # writes refused in one line; no token, no answer
        bearer = {"Authorization": f"Bearer {token(uri, analyst)[1]['access_token']}"}
        status, body = http(f"{uri}/v1/namespaces", "POST", {"namespace": "x"}, bearer)
        assert status == 403 and "written by archiver alone" in body["error"]["message"]
        assert http(f"{uri}/v1/namespaces")[0] == 401

        # DuckDB's iceberg extension signs in, attaches the catalog and lists what the
        # person may load (reading the files it cannot on Azurite: its Azure path builds
        # the account's public host from a SAS)
        for who, listed in ((analyst, [("public", "orders")]), (outsider, [])):
            assert duck_tables(uri, who) == listed

        # row security on the live table, then a REVOKE: each refuses the next load
        # within the mirror's pass, and voids every SAS vended before (the member's too:
        # they name one policy, replaced; the member loads again for a new one)
        cat = catalog(uri, analyst)
        i.sql("ALTER TABLE orders ENABLE ROW LEVEL SECURITY")
        assert "row security applies to you" in refused_within(cat)
        void_within(container, "the analyst's SAS void once row security applies to them")
        void_within(members, "every SAS vended before void")
        assert configured.load_table("public.orders") is not None  # serve's own user reads
        i.sql("ALTER TABLE orders DISABLE ROW LEVEL SECURITY")
        eventually(lambda: loads_orders(cat), "the analyst loads again")
        container, renewed = vended_container(uri, analyst, i.container)
        assert renewed["si"] != said["si"] and any(True for _ in container.list_blobs())
        i.sql(f"REVOKE SELECT ON orders FROM {analyst}")
        assert refused_within(cat).endswith("permission denied for table orders")
        void_within(container, "the analyst's SAS void after the REVOKE")
        members, _ = vended_container(uri, member, i.container)
        assert any(True for _ in members.list_blobs())  # the member's new one reads
        i.sql(f"ALTER ROLE {member} NOLOGIN")  # a leaver: their SAS void too
        void_within(members, "the member's SAS void once they may not sign in")
        i.sql(f"ALTER ROLE {member} LOGIN")
        members, _ = vended_container(uri, member, i.container)
        # CONNECT taken from them on the application's database (the definitions
        # database's follows it): void; given back, a new SAS
        database = i.value("SELECT current_database()")
        i.sql(f'REVOKE CONNECT ON DATABASE "{database}" FROM PUBLIC')
        void_within(members, "the member's SAS void once they lose CONNECT")
        i.sql(f'GRANT CONNECT ON DATABASE "{database}" TO {member}')
        eventually(lambda: token(uri, member)[0] == 200, "the member signs in again")
        members, _ = vended_container(uri, member, i.container)

        # a second table the member may not read: no SAS of the container for them
        i.sql("CREATE TABLE notes (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)")
        i.sql("INSERT INTO notes SELECT g, '2024-01-01' FROM generate_series(1, 10) g")
        i.archive("--table", "notes", "--before", "2024-12-31")
        void_within(members, "the member's SAS void: it would open a table they may not read")
        with pytest.raises(ForbiddenError) as caught:
            catalog(uri, member).load_table("public.orders")
        assert "no credentials vended" in str(caught.value), str(caught.value)

    audited = i.sql("SELECT role, statement, tables, outcome FROM archive_reads "
                    "WHERE door = 'iceberg-rest' ORDER BY at")  # fmt: skip
    outcomes = {(r["role"], r["outcome"]) for r in audited}
    assert {(analyst, "ok"), (support, "42501"), (outsider, "42501"), (analyst, "28P01"),
            (f"ghost_{team.tag}", "28P01"), (locked, "28000")} <= outcomes, outcomes  # fmt: skip
    loads = [r for r in audited if r["tables"] == ["public.orders"] and r["role"] == analyst]
    assert {r["outcome"] for r in loads} == {"ok", "42501"}
    revoked = [r["statement"] for r in audited if r["statement"].startswith("revoke vended")]
    assert len(revoked) == 5, revoked
    assert analyst in revoked[0] and "row security applies to you" in revoked[0], revoked
    assert revoked[1].endswith(f"{analyst}: permission denied for table orders"), revoked
    assert revoked[2].endswith(f"{member} may no longer sign in"), revoked
    assert revoked[3].endswith(f"{member} may no longer sign in"), revoked  # CONNECT
    assert revoked[4].endswith(f"{member}: permission denied for table notes"), revoked
    doctor = i.with_env(ARCHIVER_SERVE_ICEBERG_REST="127.0.0.1:8181").cli("doctor").stdout
    line = next(x for x in doctor.splitlines() if "iceberg REST" in x)
    assert "each SAS names archiver-read-6" in line, line  # the first, replaced five times
    # what a serve started again takes for the holders of a live SAS: those who loaded a
    # table since the last revocation (nobody, here: the member's last load was refused)
    with psycopg.connect(i.url, autocommit=True) as conn:
        assert read_audit.rest_holders(conn, DOOR, REVOKED, 3600) == []
        everyone = {role for role, _ in read_audit.rest_holders(conn, DOOR, "none such", 3600)}
        assert everyone == {analyst, member, served.user}, everyone
        assert read_audit.rest_holders(conn, DOOR, "none such", 0.001) == []


def test_the_rest_catalog_refuses_to_start_unsafe_and_doctor_says_what_a_sas_opens(
    h: Harness,
) -> None:
    """Beyond loopback without TLS, or without the archive's Iceberg tables: one line,
    exit 1, serve not started; doctor says what a vended SAS opens."""
    i = h.with_env(ARCHIVER_SERVE_PASSWORD="a-password-long-enough", ARCHIVER_DELTA="true")
    for env, said in (
        ({"ARCHIVER_ICEBERG": "true", "ARCHIVER_SERVE_ICEBERG_REST": "0.0.0.0:8181"},
         "serve: refusing to listen on 0.0.0.0, beyond this machine, without TLS"),
        ({"ARCHIVER_ICEBERG": "false", "ARCHIVER_SERVE_ICEBERG_REST": "127.0.0.1:8181"},
         "serve: the Iceberg REST catalog needs the archive's Iceberg tables"),
        ({"ARCHIVER_ICEBERG": "true", "ARCHIVER_SERVE_ICEBERG_REST": "localhost"},
         "--iceberg-rest (ARCHIVER_SERVE_ICEBERG_REST): expected HOST:PORT, got 'localhost'"),
    ):  # fmt: skip
        done = i.with_env(**env).cli("serve", "--bind", f"127.0.0.1:{free_port()}")
        assert done.returncode == 1, done
        assert len(done.stderr.splitlines()) == 1 and said in done.stderr, done.stderr
    doctor = i.with_env(ARCHIVER_ICEBERG="true", ARCHIVER_SERVE_ICEBERG_REST="127.0.0.1:8181")
    line = next(x for x in doctor.cli("doctor").stdout.splitlines() if "iceberg REST" in x)
    assert f"opens the whole container {i.container}" in line, line
    assert line.startswith("ok") and "will name archiver-read-1 (none made yet)" in line, line


def test_the_rest_catalog_speaks_tls_when_serve_does(h: Harness, tmp_path: Path) -> None:
    """With serve's certificate, the REST catalog answers HTTPS alone: a token and a
    listing over TLS, a plain HTTP request gets no answer."""
    import ssl
    import subprocess

    cert, key = tmp_path / "serve.crt", tmp_path / "serve.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    i = h.with_env(ARCHIVER_DELTA="true", ARCHIVER_ICEBERG="true")
    port = free_port()
    with serving(i, ARCHIVER_SERVE_ICEBERG_REST=f"127.0.0.1:{port}",
                 ARCHIVER_SERVE_TLS_CERT=str(cert), ARCHIVER_SERVE_TLS_KEY=str(key)) as served:  # fmt: skip
        wait_for_text(served.log, "Iceberg REST catalog listening", timeout=30)
        assert "(TLS required)" in served.log.read_text()
        trusted = ssl.create_default_context(cafile=str(cert))
        form = urllib.parse.urlencode({"grant_type": "client_credentials",
                                       "client_id": served.user,
                                       "client_secret": served.password}).encode()  # fmt: skip
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/v1/oauth/tokens", form,
                                    timeout=30, context=trusted) as answer:  # fmt: skip
            token = json.loads(answer.read())["access_token"]
        listing = urllib.request.Request(f"https://127.0.0.1:{port}/v1/namespaces",
                                         headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        with urllib.request.urlopen(listing, timeout=30, context=trusted) as answer:
            assert json.loads(answer.read()) == {"namespaces": []}
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/config", timeout=10)
