#!/usr/bin/env bash
# Install what the tests need into .venv and run the whole suite, lint and types included.
# This is the README's test command, and exactly what .ci/run runs.
#
# What it does to the machine, each said as it happens (a `test.sh:` line on stderr, with
# the seconds since the start):
# a virtual environment in .venv (pip and the test extras, CPU torch: no CUDA wheels);
# Debian's postgresql and chromium packages installed if missing (only they: nothing
# installed is upgraded; they stay installed); a PostgreSQL server on 127.0.0.1:54329
# with its data under /tmp, and a Kafka broker on 127.0.0.1 (scripts/kafka.sh), each
# stopped at the end if this run started it, even on failure;
# temporary files and a temporary folder of links, removed. Nothing else outside the checkout.
#
# What waits on the network or on a lock runs beside what needs the CPU: Debian's
# packages and PostgreSQL, and Airflow's venv, while pip fills .venv; the audit (whose
# advisory data may never answer) and mypy while the rest gets ready, mypy on into the
# suite. Each one's result is read before the run's end, and any failure fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { echo "test.sh: [${SECONDS}s] $*" >&2; }
work="$(mktemp -d)"

# Services this run started (postgres, kafka): each stopped at the end, even on failure,
# once the background job that may still be starting one has ended. A run that stops
# early (pip or ruff failing) stops its other background jobs too (the audit, mypy and
# Airflow's pip, children first), which would otherwise run on into a removed folder;
# apt's job is waited for instead, as killing apt mid-install would leave its lock.
STARTED=()
stop_started() {
  for pid in ${audit_pid:-} ${mypy_pid:-} ${airflow_pid:-}; do
    pkill -P "$pid" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
  done
  [ -z "${system_pid:-}" ] || wait "$system_pid" 2>/dev/null || true
  for service in ${STARTED[@]+"${STARTED[@]}"}; do
    step "stopping the $service server this run started"
    bash "scripts/$service.sh" stop || true
  done
  rm -rf "$work"
}
trap stop_started EXIT

# Debian's packages (installed if missing) and a throwaway PostgreSQL on 127.0.0.1, in the
# background while pip runs: one after the other, as apt takes one lock. PostgreSQL is
# stopped at the end if this run started it (a server that was already up is left as it
# was); tests/integration/test_postgres.py fails in CI without it.
if [ -z "${THRESHER_TEST_POSTGRES:-}" ]; then
  [ "$(bash scripts/postgres.sh status)" = up ] || STARTED+=(postgres)
  step "PostgreSQL for the tests (scripts/postgres.sh), in the background"
fi
# Debian's Chromium for the report's and the dashboard's browser tests.
[ -n "${THRESHER_TEST_CHROMIUM:-}" ] ||
  step "Chromium for the browser tests (scripts/chromium.sh), in the background"
(
  [ -n "${THRESHER_TEST_POSTGRES:-}" ] || bash scripts/postgres.sh >"$work/postgres"
  [ -n "${THRESHER_TEST_CHROMIUM:-}" ] || bash scripts/chromium.sh >"$work/chromium"
) &
system_pid=$!

# Airflow pins too much to share .venv: its own venv, made while .venv is.
if [ -z "${THRESHER_TEST_AIRFLOW:-}" ]; then
  step "Airflow for the DAG tests, in .venv-airflow, in the background (scripts/airflow.sh)"
  bash scripts/airflow.sh >"$work/airflow" 2>"$work/airflow.log" &
  airflow_pid=$!
fi

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  step "creating a virtual environment in .venv ($PYTHON)"
  "$PYTHON" -m venv .venv
fi
step "installing pip and .[test] into .venv (torch's CPU build, scripts/constraints-cpu.txt)"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -c scripts/constraints-cpu.txt -e ".[test]"

# Known vulnerabilities (with a fix) in the installed dependencies fail the run. An audit
# that could check nothing (exit 3: no advisory data reachable, as on machines that reach
# only the package registries) is no pass of the audit, and the run's last line says so;
# the tests' own result is the exit status, unless THRESHER_AUDIT=required makes the
# audit's absence fail the run too (for machines that can reach PyPI's advisory data).
step "auditing the installed packages for known vulnerabilities (pip-audit), in the background"
.venv/bin/python scripts/audit.py >"$work/audit" 2>&1 &
audit_pid=$!

