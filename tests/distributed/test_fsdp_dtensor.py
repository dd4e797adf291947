"""FSDP2 (fully_shard) and DTensor on DeviceMesh("tpu", ...): their
collectives go through tpu_dist like any other."""
import torch

from . import _workers as W
from ._launch import run_ranks


def test_fsdp2_matches_one_process_and_dtensor_collectives():
    r0, r1 = run_ranks(W.fsdp2_dtensor, 2, 10, timeout=120).values()
    full = torch.arange(16.0).reshape(4, 4)
    assert torch.equal(r0["dtensor_local"], full[:2]) and torch.equal(r1["dtensor_local"], full[2:])
    assert torch.equal(r0["dtensor_replicate"], full) and torch.equal(r1["dtensor_replicate"], full)
    assert r0["dtensor_sum"] == r1["dtensor_sum"] == 240.0
    assert r0["losses"] == r1["losses"]
    torch.testing.assert_close(torch.tensor(r0["losses"]), torch.tensor(r0["ref_losses"]), rtol=1e-5, atol=1e-6)
    for a, b, ref in zip(r0["params"], r1["params"], r0["ref_params"]):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, ref, rtol=1e-4, atol=1e-5)
