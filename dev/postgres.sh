#!/usr/bin/env bash
# Print the URL of a PostgreSQL superuser connection the tests and the demo can use.
# Uses $ARCHIVER_TEST_ADMIN_URL, or 127.0.0.1:5432 when it answers; otherwise starts a
# private cluster (initdb/pg_ctl) under .cache/pg on port 55432, installing the server
# from Debian's packages first if this is a root shell without one.
set -euo pipefail
cd "$(dirname "$0")/.."

url=${ARCHIVER_TEST_ADMIN_URL:-postgresql://postgres@127.0.0.1:5432/postgres}
port=55432
private_url="postgresql://postgres@127.0.0.1:${port}/postgres"

find_bin() {
  command -v "$1" 2>/dev/null && return
  ls -d /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -n 1
}

answers() { "$(find_bin pg_isready)" -q -d "$1" -t 3 >/dev/null 2>&1; }

if [ -n "$(find_bin pg_isready)" ] && answers "$url"; then echo "$url"; exit 0; fi
if [ -n "$(find_bin pg_isready)" ] && answers "$private_url"; then echo "$private_url"; exit 0; fi

if [ -z "$(find_bin initdb)" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "dev/postgres.sh: no PostgreSQL answers at $url; installing the server (apt-get)" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  else
    echo "dev/postgres.sh: no PostgreSQL at $url and no initdb to start one: install PostgreSQL 13+ server binaries or set ARCHIVER_TEST_ADMIN_URL" >&2
    exit 1
  fi
fi

data=$PWD/.cache/pg/data
as_owner=()
if [ "$(id -u)" = 0 ]; then  # PostgreSQL refuses to run as root
  id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
  as_owner=(runuser -u postgres --)
fi
mkdir -p "$data"
[ "$(id -u)" = 0 ] && chown -R postgres "$PWD/.cache/pg"
if [ ! -f "$data/PG_VERSION" ]; then
  "${as_owner[@]}" "$(find_bin initdb)" -D "$data" -U postgres --auth=trust -E UTF8 >/dev/null
fi
"${as_owner[@]}" "$(find_bin pg_ctl)" -D "$data" -l "$data/../server.log" -w \
  -o "-p $port -c listen_addresses=127.0.0.1 -k /tmp -c max_connections=200" start >&2
echo "$private_url"
