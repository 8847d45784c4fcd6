#!/usr/bin/env bash
# Install what the tests need into .venv and run the whole suite, lint and types included.
# This is the README's test command, and exactly what .ci/run runs.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -c scripts/constraints-cpu.txt -e ".[test]"

.venv/bin/ruff check src tests benchmarks
.venv/bin/ruff format --check src tests benchmarks
.venv/bin/mypy
# Known vulnerabilities (with a fix) in the installed dependencies fail the run.
.venv/bin/python scripts/audit.py

# A throwaway PostgreSQL on 127.0.0.1 (installed from Debian's packages if need be) for
# tests/integration/test_postgres.py, which fail in CI without it.
THRESHER_TEST_POSTGRES="${THRESHER_TEST_POSTGRES:-$(bash scripts/postgres.sh)}"
export THRESHER_TEST_POSTGRES
# Debian's Chromium (installed if need be) for the monitoring report's browser test.
THRESHER_TEST_CHROMIUM="${THRESHER_TEST_CHROMIUM:-$(bash scripts/chromium.sh)}"
export THRESHER_TEST_CHROMIUM

# The tree and profile tests once more with no C compiler on the run-time PATH (issue 35):
# thresher runs none; the trees compile in process (llvmlite). A folder of links to every
# tool on PATH but the compilers stands in for PATH.
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

# pytest exits 5 when it collects nothing: that is a failure here, never a pass.
# Two test processes (THRESHER_TEST_WORKERS; 0 runs them in this one): the end-to-end
# tests spend most of their time waiting on servers and workers they started.
set +e
.venv/bin/python -m pytest -n "${THRESHER_TEST_WORKERS:-2}" --durations=25 "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "test.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
