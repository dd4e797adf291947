"""init_process_group(device_id=torch.device("tpu", i)) binds the group, and
DDP's timer measures on the tpu device (without a timer for the device, DDP
leaves these times unset and logs "Time stats are currently only collected
for CPU and CUDA devices")."""
import tempfile

from . import _device_workers as D
from ._launch import run_ranks


def test_device_id_binds_the_group_and_the_chip():
    with tempfile.TemporaryDirectory() as workdir:
        r0, r1 = run_ranks(D.bound_device, 2, workdir, init=False, env={"TORCH_TPU_CHIPS": "2"}, timeout=60).values()
    assert (r0["bound"], r0["current"], r0["tensor_chip"]) == ("tpu:1", 1, 1)
    assert (r1["bound"], r1["current"], r1["tensor_chip"]) == ("tpu:0", 0, 0)
    for r in (r0, r1):
        assert r["objects"] == [0, 1] and r["sum"] == [1.0, 1.0, 1.0]


def test_ddp_times_iterations_on_the_device():
    for out in run_ranks(D.ddp_timer, 2, timeout=90).values():
        times = out["times"]
        assert times["avg_forward_compute_time"] > 0, times
        assert times["avg_backward_compute_time"] > 0, times
        assert times["avg_backward_comm_time"] > 0, times
