#!/usr/bin/env bash
# Install what the tests need into .venv and run the whole suite, lint and types included.
# This is the README's test command, and exactly what .ci/run runs.
#
# What it does to the machine, each said as it happens (a `test.sh:` line on stderr):
# a virtual environment in .venv (pip and the test extras, CPU torch: no CUDA wheels);
# Debian's postgresql and chromium packages installed if missing (only they: nothing
# installed is upgraded; they stay installed); a PostgreSQL server on 127.0.0.1:54329
# with its data under /tmp, and a Kafka broker on 127.0.0.1 (scripts/kafka.sh), each
# stopped at the end if this run started it, even on failure;
# a temporary folder of links, removed. Nothing else outside the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { echo "test.sh: $*" >&2; }

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  step "creating a virtual environment in .venv ($PYTHON)"
  "$PYTHON" -m venv .venv
fi
step "installing pip and .[test] into .venv (torch's CPU build, scripts/constraints-cpu.txt)"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -c scripts/constraints-cpu.txt -e ".[test]"

# Airflow pins too much to share .venv: its own venv, made while the checks below run.
if [ -z "${THRESHER_TEST_AIRFLOW:-}" ]; then
  step "Airflow for the DAG tests, in .venv-airflow, in the background (scripts/airflow.sh)"
  airflow_out="$(mktemp)"
  bash scripts/airflow.sh >"$airflow_out" 2>"$airflow_out.log" &
  airflow_pid=$!
fi

step "lint, format and type checks"
.venv/bin/ruff check src tests benchmarks
.venv/bin/ruff format --check src tests benchmarks
.venv/bin/mypy
# Known vulnerabilities (with a fix) in the installed dependencies fail the run. An audit
# that could check nothing (exit 3: no advisory data reachable, as on machines that reach
# only the package registries) is no pass of the audit, and the run's last line says so;
# the tests' own result is the exit status, unless THRESHER_AUDIT=required makes the
# audit's absence fail the run too (for machines that can reach PyPI's advisory data).
step "auditing the installed packages for known vulnerabilities (pip-audit)"
set +e
.venv/bin/python scripts/audit.py
audit=$?
set -e
[ "$audit" -eq 0 ] || [ "$audit" -eq 3 ] || exit 1

# Services this run started (postgres, kafka): each stopped at the end, even on failure.
STARTED=()
stop_started() {
  for service in ${STARTED[@]+"${STARTED[@]}"}; do
    step "stopping the $service server this run started"
    bash "scripts/$service.sh" stop || true
  done
}
trap stop_started EXIT
# A throwaway PostgreSQL on 127.0.0.1 (installed from Debian's packages if need be) for
# tests/integration/test_postgres.py, which fail in CI without it; stopped at the end if
# this run started it (a server that was already up is left as it was).
if [ -z "${THRESHER_TEST_POSTGRES:-}" ]; then
  [ "$(bash scripts/postgres.sh status)" = up ] || STARTED+=(postgres)
  step "PostgreSQL for the tests (scripts/postgres.sh)"
  THRESHER_TEST_POSTGRES="$(bash scripts/postgres.sh)"
fi
export THRESHER_TEST_POSTGRES
# A Kafka broker on 127.0.0.1 for tests/integration/test_kafka.py and the Kafka fault
# tests (Apache Kafka's jars fetched with mvn once, or librdkafka's mock cluster where no
# Maven repository answers: scripts/kafka.sh), stopped at the end if this run started it.
if [ -z "${THRESHER_TEST_KAFKA:-}" ]; then
  [ "$(bash scripts/kafka.sh status)" = up ] || STARTED+=(kafka)
  step "a Kafka broker for the tests (scripts/kafka.sh)"
  THRESHER_TEST_KAFKA="$(bash scripts/kafka.sh)"
fi
export THRESHER_TEST_KAFKA
# Debian's Chromium (installed if need be) for the monitoring report's browser test.
if [ -z "${THRESHER_TEST_CHROMIUM:-}" ]; then
  step "Chromium for the report's browser test (scripts/chromium.sh)"
  THRESHER_TEST_CHROMIUM="$(bash scripts/chromium.sh)"
fi
export THRESHER_TEST_CHROMIUM

# The tree and profile tests once more with no C compiler on the run-time PATH (issue 35):
# thresher runs none; the trees compile in process (llvmlite). A folder of links to every
# tool on PATH but the compilers stands in for PATH.
step "the tree and profile tests with no C compiler on PATH (a temporary folder of links)"
nocc="$(mktemp -d)"
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
rm -rf "$nocc"

if [ -n "${airflow_pid:-}" ]; then
  if ! wait "$airflow_pid"; then
    cat "$airflow_out.log" >&2
    step "scripts/airflow.sh failed: Airflow's venv could not be made"
    exit 1
  fi
  THRESHER_TEST_AIRFLOW="$(cat "$airflow_out")"
  rm -f "$airflow_out" "$airflow_out.log"
fi
export THRESHER_TEST_AIRFLOW

# pytest exits 5 when it collects nothing: that is a failure here, never a pass.
# Two test processes (THRESHER_TEST_WORKERS; 0 runs them in this one): the end-to-end
# tests spend most of their time waiting on servers and workers they started.
step "the suite (pytest, ${THRESHER_TEST_WORKERS:-2} processes)"
set +e
.venv/bin/python -m pytest -n "${THRESHER_TEST_WORKERS:-2}" --durations=25 "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  step "pytest collected no tests"
  exit 1
fi
if [ "$audit" -eq 3 ]; then
  step "NOT AUDITED: the vulnerability audit could check no package (no advisory data" \
    "reachable from this machine): the dependencies' vulnerabilities are unknown, not none"
  if [ "${THRESHER_AUDIT:-}" = required ]; then
    [ "$status" -ne 0 ] || status=3
  fi
fi
exit "$status"
