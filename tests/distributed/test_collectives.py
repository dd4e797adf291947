"""Every collective of tpu_dist against its definition, for every dtype of
the device, on 2 and 4 ranks (tests/distributed/_collectives.py does the
checking inside the ranks)."""
import pytest

from ._collectives import run_all
from ._launch import run_ranks


@pytest.mark.parametrize("world", [2, 4])
def test_every_collective_every_dtype(world):
    results = run_ranks(run_all, world, timeout=120).values()
    failures = [f for r in results for f in r["failures"]]
    assert not failures, "\n".join(failures[:50])
    assert all(r["checks"] > 400 for r in results)


def test_cpu_tensors_take_the_same_path():
    import torch

    results = run_ranks(run_all, 2, "cpu", [torch.float32, torch.int16, torch.bool], timeout=60).values()
    failures = [f for r in results for f in r["failures"]]
    assert not failures, "\n".join(failures[:50])


def test_without_the_argument_exchange():
    """TORCH_TPU_DIST_CHECKS=0 skips the record exchange; results are the same."""
    import torch

    results = run_ranks(run_all, 2, "tpu", [torch.float32, torch.int16, torch.bool], timeout=60,
                        env={"TORCH_TPU_DIST_CHECKS": "0"}).values()
    failures = [f for r in results for f in r["failures"]]
    assert not failures, "\n".join(failures[:50])


@pytest.mark.parametrize("world", [2, 4])
def test_every_collective_async(world):
    """async_op=True, each Work waited for as with NCCL (results read on the
    issuing stream afterwards)."""
    import torch

    dtypes = None if world == 2 else [torch.float32, torch.int16, torch.bool]
    results = run_ranks(run_all, world, "tpu", dtypes, True, timeout=120).values()
    failures = [f for r in results for f in r["failures"]]
    assert not failures, "\n".join(failures[:50])
