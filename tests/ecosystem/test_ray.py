"""Ray Train on tpu (examples/ray_train_ddp.py, torch_tpu/_ray.py,
torch_tpu/_loader.py): ``TorchTrainer`` with ``TorchConfig(backend=
"tpu_dist")`` on two local workers trains DDP on tpu, and both workers end
with the weights of one CPU process trained on the full batches.

Ray runs in a fresh interpreter (its driver state, threads and processes
stay there) under a hard deadline; its own processes share the driver's
fate, so killing the driver's session ends them too."""
import importlib.util
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

pytest.importorskip("ray.train.torch", reason="ray[train] is a test dependency (scripts/setup.sh)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
_spec = importlib.util.spec_from_file_location("ray_train_ddp", os.path.join(EXAMPLES, "ray_train_ddp.py"))
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)

CONFIG = {"workers": 2, "steps": 6, "batch": 8, "lr": 0.1}


def _run(code: str, timeout: float) -> subprocess.CompletedProcess:
    """A fresh interpreter that can import the example (the Ray workers it
    starts inherit PYTHONPATH), killed with everything in its session after
    ``timeout`` s."""
    env = dict(os.environ, OMP_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0",
               PYTHONPATH=os.pathsep.join([EXAMPLES, os.environ.get("PYTHONPATH", "")]))
    env.pop("TORCH_TPU_CHIPS", None)  # one chip per worker process, the virtual TPU's default
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"did not finish within {timeout} s (killed):\n{out[-3000:]}\n{err[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_device_follows_the_process_group():
    """Ray's device for a worker without GPUs: cpu with no group or a gloo
    group (Ray's default), the process's chip under tpu_dist; and the
    ``torch_tpu._loader.load()`` Ray calls for tpu_dist."""
    run = _run("""
        import datetime, torch, torch.distributed as dist
        from ray.air._internal.device_manager.cpu import CPUTorchDeviceManager
        import torch_tpu._loader
        torch_tpu._loader.load()
        manager = CPUTorchDeviceManager()
        seen = [manager.get_devices()]
        for i, backend in enumerate(["gloo", "tpu_dist", "cpu:gloo,tpu:tpu_dist"]):
            dist.init_process_group(backend, init_method="tcp://127.0.0.1:%d" % (29651 + i), rank=0,
                                    world_size=1, timeout=datetime.timedelta(seconds=30))
            seen.append(manager.get_devices())
            dist.destroy_process_group()
        print(" ".join(str(d) for ds in seen for d in ds))
    """, timeout=60)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["cpu", "cpu", "tpu:0", "tpu:0"]


def test_torch_trainer_ddp_on_tpu_matches_one_cpu_process(tmp_path):
    out = tmp_path / "ranks.pt"
    run = _run(f"""
        import ray, torch
        import ray_train_ddp as example
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            ranks = example.fit({CONFIG!r}, {str(tmp_path / "storage")!r})
        finally:
            ray.shutdown()
        torch.save(ranks, {str(out)!r})
    """, timeout=180)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    ranks = torch.load(out)
    want = example.train_reference(CONFIG)

    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert r["wrapper"] == "DistributedDataParallel"
        assert r["device"] == r["param_device"] == "tpu:0"  # each worker process has its own chip
        assert r["batch_devices"] == ["tpu:0"]  # prepare_data_loader moved them
        assert r["accelerate_device"] == "tpu:0"
        assert r["backend"] == "cpu:tpu_dist,tpu:tpu_dist"
        assert len(r["losses"]) == CONFIG["steps"]
        torch.testing.assert_close(torch.tensor(r["losses"]), torch.tensor(want["losses"]), rtol=1e-5, atol=1e-6)
        for got, ref in zip(r["params"], want["params"], strict=True):
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    for a, b in zip(ranks[0]["params"], ranks[1]["params"], strict=True):
        assert torch.equal(a, b)  # the workers stay in step
