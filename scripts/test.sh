#!/usr/bin/env bash
# Sets up (if needed) and runs every test: the C unit tests (plain, then
# under AddressSanitizer and UndefinedBehaviorSanitizer), then the pytest
# suites against PyTorch's CPU backend, once in strict mode and once in
# fused mode (every test starting in it; results must be the same).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
. .venv/bin/activate
make -s -j2 test
make -s -j2 sanitize
python -m pytest -q tests "$@"
python -m pytest -q tests --tpu-mode=fused "$@"
