"""tpu_dist against gloo on CPU tensors, in the same processes.

    python benchmarks/bench_dist.py [--quick] [--no-write]

1. all_reduce bus bandwidth, 4 KiB to 256 MiB of float32, on 2 ranks of
   one group ``"cpu:gloo,tpu:tpu_dist"``: each size runs on a tpu tensor
   (tpu_dist, synchronous, with and without the argument exchange) and on
   a CPU tensor (gloo itself), interleaved, median of the repeats. Bus
   bandwidth is NCCL's: bytes x 2 (n - 1) / n / time.
2. DDP step time (forward, backward, SGD) of an MLP from 1 to 2 processes,
   the same per-process batch (weak scaling), on tpu and on the CPU; each
   process gets cores / processes threads on both sides.

Ranks are spawned processes with a FileStore. A tool, not a test: the
machine is noisy, compare ratios. The table is printed and written
between this script's markers in docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suite  # noqa: E402

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20]


def _init(rank: int, world: int, store: str, backend: str) -> None:
    import torch.distributed as dist

    dist.init_process_group(backend, init_method="file://" + store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))


def _allreduce_rank(rank: int, world: int, store: str, sizes: list, repeat: int, checks: bool, out) -> None:
    os.environ["TORCH_TPU_DIST_CHECKS"] = "1" if checks else "0"
    import torch
    import torch.distributed as dist

    _init(rank, world, store, "cpu:gloo,tpu:tpu_dist")
    rows = []
    for nbytes in sizes:
        n = nbytes // 4
        cpu = torch.ones(n)
        tpu = torch.ones(n, device="tpu")
        times = {"cpu": [], "tpu": []}
        # Small sizes are dominated by scheduling noise on few cores: more
        # repeats there (they are cheap), fewer for the largest.
        reps = max(3, min(repeat * 4, (64 << 20) * repeat // max(nbytes, 1)))
        for i in range(reps + 1):
            for side, t in (("cpu", cpu), ("tpu", tpu)) if i % 2 else (("tpu", tpu), ("cpu", cpu)):
                dist.barrier()
                start = time.perf_counter()
                dist.all_reduce(t)
                if side == "tpu":
                    torch.tpu.synchronize()
                if i:  # the first round warms up
                    times[side].append(time.perf_counter() - start)
        rows.append((nbytes, statistics.median(times["cpu"]), statistics.median(times["tpu"])))
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


def _mlp():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 2048),
                               torch.nn.GELU(), torch.nn.Linear(2048, 512))


def _ddp_rank(rank: int, world: int, store: str, device: str, steps: int, out) -> None:
    threads = str(max(1, (os.cpu_count() or 1) // world))
    os.environ["TORCH_TPU_NUM_THREADS"] = threads
    import torch
    import torch.distributed as dist

    torch.set_num_threads(int(threads))
    _init(rank, world, store, "tpu_dist" if device == "tpu" else "gloo")
    model = torch.nn.parallel.DistributedDataParallel(_mlp().to(device))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, 512, device=device)
    y = torch.randn(64, 512, device=device)
    times = []
    for i in range(steps + 2):
        dist.barrier()
        start = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        if i >= 2:
            times.append(time.perf_counter() - start)
    if rank == 0:
        out.put(statistics.median(times))
    dist.destroy_process_group()


def _launch(target, world: int, *args):
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="bench_dist_") as d:
        procs = [ctx.Process(target=target, args=(r, world, os.path.join(d, "store"), *args, out)) for r in range(world)]
        for p in procs:
            p.start()
        value = out.get(timeout=1800)
        for p in procs:
            p.join(timeout=120)
    return value


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="sizes up to 16 MiB, fewer repeats")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    sizes = SIZES[:-1] if args.quick else SIZES
    repeat = 5 if args.quick else 11
    steps = 5 if args.quick else 15

    checked = _launch(_allreduce_rank, 2, sizes, repeat, True)
    unchecked = _launch(_allreduce_rank, 2, sizes, repeat, False)
    # The run without the argument exchange is a second launch, with its
    # own gloo times: its ratio is against those, shown beside it.
    lines = ["| size | gloo (CPU) ms | tpu_dist ms | ratio | gloo bus GB/s | tpu_dist bus GB/s | "
             "second run: gloo ms | tpu_dist without checks ms | ratio |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (nbytes, cpu, tpu), (_, cpu2, tpu2) in zip(checked, unchecked):
        bus = nbytes * 2 * (2 - 1) / 2
        size = f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"
        lines.append(f"| {size} | {cpu * 1e3:.2f} | {tpu * 1e3:.2f} | {tpu / cpu:.2f} | {bus / cpu / 1e9:.2f} | "
                     f"{bus / tpu / 1e9:.2f} | {cpu2 * 1e3:.2f} | {tpu2 * 1e3:.2f} | {tpu2 / cpu2:.2f} |")
    ddp = {(dev, w): _launch(_ddp_rank, w, dev, steps) for dev in ("cpu", "tpu") for w in (1, 2)}
    lines += ["", "| DDP step, MLP 512-2048-2048-512, batch 64 per process | 1 process ms | 2 processes ms | "
              "2 / 1 |", "|---|---:|---:|---:|"]
    for dev, name in (("cpu", "CPU (gloo)"), ("tpu", "tpu (tpu_dist)")):
        one, two = ddp[(dev, 1)], ddp[(dev, 2)]
        lines.append(f"| {name} | {one * 1e3:.1f} | {two * 1e3:.1f} | {two / one:.2f} |")
    lines.append(f"| tpu / CPU | {ddp[('tpu', 1)] / ddp[('cpu', 1)]:.2f} | {ddp[('tpu', 2)] / ddp[('cpu', 2)]:.2f} | |")
    import torch

    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    head = (f"Run {when} with `python benchmarks/bench_dist.py{' --quick' if args.quick else ''}`. Machine: "
            f"{platform.machine()}, {suite.cpu_description()}; torch {torch.__version__}. 2 ranks on this host "
            "(loopback TCP); ratios are tpu_dist / gloo.")
    text = head + "\n\n" + "\n".join(lines)
    print(text)
    if not args.no_write:
        suite.write_section("dist", "bench_dist.py: tpu_dist against gloo", text, at_end=True)


if __name__ == "__main__":
    main()
