#!/usr/bin/env bash
# Start a throwaway PostgreSQL for the tests and print its URL; idempotent.
# `postgres.sh status` prints up or down (changes nothing); `postgres.sh stop` stops the
# server at THRESHER_PG_DATA (scripts/test.sh does, at its end, when it started it).
#
# Installs Debian's `postgresql` package when no initdb is found, creates a cluster under
# /tmp (as the `postgres` OS user when run as root: initdb refuses root), listens on
# 127.0.0.1 only at a fixed port with trust auth, and creates the role `thresher` and the
# database `thresher_test`. If the server already answers, it only makes sure of the role
# and database and prints the URL. Settings: THRESHER_PG_PORT, THRESHER_PG_DATA.
set -euo pipefail

PORT="${THRESHER_PG_PORT:-54329}"
DATA="${THRESHER_PG_DATA:-/tmp/thresher-postgres/data}"
ROLE=thresher
DB=thresher_test

pg_bin() {
  # The newest installed server's bin folder (Debian keeps them under /usr/lib/postgresql).
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$dir" ] && [ -x "$dir/initdb" ]; then
    echo "$dir"
  elif command -v initdb >/dev/null; then
    dirname "$(command -v initdb)"
  fi
}

as_owner() {
  # Run a server command as the cluster's owner: `postgres` when we are root.
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

MODE="${1:-start}"
BIN=$(pg_bin)
case "$MODE" in
  status)
    if [ -n "$BIN" ] && "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then echo up; else echo down; fi
    exit 0
    ;;
  stop)
    if [ -n "$BIN" ] && [ -s "$DATA/PG_VERSION" ]; then
      echo "postgres.sh: stopping the server at $DATA (its files stay, for the next run)" >&2
      as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null || true
    fi
    exit 0
    ;;
  start) ;;
  *) echo "postgres.sh: unknown mode $MODE (start, status, stop)" >&2; exit 2 ;;
esac

if [ -z "$BIN" ]; then
  echo "postgres.sh: installing Debian's postgresql package (a system change, left" \
    "installed; only what is missing: no installed package is upgraded)" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-upgrade \
    --no-install-recommends postgresql >&2
  BIN=$(pg_bin)
  [ -n "$BIN" ] || { echo "postgres.sh: initdb still missing after install" >&2; exit 1; }
fi

ready() { "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; }

if ! ready; then
  BASE=$(dirname "$DATA")
  mkdir -p "$BASE"
  [ "$(id -u)" -ne 0 ] || chown postgres: "$BASE"
  if [ ! -s "$DATA/PG_VERSION" ]; then
    as_owner "$BIN/initdb" -D "$DATA" -U postgres --auth-local=trust --auth-host=trust \
      --encoding=UTF8 --locale=C.UTF-8 >"$BASE/initdb.log" 2>&1 \
      || { cat "$BASE/initdb.log" >&2; exit 1; }
    # Only trusted on the loopback address: nothing else can reach this server.
    cat >>"$DATA/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$DATA'
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
  fi
  echo "postgres.sh: starting a server on 127.0.0.1:$PORT, data in $DATA" >&2
  as_owner "$BIN/pg_ctl" -D "$DATA" -l "$BASE/server.log" -w -t 60 start >/dev/null \
    || { cat "$BASE/server.log" >&2; exit 1; }
  for _ in $(seq 1 60); do
    ready && break
    sleep 0.5
  done
  ready || { echo "postgres.sh: server did not answer on 127.0.0.1:$PORT" >&2; exit 1; }
fi

psql_admin() {
  "$BIN/psql" -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres -d postgres "$@"
}
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_roles WHERE rolname = '$ROLE'")" != "1" ]; then
  psql_admin -c "CREATE ROLE $ROLE LOGIN CREATEDB"
fi
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'")" != "1" ]; then
  psql_admin -c "CREATE DATABASE $DB OWNER $ROLE"
fi

echo "postgresql://$ROLE@127.0.0.1:$PORT/$DB"
