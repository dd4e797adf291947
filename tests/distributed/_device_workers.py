"""Rank bodies for test_device_binding.py: init_process_group(device_id=...)
binds the group to a chip, and DDP times its iterations on the device."""
import datetime
import os

import torch
import torch.distributed as dist


def bound_device(rank: int, world: int, workdir: str) -> dict:
    """Two chips per process and LOCAL_RANK set; rank r names tpu:(1 - r),
    which must win over LOCAL_RANK's choice."""
    os.environ["LOCAL_RANK"] = str(rank)
    chip = torch.device("tpu", 1 - rank)
    dist.init_process_group(init_method="file://" + os.path.join(workdir, "store"), rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=30), device_id=chip)
    pg = dist.group.WORLD
    out = {"bound": str(pg.bound_device_id), "current": torch.tpu.current_device()}
    # Object collectives of a bound group run on that device; they must work.
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    out["objects"] = [o["rank"] for o in objs]
    t = torch.full((3,), float(rank), device=pg.bound_device_id)
    dist.all_reduce(t)
    out["sum"] = t.cpu().tolist()
    out["tensor_chip"] = t.device.index
    dist.destroy_process_group()
    return out


def ddp_timer(rank: int, world: int) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).to("tpu")
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    # DDP samples the timer on some iterations (the first ones, then every
    # few hundred): ten steps cover the first samples.
    for _ in range(10):
        ddp(torch.randn(32, 64, device="tpu")).sum().backward()
    data = ddp._get_ddp_logging_data()
    keys = ("avg_forward_compute_time", "avg_backward_compute_time", "avg_backward_comm_time",
            "avg_backward_compute_comm_overlap_time")
    return {"times": {k: data.get(k, -1) for k in keys}}
