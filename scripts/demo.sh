#!/usr/bin/env bash
# Sets up (if needed) and runs the main demo.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. .venv/bin/activate
python examples/demo.py
