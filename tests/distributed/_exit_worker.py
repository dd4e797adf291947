"""One rank of test_exit.py, run as a plain process (not under _launch,
which leaves with os._exit): it issues async collectives and exits through
the normal interpreter teardown while they are still pending.

argv: rank world store_path out_dir"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

rank, world, store_path, out_dir = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group("tpu_dist", init_method="file://" + store_path, rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=30))
t = torch.full((1 << 16,), float(rank + 1), device="tpu")
if rank == 0:
    w = dist.all_reduce(t, async_op=True)
    fut = dist.all_reduce(torch.ones(8, device="tpu"), async_op=True).get_future()
    fut.then(lambda f: f.value()[0].sum())  # a callback that will run on the comm thread
    with open(os.path.join(out_dir, "issued"), "w") as f:
        f.write("1")
    # Exit now: the collectives wait for rank 1, which joins later.
else:
    while not os.path.exists(os.path.join(out_dir, "issued")):
        time.sleep(0.01)
    time.sleep(1.0)  # rank 0 is in its teardown by now
    dist.all_reduce(t)
    dist.all_reduce(torch.ones(8, device="tpu"))
    with open(os.path.join(out_dir, "value"), "w") as f:
        f.write(str(t[0].item()))
