"""Differential fuzzer: random programs of tensor ops, run on tpu and on
PyTorch's CPU backend in the same process, with every intermediate
compared (dtype, shape, aliasing, and values: exact for integer and bool,
within a per-dtype tolerance for floats) and errors matched (if the CPU
raises, the tpu must raise too, and the other way round).

The programs mix element-wise ops (arithmetic, division with every
rounding mode, comparisons, where, clamp, pow, unary math), reductions
(sum / mean / amax / prod / argmax ... over dims, keepdim, dtype=), matmul
(mm, matmul, bmm, @), views (view, reshape, transpose, permute, slicing,
select, expand, narrow, squeeze, t, diagonal ...), indexing (index_select,
basic and advanced indexing, boolean masks, masked_fill, gather), in-place
ops (also through views and into expanded tensors), dtype conversions among
all ten dtypes, broadcasting, 0-dim tensors (also of a wider dtype than the
other operand, on either side, and 0-dim CPU tensors), empty tensors,
mixed dtypes and Python scalars. See tests/fuzz_programs.py.

CI mode (the default): a fixed set of 300 programs (seeds 0 to 299), each
run in strict mode, every fourth also in debug mode and every tenth in
fused mode; about 10 s on two cores.

Long mode, for local use:

    TORCH_TPU_FUZZ_PROGRAMS=2000 pytest tests/test_fuzz.py -q -x
    TORCH_TPU_FUZZ_PROGRAMS=500 TORCH_TPU_FUZZ_SEED=100000 TORCH_TPU_FUZZ_OPS=30 pytest tests/test_fuzz.py -q

runs N programs from the start seed (default 0), with the given number of
ops per program (default 8 to 16). Every program is reproducible from its
seed; a failure prints the program as a script that reproduces it. To get
a shrunk one (the statements that matter only):

    python tests/fuzz_programs.py --start SEED --count 1 --shrink [--ops N]

fuzz_programs.py's docstring has the rest: what the generator avoids (CPU
results that are not defined), how floats are compared, and
TORCH_TPU_FUZZ_SKIP=REGEX to look past a known bug while hunting others.
"""
import faulthandler
import importlib.util
import os

import pytest
import torch

import fuzz_programs

PROGRAMS = int(os.environ.get("TORCH_TPU_FUZZ_PROGRAMS", "300"))
START = int(os.environ.get("TORCH_TPU_FUZZ_SEED", "0"))
OPS = int(os.environ["TORCH_TPU_FUZZ_OPS"]) if os.environ.get("TORCH_TPU_FUZZ_OPS") else None
TIMEOUT_S = 120  # per program: a hang is a failure, not a stuck CI job

CASES = [(seed, mode) for seed in range(START, START + PROGRAMS) for mode in fuzz_programs.modes_for(seed)]

if importlib.util.find_spec("pytest_timeout") is not None:
    pytestmark = pytest.mark.timeout(TIMEOUT_S)
    _watchdog = None
else:
    def _watchdog():
        # without pytest-timeout: dump every thread's stack and end the run
        faulthandler.dump_traceback_later(TIMEOUT_S, exit=True)


@pytest.fixture(autouse=True)
def watchdog():
    if _watchdog is None:
        yield
        return
    _watchdog()
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.mark.parametrize("seed,mode", CASES, ids=[f"{mode}-{seed}" for seed, mode in CASES])
def test_program(seed, mode):
    program = fuzz_programs.generate(seed, OPS)
    failure = fuzz_programs.run(program, mode)
    if failure is not None:
        pytest.fail(str(failure), pytrace=False)


def test_fuzzer_is_reproducible_and_self_consistent():
    """The same seed gives the same program, and the CPU agrees with
    itself on it (so that a failure above is the tpu's)."""
    for seed in range(START, START + 40):
        a, b = fuzz_programs.generate(seed, OPS), fuzz_programs.generate(seed, OPS)
        assert a.source() == b.source()
        failure = fuzz_programs.run(a, "strict", device="cpu")
        if failure is not None:
            pytest.fail(str(failure), pytrace=False)


def test_fuzzer_covers_the_program_content():
    """The generated programs contain what they are meant to (a guard
    against a generator change that quietly stops producing some ops)."""
    text = "\n".join(fuzz_programs.generate(seed).source() for seed in range(150))
    for needle in ["rounding_mode='floor'", "rounding_mode='trunc'", ".sum(", ".mean(", ".amax(", ".prod(",
                   "dtype=torch.", "torch.mm(", "torch.bmm(", "torch.matmul(", ".view(", ".reshape(",
                   ".transpose(", ".permute(", ".select(", ".expand(", ".narrow(", ".unsqueeze(", ".squeeze(",
                   ".t()", "index_select", "masked_fill", ".add_(", ".mul_(", ".div_(", ".clamp_(", ".zero_()",
                   ".fill_(", ".copy_(", "torch.where(", ".to(torch.", "torch.empty((", "device=DEV)",
                   "torch.tensor(300", "torch.cat(", ".item()", " ** ", "raises on CPU"]:
        assert needle in text, needle
    assert torch.tensor(0).dim() == 0  # imports torch like every suite (autoloads torch_tpu)
