#!/usr/bin/env bash
# Sets up a fresh clone: a virtual environment in .venv with torch==2.13.0
# (the ABI the extension is built against) and torch-tpu built from source.
# Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
. .venv/bin/activate
python -m pip install --quiet --upgrade pip setuptools wheel
python -m pip install --quiet torch==2.13.0 numpy pytest hypothesis safetensors ninja
# Editable: the compiled torch_tpu/_C lands next to the Python sources.
MAX_JOBS=${MAX_JOBS:-2} python -m pip install --quiet --no-build-isolation -e .
