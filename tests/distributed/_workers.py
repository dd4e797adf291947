"""Rank bodies for the tpu_dist tests (spawned by _launch.run_ranks)."""
import datetime
import os
import signal
import time

import torch
import torch.distributed as dist


def _ok_after(world: int) -> bool:
    """The group still works: an all_reduce gives the right answer."""
    t = torch.ones(3, device="tpu")
    dist.all_reduce(t)
    return t.cpu().tolist() == [float(world)] * 3


# -- backend selection and chips ---------------------------------------------


def selection(rank: int, world: int, workdir: str) -> dict:
    out = {"current_device": torch.tpu.current_device()}
    specs = [None, "tpu_dist", "cpu:gloo,tpu:tpu_dist", "tpu:tpu_dist,cpu:gloo"]
    for i, spec in enumerate(specs):
        dist.init_process_group(backend=spec, init_method=f"file://{workdir}/store{i}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=30))
        pg = dist.distributed_c10d._get_default_group()
        t = torch.full((4,), float(rank + 1), device="tpu")
        dist.all_reduce(t)
        c = torch.full((2,), rank + 1, dtype=torch.int64)
        dist.all_reduce(c)
        objs = [None] * world
        dist.all_gather_object(objs, {"rank": rank})
        dist.barrier()
        out[str(spec)] = {
            "type": type(pg).__name__,
            "config": dist.get_backend_config(),
            "name": pg.name(),
            "tpu": t.cpu().tolist(),
            "cpu": c.tolist(),
            "objects": objs,
            "device_after_init": torch.tpu.current_device(),
        }
        dist.destroy_process_group()
    return out


# -- argument errors -----------------------------------------------------------


def _error_of(fn) -> tuple:
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e).__name__, str(e)
    return None, None


def errors(rank: int, world: int) -> dict:
    out = {}
    dev = "tpu"
    # A tensor on a device tpu_dist does not serve, on one rank only.
    bad = torch.empty(3, device="meta") if rank == 1 else torch.ones(3, device=dev)
    out["wrong_device"] = _error_of(lambda: dist.all_reduce(bad))
    out["ok_after_wrong_device"] = _ok_after(world)
    # Input on tpu, outputs on the CPU.
    out["mixed_devices"] = _error_of(lambda: dist.all_gather([torch.empty(2) for _ in range(world)],
                                                               torch.ones(2, device=dev)))
    # Sizes that differ across ranks (gloo would abort the process).
    out["size_mismatch"] = _error_of(lambda: dist.all_reduce(torch.ones(4 * (rank + 1), device=dev)))
    out["dtype_mismatch"] = _error_of(lambda: dist.broadcast(
        torch.ones(4, device=dev, dtype=torch.float32 if rank == 0 else torch.int32), src=0))
    out["root_mismatch"] = _error_of(lambda: dist.broadcast(torch.ones(4, device=dev), src=rank))
    # Different collectives on different ranks.
    out["divergent"] = _error_of(lambda: dist.all_reduce(torch.ones(2, device=dev)) if rank == 0
                                 else dist.broadcast(torch.ones(2, device=dev), src=0))
    # Split sizes that do not match what the other rank expects.
    inp = torch.arange(4.0, device=dev)
    outp = torch.empty(4, device=dev)
    splits = [1, 3] if rank == 0 else [2, 2]
    out["a2a_splits"] = _error_of(lambda: dist.all_to_all_single(outp, inp, splits, splits))
    out["ag_tensor_size"] = _error_of(lambda: dist.all_gather_into_tensor(torch.empty(3, device=dev),
                                                                          torch.ones(2, device=dev)))
    out["bool_avg"] = _error_of(lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool, device=dev),
                                                        op=dist.ReduceOp.AVG))
    out["ok_after_mismatches"] = _ok_after(world)
    # A receive smaller than what was sent: an error on the receiver.
    if rank == 0:
        dist.send(torch.arange(8.0, device=dev), 1)
        out["recv_mismatch"] = (None, None)
    else:
        out["recv_mismatch"] = _error_of(lambda: dist.recv(torch.empty(4, device=dev), 0))
    out["ok_after_recv_mismatch"] = _ok_after(world)
    return out


# -- async handles and stream order --------------------------------------------


