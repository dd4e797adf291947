"""tpu_dist's registration, default selection, chip choice, argument
errors and async handles."""
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist

from . import _workers as W
from ._launch import run_ranks


def test_registered_and_default_for_tpu():
    assert dist.is_backend_available("tpu_dist")
    assert dist.is_backend_available("cpu:gloo,tpu:tpu_dist")
    assert dist.Backend.default_device_backend_map["tpu"] == "tpu_dist"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"
    assert dist.get_default_backend_for_device("tpu") == "tpu_dist"
    assert dist.Backend.TPU_DIST == "tpu_dist"


def test_import_registers_without_importing_the_process_group():
    code = ("import sys, torch, torch.distributed as dist; "
            "assert dist.is_backend_available('tpu_dist'); "
            "assert 'torch_tpu.distributed.process_group' not in sys.modules; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_local_chip(monkeypatch):
    from torch_tpu.distributed import local_chip

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert local_chip() is None
    count = torch.tpu.device_count()
    monkeypatch.setenv("LOCAL_RANK", str(count - 1))
    assert local_chip() == count - 1
    monkeypatch.setenv("LOCAL_RANK", str(count))  # more processes than chips
    assert local_chip() == 0


def test_default_selection_and_chips():
    """No backend, "tpu_dist" and the device:backend strings all give
    tpu_dist; under LOCAL_RANK each process takes its chip."""
    assert torch.tpu.device_count() >= 2
    with tempfile.TemporaryDirectory() as d:
        results = run_ranks(W.selection, 2, d, init=False,
                            env={r: {"LOCAL_RANK": str(r)} for r in range(2)}).values()
    for rank, out in enumerate(results):
        assert out["current_device"] == 0
        for spec, config in [("None", "tpu:tpu_dist"), ("tpu_dist", "cpu:tpu_dist,tpu:tpu_dist"),
                             ("cpu:gloo,tpu:tpu_dist", "cpu:gloo,tpu:tpu_dist"),
                             ("tpu:tpu_dist,cpu:gloo", "tpu:tpu_dist,cpu:gloo")]:
            got = out[spec]
            assert got["type"] == "ProcessGroupTPU" and got["name"] == "tpu_dist", (spec, got)
            assert got["config"] == config
            assert got["tpu"] == [3.0] * 4 and got["cpu"] == [3, 3]
            assert got["objects"] == [{"rank": 0}, {"rank": 1}]
            assert got["device_after_init"] == rank


def test_one_chip_per_process_uses_tpu_0():
    with tempfile.TemporaryDirectory() as d:
        results = run_ranks(W.selection, 2, d, init=False,
                            env={r: {"LOCAL_RANK": str(r), "TORCH_TPU_CHIPS": "1"} for r in range(2)}).values()
    assert [out["None"]["device_after_init"] for out in results] == [0, 0]


def test_argument_errors_are_clear_and_leave_the_group_usable():
    r0, r1 = run_ranks(W.errors, 2).values()
    for out in (r0, r1):
        assert out["ok_after_wrong_device"] and out["ok_after_mismatches"] and out["ok_after_recv_mismatch"]
        kind, msg = out["size_mismatch"]
        assert kind == "ValueError" and "number of elements differs across ranks (rank 0: 4; rank 1: 8)" in msg
        kind, msg = out["dtype_mismatch"]
        assert kind == "ValueError" and "torch.float32" in msg and "torch.int32" in msg
        assert "root (src/dst) differs" in out["root_mismatch"][1]
        assert "called different collectives" in out["divergent"][1]
        assert "rank 0: all_reduce" in out["divergent"][1] and "rank 1: broadcast" in out["divergent"][1]
        assert "element counts" in out["a2a_splits"][1]
        assert out["mixed_devices"][0] == "ValueError" and "tensor_list[0] is on cpu" in out["mixed_devices"][1]
        assert "needs world_size (2)" in out["ag_tensor_size"][1]
        assert out["bool_avg"][0] == "TypeError"
    assert r1["wrong_device"] == ("ValueError", "tpu_dist all_reduce: tensor is on meta; tpu_dist takes tpu (or cpu) tensors")
    assert "rank 1 failed in all_reduce before it reached gloo" in r0["wrong_device"][1]
    assert r0["recv_mismatch"] == (None, None)
    assert r1["recv_mismatch"][0] == "ValueError"
    assert "expected 4 elements of torch.float32, but rank 0 sent 8" in r1["recv_mismatch"][1]


def test_async_handles_and_stream_order():
    for out in run_ranks(W.handles, 2).values():
        assert out["wait"] is True and out["completed_after_wait"] and out["success"]
        assert out["exception"] is None
        for key in ("wait_value", "poll_value", "future_value", "future_then", "future_noncontiguous", "many",
                    "kept_alive", "stream_order", "side_stream", "barrier_async"):
            assert out[key] is True, key
        assert out["future_device"].startswith("tpu")


def test_irecv_posted_without_wait():
    assert run_ranks(W.irecv_then_barrier, 2, timeout=60, pg_timeout=10).values() == [True, True]


def test_subgroups_and_device_mesh():
    results = run_ranks(W.subgroups, 4, timeout=90, env={"TORCH_TPU_CHIPS": "1"}).values()
    assert [r["new_group"] for r in results] == [[2.0] * 2, [4.0] * 2, [2.0] * 2, [4.0] * 2]
    assert [r["broadcast"] for r in results] == [[2.0] * 2, [3.0] * 2, [2.0] * 2, [3.0] * 2]
    assert [r["mesh_dim1"] for r in results] == [[1.0], [1.0], [5.0], [5.0]]
