"""Execution modes: switching, and where kernel-side errors surface."""
import pytest
import torch

import conftest
from conftest import run_python


def test_set_get_and_context_manager():
    start = conftest.SESSION_MODE
    assert torch.tpu.get_mode() == start
    with torch.tpu.mode("debug"):
        assert torch.tpu.get_mode() == "debug"
    assert torch.tpu.get_mode() == start
    torch.tpu.set_mode("fused")
    try:
        assert torch.tpu.get_mode() == "fused"
        assert (torch.ones(3, device="tpu") * 2).sum().item() == 6
    finally:
        torch.tpu.set_mode(start)
    with pytest.raises(ValueError, match="unknown mode"):
        torch.tpu.set_mode("eager")


@pytest.mark.parametrize("env,expected", [({"TPU_LAUNCH_BLOCKING": "1"}, "debug"),
                                          ({"TORCH_TPU_DEFER_AND_FUSE": "1"}, "fused"),
                                          ({"TORCH_TPU_DEFER_AND_FUSE": "0"}, "strict")])
def test_mode_from_environment(env, expected):
    r = run_python("import torch; print(torch.tpu.get_mode())", env)
    assert r.stdout.strip() == expected, r.stderr


def _int_div_by_zero():
    a = torch.tensor([4, 5, 6], dtype=torch.int32, device="tpu")
    b = torch.tensor([1, 0, 2], dtype=torch.int32, device="tpu")
    return torch.div(a, b, rounding_mode="trunc")


def test_strict_mode_reports_kernel_error_at_sync_once():
    r = _int_div_by_zero()  # queued: no error yet
    with pytest.raises(RuntimeError, match="aten::div") as info:
        torch.tpu.synchronize()
    assert "division by zero" in str(info.value)
    torch.tpu.synchronize()  # reported once; the stream is usable again
    assert (torch.ones(4, device="tpu") + 1).sum().item() == 8
    del r


def test_debug_mode_reports_kernel_error_at_the_op():
    with torch.tpu.mode("debug"):
        with pytest.raises(RuntimeError, match="division by zero"):
            _int_div_by_zero()
        assert (torch.ones(2, device="tpu") * 3).cpu().tolist() == [3.0, 3.0]


def test_error_surfaces_at_item():
    r = _int_div_by_zero()
    with pytest.raises(RuntimeError, match="aten::div"):
        r.sum().item()
    torch.tpu.synchronize()


def test_modes_give_bit_identical_results():
    torch.tpu.manual_seed(0)
    a = torch.randn(257, 129, device="tpu")
    b = torch.randn(129, 65, device="tpu")
    results = []
    for m in ("strict", "debug", "fused"):
        with torch.tpu.mode(m):
            results.append(((a @ b) * 0.5 + a.sum() - b.mean(0).sum()).cpu())
    assert torch.equal(results[0], results[1]) and torch.equal(results[0], results[2])
