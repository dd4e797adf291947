"""Run by test_torchrun under ``torchrun``: the launch docs/distributed.md shows."""
import json
import os

import torch
import torch.distributed as dist

dist.init_process_group()  # env:// from torchrun; the backend from the device
rank = dist.get_rank()
t = torch.full((3,), float(rank + 1), device="tpu")
dist.all_reduce(t)
result = json.dumps({
    "rank": rank,
    "local_rank": int(os.environ["LOCAL_RANK"]),
    "config": dist.get_backend_config(),
    "device": torch.tpu.current_device(),
    "tensor_device": str(t.device),
    "sum": t.cpu().tolist(),
})
with open(os.path.join(os.environ["TPU_DIST_TEST_OUT"], f"rank{rank}.json"), "w") as f:
    f.write(result)
dist.destroy_process_group()
