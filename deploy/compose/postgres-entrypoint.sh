#!/bin/sh
# The store's PostgreSQL: a cluster made in $PGDATA on first start (with the role and
# database POSTGRES_DB owned by POSTGRES_USER), then the server in the foreground on
# 127.0.0.1:$POSTGRES_PORT.
set -eu
PORT="${POSTGRES_PORT:-15432}"
USER_NAME="${POSTGRES_USER:-thresher}"
DB="${POSTGRES_DB:-thresher}"
AUTH="${POSTGRES_AUTH:-trust}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  initdb -D "$PGDATA" -U "$USER_NAME" --auth-local=trust --auth-host="$AUTH" \
    --encoding=UTF8 --locale=C.UTF-8
  echo "CREATE DATABASE \"$DB\" OWNER \"$USER_NAME\";" \
    | postgres --single -D "$PGDATA" postgres >/dev/null
fi
exec postgres -D "$PGDATA" -c listen_addresses=127.0.0.1 -c port="$PORT" \
  -c unix_socket_directories=/tmp
