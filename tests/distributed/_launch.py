"""Runs a worker function on N ranks, each in its own spawned process, with
a hard deadline: a rank that hangs is killed and the test fails instead of
hanging CI.

Each rank calls ``init_process_group`` on a FileStore (or, with
``init=False``, leaves that to the worker), runs ``worker(rank, world,
*args)`` and writes what it returned, or its traceback, to a file the
parent reads. The children inherit the parent's environment (so the chip
count and the execution mode of the pytest session) plus ``env``.
"""
import datetime
import multiprocessing
import os
import pickle
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, List, Optional


def _child(worker: Callable, rank: int, world: int, workdir: str, env: Dict[str, str], init: Optional[dict],
           args: tuple) -> None:
    os.environ.update(env)
    result_path = os.path.join(workdir, f"result.{rank}")
    try:
        import torch  # noqa: F401  (autoloads torch_tpu)
        import torch.distributed as dist

        if init is not None:
            dist.init_process_group(
                backend=init.get("backend"),
                init_method="file://" + os.path.join(workdir, "store"),
                rank=rank,
                world_size=world,
                timeout=datetime.timedelta(seconds=init.get("timeout", 30)),
            )
        value = ("ok", worker(rank, world, *args))
        if init is not None and dist.is_initialized():
            dist.destroy_process_group()
    except BaseException:  # noqa: B036  (reported to the parent, whatever it is)
        value = ("error", traceback.format_exc())
    with open(result_path + ".tmp", "wb") as f:
        pickle.dump(value, f)
    os.replace(result_path + ".tmp", result_path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no interpreter teardown: a broken group must not hang the exit


class RankResults(list):
    """(status, value) per rank; status "ok", "error" (value: traceback)
    or "died" (value: exit code)."""

    def values(self) -> List[Any]:
        errors = [f"rank {r}: {v}" for r, (s, v) in enumerate(self) if s != "ok"]
        if errors:
            raise AssertionError("\n".join(errors))
        return [v for _, v in self]


def run_ranks(
    worker: Callable,
    world: int,
    *args: Any,
    timeout: float = 60,
    env: Optional[dict] = None,
    init: Optional[dict] = None,
    backend: Optional[str] = None,
    pg_timeout: float = 30,
) -> RankResults:
    """Runs ``worker`` on ``world`` ranks and returns their results.

    ``env``: variables for every rank, or {rank: variables}. ``init``: False
    to skip init_process_group, else it uses ``backend`` (None: c10d's
    default for the machine) and ``pg_timeout`` seconds."""
    ctx = multiprocessing.get_context("spawn")
    init_opts = None if init is False else {"backend": backend, "timeout": pg_timeout}
    with tempfile.TemporaryDirectory(prefix="tpu_dist_") as workdir:
        env = env or {}
        per_rank = env if env and all(isinstance(k, int) for k in env) else {r: env for r in range(world)}
        procs = [
            ctx.Process(target=_child, args=(worker, r, world, workdir, per_rank.get(r, {}), init_opts, args),
                        daemon=True)
            for r in range(world)
        ]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        if hung:
            raise AssertionError(f"ranks {hung} did not finish within {timeout} s (killed)")
        results = RankResults()
        for r, p in enumerate(procs):
            path = os.path.join(workdir, f"result.{r}")
            if os.path.exists(path):
                with open(path, "rb") as f:
                    results.append(pickle.load(f))
            else:
                results.append(("died", p.exitcode))
        return results
