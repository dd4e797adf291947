"""DistributedDataParallel on tpu: 20 steps on two ranks, each with half of
every batch, follow the same model trained in one process on the full
batch (same data, same seed)."""
import torch

from . import _workers as W
from ._launch import run_ranks


def test_ddp_matches_one_process_on_the_full_batch():
    r0, r1 = run_ranks(W.ddp, 2, 20, timeout=120).values()
    assert len(r0["losses"]) == 20
    assert r0["losses"] == r1["losses"]
    torch.testing.assert_close(torch.tensor(r0["losses"]), torch.tensor(r0["ref_losses"]), rtol=1e-5, atol=1e-6)
    for a, b in zip(r0["params"], r1["params"]):
        assert torch.equal(a, b)  # the ranks stay in step
    for a, b in zip(r0["params"], r0["ref_params"]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
