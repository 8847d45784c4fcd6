#!/usr/bin/env bash
# A virtual environment for images.py's Daft side: Daft caps pyarrow below the version
# the project's .venv holds, so it gets one of its own (nothing in .venv changes).
#
#     benchmarks/daft_env.sh [FOLDER]      # default ~/.cache/thresher-bench/daft-venv
#     python benchmarks/images.py --daft-python FOLDER/bin/python ...
#
# torch's CPU build, pinned as the tests pin it (scripts/constraints-cpu.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-$HOME/.cache/thresher-bench/daft-venv}"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -c scripts/constraints-cpu.txt daft pillow numpy torch
"$VENV/bin/python" -c "import daft, torch; print('daft', daft.__version__, 'torch', torch.__version__)"
echo "$VENV/bin/python"
