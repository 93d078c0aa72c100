#!/usr/bin/env bash
# The main job end to end, on this machine: a database with 200,000 orders, Azurite, the
# system under the repository's supervisor.conf (the scheduler and two workers), an archive
# of everything older than 2024-10-01, then the job's status and the blobs written. Run it
# through `make demo` (which installs everything).
set -euo pipefail
cd "$(dirname "$0")/.."
admin=${ARCHIVER_TEST_ADMIN_URL:?run through make demo}
py=.venv/bin/python
db=archiver_demo
work=$PWD/.cache/demo
rm -rf "$work" && mkdir -p "$work"

port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dev/node_modules/.bin/azurite-blob --blobHost 127.0.0.1 --blobPort "$port" --location "$work/azurite" \
  --skipApiVersionCheck --disableTelemetry --silent --loose &
azurite=$!
ctl() { .venv/bin/supervisorctl -c supervisor.conf "$@"; }
trap 'ctl shutdown >/dev/null 2>&1 || true; kill $azurite 2>/dev/null || true' EXIT
for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done

$py - "$admin" "$db" <<'PY'
import asyncio, sys, asyncpg
async def main(admin, db):
    conn = await asyncpg.connect(admin)
    await conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    await conn.execute(f'CREATE DATABASE "{db}"')
    await conn.close()
asyncio.run(main(*sys.argv[1:]))
PY
export ARCHIVER_DATABASE_URL=${admin%/*}/$db
export ARCHIVER_STORAGE_URL=az://archive/demo
export AZURE_STORAGE_CONNECTION_STRING="DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;BlobEndpoint=http://127.0.0.1:$port/devstoreaccount1;"
archiver() { .venv/bin/archiver "$@"; }

echo "== archiver migrate"; archiver migrate
echo "== seeding 200,000 orders"; $py -m archiver.testing.reference "$ARCHIVER_DATABASE_URL" 200000

# A nightly policy (its slot never falls inside the demo), so the scheduler has work to plan.
cat > "$work/archiver.toml" <<'TOML'
[settings]
scheduler_grace = 60

[[policy]]
name = "orders-nightly"
table = "public.orders"
column = "created_at"
older_than = "1000 days"
schedule = "0 2 * * *"
mode = "move"
TOML
export ARCHIVER_CONFIG=$work/archiver.toml
echo "== archiver policies"; archiver policies

# supervisor.conf's variables: the defaults, then this demo's directories and a short stop.
set -a; . deploy/supervisor.env; set +a
export ARCHIVER_RUN_DIR=$work/run ARCHIVER_LOG_DIR=$work/log ARCHIVER_WORKERS=2 \
  ARCHIVER_STARTSECS=1 ARCHIVER_SHUTDOWN_DEADLINE=10 ARCHIVER_STOPWAITSECS=20
# the web console too, read-only and open to read (a demo on loopback: production gives
# readers a credential, docs/deployment.md), on a free loopback port (supervisorctl
# status exits 3 while any program of supervisor.conf is not running)
export ARCHIVER_CONSOLE_AUTOSTART=true ARCHIVER_CONSOLE_PUBLIC_READ=true \
  ARCHIVER_CONSOLE_BIND=127.0.0.1:$($py -c 'from archiver.testing.services import free_port; print(free_port())')
# and archiver serve, the archive as a read-only PostgreSQL server on loopback
serve_port=$($py -c 'from archiver.testing.services import free_port; print(free_port())')
export ARCHIVER_SERVE_AUTOSTART=true ARCHIVER_SERVE_BIND=127.0.0.1:$serve_port \
  ARCHIVER_SERVE_PASSWORD=$($py -c 'import secrets; print(secrets.token_hex(16))')
mkdir -p "$ARCHIVER_RUN_DIR" "$ARCHIVER_LOG_DIR"
echo "== supervisord -c supervisor.conf (scheduler + $ARCHIVER_WORKERS workers + console + serve; logs in $ARCHIVER_LOG_DIR)"
.venv/bin/supervisord -c supervisor.conf
for _ in $(seq 150); do
  [ "$(ctl status 2>/dev/null | grep -c ' RUNNING ')" = $((ARCHIVER_WORKERS + 3)) ] && break; sleep 0.2
done
ctl status
echo "== the console: http://$ARCHIVER_CONSOLE_BIND (while the demo runs)"

echo "== archiver enqueue --table orders --before 2024-10-01 --chunk-rows 20000"
job=$(archiver enqueue --table orders --before 2024-10-01 --chunk-rows 20000)
echo "$job"
echo "== waiting for job $job"
$py - "$job" <<'PY'
import asyncio, os, sys, asyncpg
async def main(job):
    c = await asyncpg.connect(os.environ["ARCHIVER_DATABASE_URL"])
    while (s := await c.fetchval("SELECT status FROM background_jobs WHERE id = $1::uuid", job)) in ("queued", "running"):
        await asyncio.sleep(0.5)
    print("job", s)
    await c.close()
asyncio.run(main(sys.argv[1]))
PY
echo "== archiver attach --table orders: every order, live or archived, in the database's own SQL"
archiver attach --table orders --port "$serve_port" --sslmode disable
$py - <<'PY'
import asyncio, os, asyncpg
async def main():
    c = await asyncpg.connect(os.environ["ARCHIVER_DATABASE_URL"])
    for row in await c.fetch("SELECT _archiver_source, count(*) FROM archive.orders_all GROUP BY 1 ORDER BY 1"):
        print(f"  archive.orders_all: {row[1]:>7} {row[0]}")
    print("  order 150000, archived:", dict(await c.fetchrow("SELECT id, created_at, total, _archiver_source FROM archive.orders_all WHERE id = 150000")))
    await c.close()
asyncio.run(main())
PY
echo "== psql straight to archiver serve: the archive's tables in PostgreSQL's catalogs"
PGPASSWORD=$ARCHIVER_SERVE_PASSWORD psql -X "host=127.0.0.1 port=$serve_port user=archiver dbname=archive sslmode=disable" \
  -c '\dt' -c '\d orders' -c 'SELECT status, count(*) FROM orders GROUP BY 1 ORDER BY 1'
echo "== supervisorctl stop all"; ctl stop all
ctl shutdown
echo "== archiver status"; archiver status
echo "== archiver publish --table orders (workers publish after each job; this catches up)"
archiver publish --table orders
echo "== archiver query: the archive as a Delta table, read in place"
archiver query "SELECT count(*) AS rows, min(created_at) AS oldest, max(created_at) AS newest FROM orders"
echo "== blobs written"
$py - <<'PY'
import os
from azure.storage.blob import BlobServiceClient
c = BlobServiceClient.from_connection_string(os.environ["AZURE_STORAGE_CONNECTION_STRING"]).get_container_client("archive")
for b in c.list_blobs():
    print(f"{b.size:>10}  {b.name}")
PY
echo "== rows left older than the cutoff (SQL)"
$py - <<'PY'
import asyncio, os, asyncpg
async def main():
    c = await asyncpg.connect(os.environ["ARCHIVER_DATABASE_URL"])
    print(await c.fetchval("SELECT count(*) FROM orders WHERE created_at < '2024-10-01'"), "old rows left,",
          await c.fetchval("SELECT count(*) FROM orders"), "rows kept,",
          await c.fetchval("SELECT sum(row_count) FROM archive_files"), "rows archived")
    await c.close()
asyncio.run(main())
PY
