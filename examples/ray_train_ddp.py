"""Ray Train on the virtual TPU: DistributedDataParallel over ``tpu_dist``.

Ray's ``TorchTrainer`` starts the workers (``ScalingConfig(num_workers=2,
use_gpu=False)``: two processes on this machine, one chip each) and forms
one process group over them with ``TorchConfig(backend="tpu_dist")``. The
training function is Ray's usual one, with no device in it:
``ray.train.torch.prepare_model`` puts the model on the worker's tpu chip
and wraps it in DDP, ``prepare_data_loader`` shards the data (a
``DistributedSampler``) and moves each batch to the chip
(torch_tpu/_ray.py). Every worker reports its final weights in Ray's
checkpoint (one file per worker, merged by Ray into one directory); the
script checks them against the same model trained in one process on the
CPU on the full batch.

    .venv/bin/python examples/ray_train_ddp.py              # about 40 s on 2 cores, most of it Ray starting
    .venv/bin/python examples/ray_train_ddp.py --workers 2 --steps 20

Without ``backend="tpu_dist"`` Ray uses gloo when it schedules no GPUs,
and the workers train on the CPU.
"""
import argparse
import os
import tempfile
from typing import Any, Dict, List

import torch  # torch-tpu autoloads: "tpu" is a device and tpu_dist a c10d backend


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 4))


def make_data(config: Dict[str, Any]) -> torch.utils.data.TensorDataset:
    """``steps`` global batches of ``workers * batch`` samples, in order."""
    n = config["steps"] * config["workers"] * config["batch"]
    g = torch.Generator().manual_seed(1)
    return torch.utils.data.TensorDataset(torch.randn(n, 8, generator=g), torch.randn(n, 4, generator=g))


def train_func(config: Dict[str, Any]) -> None:
    """One Ray Train worker: DDP on its tpu chip, its shard of every batch."""
    import ray.train
    import ray.train.torch
    import torch.distributed as dist

    device = ray.train.torch.get_device()  # tpu:N under tpu_dist
    model = ray.train.torch.prepare_model(make_model())
    # A SequentialSampler becomes DistributedSampler(shuffle=False): worker r
    # takes samples r, r + W, r + 2W, ..., so step k of all workers together
    # is samples [k*W*b, (k+1)*W*b), the oracle's batch k.
    loader = ray.train.torch.prepare_data_loader(
        torch.utils.data.DataLoader(make_data(config), batch_size=config["batch"]))
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
    losses = []
    batch_devices = set()
    for x, y in loader:
        batch_devices.add(str(x.device))
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)  # the full batch's loss
        losses.append(mean.item())

    rank = ray.train.get_context().get_world_rank()
    state = {
        "rank": rank,
        "device": str(device),
        "param_device": str(next(model.parameters()).device),
        "batch_devices": sorted(batch_devices),
        "accelerate_device": os.environ.get("ACCELERATE_TORCH_DEVICE"),  # set by Ray for accelerate
        "wrapper": type(model).__name__,
        "backend": dist.get_backend_config(),
        "losses": losses,
        "params": [p.detach().cpu() for p in model.module.parameters()],
    }
    with tempfile.TemporaryDirectory() as d:
        torch.save(state, os.path.join(d, f"rank{rank}.pt"))
        ray.train.report({"loss": losses[-1]}, checkpoint=ray.train.Checkpoint.from_directory(d))


def fit(config: Dict[str, Any], storage: str) -> List[Dict[str, Any]]:
    """Runs ``train_func`` on ``config["workers"]`` Ray workers (Ray must be
    initialized) and returns what every worker saved, by rank."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    trainer = TorchTrainer(
        train_func,
        train_loop_config=config,
        torch_config=TorchConfig(backend="tpu_dist", timeout_s=60),
        scaling_config=ScalingConfig(num_workers=config["workers"], use_gpu=False),
        run_config=RunConfig(storage_path=storage, name="ray_train_ddp"),
    )
    result = trainer.fit()
    with result.checkpoint.as_directory() as d:
        return [torch.load(os.path.join(d, f"rank{r}.pt")) for r in range(config["workers"])]


def train_reference(config: Dict[str, Any]) -> Dict[str, Any]:
    """The oracle: the same model and steps in one process, on the CPU,
    each step on the full batch of all workers."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
    data = make_data(config)
    step_size = config["workers"] * config["batch"]
    losses = []
    for start in range(0, len(data), step_size):
        x, y = data[start:start + step_size]
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return {"losses": losses, "params": [p.detach() for p in model.parameters()]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=8, help="samples per worker and step")
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    config = vars(args)

    import ray

    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory() as storage:
            ranks = fit(config, storage)
    finally:
        ray.shutdown()
    want = train_reference(config)
    for r in ranks:
        print(f"worker {r['rank']}: {r['wrapper']} on {r['param_device']}, batches on {r['batch_devices']}, "
              f"backend {r['backend']}")
    print("loss per step:", " ".join(f"{v:.4f}" for v in ranks[0]["losses"]))
    diff = max((a - b).abs().max().item() for r in ranks for a, b in zip(r["params"], want["params"]))
    print(f"largest weight difference to one CPU process on the full batch: {diff:.2e}")


if __name__ == "__main__":
    main()
