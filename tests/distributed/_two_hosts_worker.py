"""Run by test_two_hosts under ``torchrun --nnodes=2``, one process on each
"host" (a network namespace): DDP on tpu over tpu_dist, with
``init_process_group()``'s defaults, each rank on its half of every batch.
The test imports ``make_model``, ``make_data`` and ``train_reference`` for
its oracle: the same steps in one process on the CPU on the full batch."""
import os
import socket

import torch

STEPS = 10
BATCH = 32  # the full batch; each of the two ranks takes half
LR = 0.1


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 4))


def make_data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(STEPS, BATCH, 16, generator=g), torch.randn(STEPS, BATCH, 4, generator=g)


def train_reference() -> dict:
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    xs, ys = make_data()
    losses = []
    for step in range(STEPS):
        loss = torch.nn.functional.mse_loss(model(xs[step]), ys[step])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"losses": losses, "params": [p.detach() for p in model.parameters()]}


def _local_address(peer: str) -> str:
    """The address this process reaches ``peer`` from (its "host"'s)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((peer, 9))  # UDP: no packet is sent
        return s.getsockname()[0]


def main() -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group()  # env:// from torchrun; tpu_dist from the device
    rank, world = dist.get_rank(), dist.get_world_size()
    xs, ys = make_data()
    per = BATCH // world
    model = DDP(make_model().to("tpu"), bucket_cap_mb=0.002)  # several buckets
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    losses = []
    for step in range(STEPS):
        x = xs[step, rank * per:(rank + 1) * per].to("tpu")
        y = ys[step, rank * per:(rank + 1) * per].to("tpu")
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        losses.append(mean.item())
    result = {
        "rank": rank,
        "world": world,
        "node_rank": int(os.environ["GROUP_RANK"]),
        "config": dist.get_backend_config(),
        "device": str(next(model.parameters()).device),
        "address": _local_address(os.environ["MASTER_ADDR"]),
        "losses": losses,
        "params": [p.detach().cpu() for p in model.module.parameters()],
    }
    torch.save(result, os.path.join(os.environ["TPU_DIST_TEST_OUT"], f"rank{rank}.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
