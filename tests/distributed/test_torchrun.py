"""torchrun, as for CUDA: one process per chip, tpu_dist by default."""
import json
import os
import subprocess
import sys

WORKER = os.path.join(os.path.dirname(__file__), "_torchrun_worker.py")


def test_torchrun_two_processes():
    env = dict(os.environ, TORCH_TPU_CHIPS="2", OMP_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", WORKER],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    results = sorted((json.loads(line.split("RESULT ", 1)[1]) for line in r.stdout.splitlines() if "RESULT " in line),
                     key=lambda x: x["rank"])
    assert [x["rank"] for x in results] == [0, 1]
    for x in results:
        assert x["config"] == "tpu:tpu_dist"
        assert x["device"] == x["local_rank"] and x["tensor_device"] == f"tpu:{x['local_rank']}"
        assert x["sum"] == [3.0] * 3