def handles(rank: int, world: int) -> dict:
    out = {}
    # wait(): the stream waits (as with NCCL); once the result has been
    # read on the host, the Work is complete.
    t = torch.full((1000,), float(rank + 1), device="tpu")
    w = dist.all_reduce(t, async_op=True)
    out["wait"] = w.wait()
    total = float(sum(range(1, world + 1)))
    out["wait_value"] = t[:3].cpu().tolist() == [total] * 3
    out["completed_after_wait"] = w.is_completed()
    out["success"] = w.is_success()
    out["exception"] = w.exception()

    # is_completed() alone, on a non-contiguous tensor (copied back on completion).
    nc = torch.full((8, 4), float(rank + 1), device="tpu").t()
    w = dist.all_reduce(nc, async_op=True)
    deadline = time.monotonic() + 20
    while not w.is_completed() and time.monotonic() < deadline:
        time.sleep(0.001)
    out["poll_value"] = bool((nc.cpu() == total).all())

    # get_future(): completes with the tpu tensors; then-callbacks chain.
    f_t = torch.full((5,), float(rank + 1), device="tpu")
    fut = dist.all_reduce(f_t, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2)
    value = fut.wait()
    out["future_device"] = str(value[0].device)
    out["future_value"] = value[0].cpu().tolist() == [total] * 5
    out["future_then"] = doubled.wait().cpu().tolist() == [2 * total] * 5

    # get_future() on a non-contiguous tensor: the copy back is queued from
    # gloo's callback thread, on the issuing stream.
    nf = torch.full((6, 3), float(rank + 1), device="tpu").t()
    value = dist.all_reduce(nf, async_op=True).get_future().wait()
    out["future_noncontiguous"] = bool((value[0].cpu() == total).all()) and bool((nf.cpu() == total).all())

    # Many in flight, waited in reverse order.
    ts = [torch.full((64,), float(i + rank), device="tpu") for i in range(6)]
    ws = [dist.all_reduce(x, async_op=True) for x in ts]
    for w in reversed(ws):
        w.wait()
    out["many"] = all(x[0].item() == float(world * i + sum(range(world))) for i, x in enumerate(ts))

    # The Work keeps its tensor alive: dropped by the caller, reused memory
    # does not change the result.
    w = dist.all_reduce(torch.full((1 << 16,), float(rank + 1), device="tpu"), async_op=True)
    junk = [torch.full((1 << 16,), 7.0, device="tpu") for _ in range(4)]
    w.wait()
    out["kept_alive"] = w.result()[0][:2].cpu().tolist() == [total] * 2
    del junk

    # Stream order: the input is still being computed when the collective is
    # called; the result is used by work queued right after.
    a = torch.full((256, 256), 1.0 / 256, device="tpu")
    x = a
    for _ in range(20):
        x = x @ a  # each step keeps the value: 256 x (1/256 x 1/256) = 1/256
    dist.all_reduce(x)
    y = x * 2
    out["stream_order"] = bool(torch.allclose(y.cpu(), torch.full((256, 256), 2.0 * world / 256)))

    # On a side stream: the collective orders with the current stream.
    s = torch.tpu.Stream()
    with torch.tpu.stream(s):
        z = torch.full((128,), float(rank), device="tpu") + 1
        dist.all_reduce(z)
        z2 = z + 0
    s.synchronize()
    out["side_stream"] = z2[:2].cpu().tolist() == [total] * 2

    # barrier after queued work, async barrier.
    out["barrier_async"] = dist.barrier(async_op=True).wait()
    return out


# -- failures ----------------------------------------------------------------


def straggler(rank: int, world: int, pg_timeout: float) -> dict:
    """Rank 1 stops calling collectives; the others must raise in time."""
    t = torch.ones(4, device="tpu")
    dist.all_reduce(t)
    if rank == 1:
        time.sleep(pg_timeout + 3)
        return {"slept": True}
    start = time.monotonic()
    kind, message = _error_of(lambda: dist.all_reduce(t))
    return {"elapsed": time.monotonic() - start, "kind": kind, "message": message}


def killed(rank: int, world: int) -> dict:
    """The last rank dies after one collective; the others must raise in time."""
    t = torch.ones(4, device="tpu")
    dist.all_reduce(t)
    dist.broadcast(t, src=0)
    if rank == world - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)  # let it die
    start = time.monotonic()
    kind, message = _error_of(lambda: dist.all_reduce(t))
    return {"elapsed": time.monotonic() - start, "kind": kind, "message": message}


# -- DDP -----------------------------------------------------------------------


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 32),
        torch.nn.Tanh(), torch.nn.Linear(32, 4),
    )


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(20, 64, 16, generator=g), torch.randn(20, 64, 4, generator=g)


