#!/usr/bin/env bash
# A virtual environment for the Airflow tests (tests/e2e/test_airflow.py), apart from .venv:
# Airflow pins too much to share one (3.3.2 caps FastAPI below 0.137; .venv has 0.165).
# It holds apache-airflow and this checkout (-e ".[sklearn,airflow]"), pinned by
# scripts/constraints-airflow.txt, in .venv-airflow (or $THRESHER_AIRFLOW_VENV). Prints the
# venv's path, for THRESHER_TEST_AIRFLOW:
#
#   THRESHER_TEST_AIRFLOW="$(bash scripts/airflow.sh)" .venv/bin/python -m pytest tests/e2e/test_airflow.py
#
# About a minute the first time (47 s on a quiet two-core machine); scripts/test.sh runs it
# in the background while its checks run. tests/e2e/test_airflow.py is skipped without
# THRESHER_TEST_AIRFLOW (the quick loop), never in scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${THRESHER_AIRFLOW_VENV:-.venv-airflow}"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x "$VENV/bin/python" ]; then
  echo "airflow.sh: creating a virtual environment for Airflow in $VENV ($PYTHON)" >&2
  "$PYTHON" -m venv "$VENV"
fi
echo "airflow.sh: installing apache-airflow and .[sklearn,airflow] into $VENV" >&2
"$VENV/bin/python" -m pip install --quiet -c scripts/constraints-airflow.txt \
  -e ".[sklearn,airflow]" >&2
cd "$VENV" && pwd
