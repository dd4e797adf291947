"""torchrun, as for CUDA: one process per chip, tpu_dist by default."""
import json
import os
import subprocess
import sys
import tempfile

WORKER = os.path.join(os.path.dirname(__file__), "_torchrun_worker.py")


def test_torchrun_two_processes():
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, TORCH_TPU_CHIPS="2", OMP_NUM_THREADS="1", TPU_DIST_TEST_OUT=out)
        r = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", WORKER],
            capture_output=True, text=True, timeout=120, env=env,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        results = []
        for rank in range(2):
            with open(os.path.join(out, f"rank{rank}.json")) as f:
                results.append(json.load(f))
    assert [x["rank"] for x in results] == [0, 1]
    for x in results:
        assert x["config"] == "tpu:tpu_dist"
        assert x["device"] == x["local_rank"] and x["tensor_device"] == f"tpu:{x['local_rank']}"
        assert x["sum"] == [3.0] * 3