step "lint and format checks; types (mypy) in the background"
.venv/bin/ruff check src tests benchmarks
.venv/bin/ruff format --check src tests benchmarks
.venv/bin/mypy >"$work/mypy" 2>&1 &
mypy_pid=$!

# A Kafka broker on 127.0.0.1 for tests/integration/test_kafka.py and the Kafka fault
# tests (Apache Kafka's jars fetched with mvn once, or librdkafka's mock cluster where no
# Maven repository answers: scripts/kafka.sh), stopped at the end if this run started it.
if [ -z "${THRESHER_TEST_KAFKA:-}" ]; then
  [ "$(bash scripts/kafka.sh status)" = up ] || STARTED+=(kafka)
  step "a Kafka broker for the tests (scripts/kafka.sh)"
  THRESHER_TEST_KAFKA="$(bash scripts/kafka.sh)"
fi
export THRESHER_TEST_KAFKA

# The tree and profile tests once more with no C compiler on the run-time PATH (issue 35):
# thresher runs none; the trees compile in process (llvmlite). A folder of links to every
# tool on PATH but the compilers stands in for PATH.
step "the tree and profile tests with no C compiler on PATH (a temporary folder of links)"
nocc="$work/nocc"
mkdir "$nocc"
IFS=: read -ra path_dirs <<<"$PATH"
for dir in "${path_dirs[@]}"; do
  for tool in "$dir"/*; do
    name="$(basename "$tool")"
    case "$name" in
      cc | c++ | c89* | c99* | gcc* | g++* | clang* | tcc | *-gcc | *-gcc-* | *-g++* | *-cc) continue ;;
    esac
    [ -e "$nocc/$name" ] || ln -s "$tool" "$nocc/$name"
  done
done
PATH="$nocc" .venv/bin/python -m pytest -p no:xdist -q tests/unit/test_compiled_trees.py \
  tests/unit/test_profile.py tests/unit/test_profile_accuracy.py tests/unit/test_profile_fold.py

set +e
wait "$audit_pid"
audit=$?
audit_pid=
set -e
cat "$work/audit"
[ "$audit" -eq 0 ] || [ "$audit" -eq 3 ] || exit 1

if ! wait "$system_pid"; then
  step "Debian's packages or PostgreSQL could not be set up (the lines above say why)"
  exit 1
fi
[ -n "${THRESHER_TEST_POSTGRES:-}" ] || THRESHER_TEST_POSTGRES="$(cat "$work/postgres")"
[ -n "${THRESHER_TEST_CHROMIUM:-}" ] || THRESHER_TEST_CHROMIUM="$(cat "$work/chromium")"
export THRESHER_TEST_POSTGRES THRESHER_TEST_CHROMIUM

if [ -n "${airflow_pid:-}" ]; then
  pid="$airflow_pid" airflow_pid=
  if ! wait "$pid"; then
    cat "$work/airflow.log" >&2
    step "scripts/airflow.sh failed: Airflow's venv could not be made"
    exit 1
  fi
  THRESHER_TEST_AIRFLOW="$(cat "$work/airflow")"
fi
export THRESHER_TEST_AIRFLOW

# pytest exits 5 when it collects nothing: that is a failure here, never a pass.
# Three test processes on two cores (THRESHER_TEST_WORKERS; 0 runs them in this one): the
# end-to-end tests spend much of their time waiting on servers and workers they started.
# worksteal: a process that runs out of tests takes some of another's.
step "the suite (pytest, ${THRESHER_TEST_WORKERS:-3} processes)"
set +e
.venv/bin/python -m pytest -n "${THRESHER_TEST_WORKERS:-3}" --dist worksteal --durations=25 "$@"
status=$?
wait "$mypy_pid"
types=$?
mypy_pid=
set -e
if [ "$status" -eq 5 ]; then
  step "pytest collected no tests"
  status=1
fi
cat "$work/mypy"
if [ "$types" -ne 0 ]; then
  step "mypy found type errors (above)"
  [ "$status" -ne 0 ] || status=1
fi
step "done"
if [ "$audit" -eq 3 ]; then
  step "NOT AUDITED: the vulnerability audit could check no package (no advisory data" \
    "reachable from this machine): the dependencies' vulnerabilities are unknown, not none"
  if [ "${THRESHER_AUDIT:-}" = required ]; then
    [ "$status" -ne 0 ] || status=3
  fi
fi
exit "$status"