def ddp(rank: int, world: int, steps: int) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    xs, ys = _data()
    per = xs.shape[1] // world
    model = DDP(_model().to("tpu"), bucket_cap_mb=0.002)  # several buckets
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for step in range(steps):
        x = xs[step, rank * per : (rank + 1) * per].to("tpu")
        y = ys[step, rank * per : (rank + 1) * per].to("tpu")
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        losses.append(avg.item())
    out = {"losses": losses, "params": [p.detach().cpu() for p in model.module.parameters()]}
    if rank == 0:
        # The same model trained in one process on the full batch.
        ref = _model().to("tpu")
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        ref_losses = []
        for step in range(steps):
            loss = torch.nn.functional.mse_loss(ref(xs[step].to("tpu")), ys[step].to("tpu"))
            ref_opt.zero_grad()
            loss.backward()
            ref_opt.step()
            ref_losses.append(loss.item())
        out["ref_losses"] = ref_losses
        out["ref_params"] = [p.detach().cpu() for p in ref.parameters()]
    return out


def irecv_then_barrier(rank: int, world: int) -> bool:
    """The receiver blocks elsewhere before waiting: the send still goes out."""
    t = torch.arange(5.0, device="tpu")
    if rank == 0:
        dist.send(t, 1)
        dist.barrier()
        return True
    r = torch.empty(5, device="tpu")
    req = dist.irecv(r, 0)
    dist.barrier()
    req.wait()
    return r.cpu().tolist() == t.cpu().tolist()


# -- FSDP2 and DTensor on a tpu DeviceMesh --------------------------------------


def _small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 2))


def _small_batch(step: int):
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 8, generator=g), torch.randn(8, 2, generator=g)


def fsdp2_dtensor(rank: int, world: int, steps: int) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("tpu", (world,))
    out = {}
    full = torch.arange(16.0).reshape(4, 4)
    d = distribute_tensor(full.to("tpu"), mesh, [Shard(0)])
    out["dtensor_local"] = d.to_local().cpu()
    out["dtensor_replicate"] = d.redistribute(mesh, [Replicate()]).to_local().cpu()
    out["dtensor_sum"] = (d * 2).sum().full_tensor().item()

    model = _small_model().to("tpu")
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    per = 8 // world
    losses = []
    for step in range(steps):
        x, y = _small_batch(step)
        loss = torch.nn.functional.mse_loss(model(x[rank * per : (rank + 1) * per].to("tpu")),
                                            y[rank * per : (rank + 1) * per].to("tpu"))
        loss.backward()
        opt.step()
        opt.zero_grad()
        avg = loss.detach().clone()
        dist.all_reduce(avg, op=dist.ReduceOp.AVG)
        losses.append(avg.item())
    out["losses"] = losses
    out["params"] = [p.full_tensor().cpu() for p in model.parameters()]
    if rank == 0:
        ref = _small_model().to("tpu")
        ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.01)
        ref_losses = []
        for step in range(steps):
            x, y = _small_batch(step)
            loss = torch.nn.functional.mse_loss(ref(x.to("tpu")), y.to("tpu"))
            loss.backward()
            ref_opt.step()
            ref_opt.zero_grad()
            ref_losses.append(loss.item())
        out["ref_losses"] = ref_losses
        out["ref_params"] = [p.detach().cpu() for p in ref.parameters()]
    return out


def subgroups(rank: int, world: int) -> dict:
    """new_group and a 2 x 2 DeviceMesh: group ranks, global src."""
    from torch.distributed.device_mesh import init_device_mesh

    g = dist.new_group([0, 2])
    h = dist.new_group([1, 3])
    mine = g if rank in (0, 2) else h
    t = torch.full((2,), float(rank), device="tpu")
    dist.all_reduce(t, group=mine)
    b = torch.full((2,), float(rank), device="tpu")
    dist.broadcast(b, src=2 if rank in (0, 2) else 3, group=mine)
    mesh = init_device_mesh("tpu", (2, 2))
    rows = torch.full((1,), float(rank), device="tpu")
    dist.all_reduce(rows, group=mesh.get_group(1))
    return {"new_group": t.cpu().tolist(), "broadcast": b.cpu().tolist(), "mesh_dim1": rows.cpu().tolist()}


# -- exit ------------------------------------------------------------------------


def released_at_shutdown(rank: int, world: int) -> dict:
    """Blocking collectives (tpu and cpu tensors, with their argument
    exchanges), then the group's shutdown: gloo's worker threads hold none
    of the tensors handed to them, so none of them will need the GIL while
    the interpreter finalizes (test_exit.py)."""
    pg = dist.distributed_c10d._get_default_group()
    t = torch.full((1 << 12,), float(rank + 1), device="tpu")
    c = torch.full((4,), float(rank + 1))
    for _ in range(3):
        dist.all_reduce(t)
        dist.all_reduce(c)
    outs = [torch.empty_like(c) for _ in range(world)]
    dist.all_gather(outs, c)
    pg.shutdown()
    return dict(held=len(pg._gloo._held), t=t[0].item(), c=c[0].item(), outs=[o[0].item() for o in outs])
