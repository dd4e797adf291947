"""A rank that exits (normal interpreter teardown, no destroy_process_group)
while its async collectives are pending: its communication thread finishes
them first, and the process exits cleanly instead of aborting in
finalization ("terminate called without an active exception")."""
import os
import subprocess
import sys

from . import _workers as W
from ._launch import run_ranks


def test_exit_with_pending_async_collectives(tmp_path):
    worker = os.path.join(os.path.dirname(__file__), "_exit_worker.py")
    store = str(tmp_path / "store")
    env = dict(os.environ, TORCH_TPU_CHIPS="2", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, worker, str(r), "2", store, str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r} exited with {p.returncode}:\n{err[-3000:]}"
        assert "terminate called" not in err, err[-3000:]
    assert float((tmp_path / "value").read_text()) == 3.0  # 1 + 2: rank 0 took part before it exited


def test_shutdown_waits_for_gloo_to_release_its_tensors():
    # The race itself is rare (a gloo worker thread releasing a collective's
    # tensors while the interpreter finalizes); this checks what prevents it.
    results = run_ranks(W.released_at_shutdown, 2, timeout=60).values()
    assert results == [dict(held=0, t=12.0, c=12.0, outs=[12.0, 12.0])] * 2  # (1 + 2), doubled twice


def test_host_view_holds_the_device_memory_not_a_python_object():
    # What lets a gloo thread drop a collective's view without the GIL (see
    # _C._host_view): the view keeps the tpu storage through C++ alone.
    import gc
    import weakref

    import torch

    from torch_tpu.distributed._views import host_view

    t = torch.arange(4096, dtype=torch.float32, device="tpu")[::2]
    expected = t.cpu()
    alive = weakref.ref(t)
    view = host_view(t)
    torch.tpu.synchronize()
    assert view.device.type == "cpu" and view.stride() == t.stride() and torch.equal(view, expected)
    del t
    gc.collect()
    assert alive() is None  # no Python object held by the view
    # The block is not freed (nor reused) while the view lives.
    others = [torch.full((4096,), -1.0, device="tpu") for _ in range(4)]
    torch.tpu.synchronize()
    assert torch.equal(view, expected)
    view.add_(1)  # and it still aliases the device memory (nobody else holds it)
    assert torch.equal(view, expected + 1)
    del others


def test_host_view_of_a_view_outside_its_storage_is_refused():
    import pytest
    import torch

    from torch_tpu import _C

    x = torch.arange(1 << 20, dtype=torch.float32, device="tpu")
    t = x[(1 << 20) - 10:]
    x.untyped_storage().resize_(16)
    with pytest.raises(RuntimeError, match="resized"):
        _C._host_view(t)
    with pytest.raises(ValueError, match="expected a tpu tensor"):
        _C._host_view(torch.ones(2))
