"""Rank bodies for test_async.py: async_op=True collectives leave the host
free (NCCL's behaviour), order later work on their stream, and fail through
the stream when a peer dies.

The non-blocking checks are ordering arguments, not timings: a rank goes on
to a point the other rank waits for (a store key) only after its call or
its wait() returned. A call that blocked until the other rank joined would
deadlock the pair, and the group's timeout would fail the test."""
import os
import signal
import time

import torch
import torch.distributed as dist


def _store() -> dist.Store:
    return dist.distributed_c10d._get_default_store()


def no_host_block(rank: int, world: int) -> dict:
    store = _store()
    out = {}
    t = torch.full((1000,), float(rank + 1), device="tpu")
    total = float(sum(range(1, world + 1)))
    if rank == 0:
        w = dist.all_reduce(t, async_op=True)
        store.set("issued", "1")  # the call returned before rank 1 joined
        u = t + 1  # no wait(): later work on the stream waits anyway
        w.wait()
        store.set("waited", "1")  # so did wait()
        out["value"] = t[:3].cpu().tolist() == [total] * 3
        out["later_work"] = u[:3].cpu().tolist() == [total + 1] * 3
        out["completed"] = w.is_completed() and w.is_success() and w.exception() is None
    else:
        store.wait(["issued", "waited"])
        dist.all_reduce(t)
        out["value"] = t[:3].cpu().tolist() == [total] * 3
        out["later_work"] = out["completed"] = True
    return out


def other_stream_waits(rank: int, world: int) -> dict:
    """wait() on a side stream orders the side stream after the collective;
    the post-processing (an average, a non-contiguous tensor) runs first."""
    store = _store()
    nc = torch.full((8, 4), float(rank + 1), device="tpu").t()
    issuer = torch.tpu.current_stream()
    if rank == 0:
        w = dist.all_reduce(nc, op=dist.ReduceOp.AVG, async_op=True)
        side = torch.tpu.Stream()
        with torch.tpu.stream(side):
            w.wait()
            r = nc * 10  # on the side stream, after the collective
        store.set("issued", "1")
        side.synchronize()
    else:
        store.wait(["issued"])
        dist.all_reduce(nc, op=dist.ReduceOp.AVG)
        r = nc * 10
    issuer.synchronize()
    avg = sum(range(1, world + 1)) / world
    return {"side": bool((r.cpu() == avg * 10).all()), "tensor": bool((nc.cpu() == avg).all())}


def futures_and_many(rank: int, world: int) -> dict:
    out = {}
    total = float(sum(range(1, world + 1)))
    # A then-callback that synchronizes the issuing stream runs after the
    # signal is set: it does not wait for itself.
    f_t = torch.full((5,), float(rank + 1), device="tpu")
    fut = dist.all_reduce(f_t, async_op=True).get_future()
    chained = fut.then(lambda f: f.value()[0].sum().item())
    out["then_item"] = chained.wait() == 5 * total
    # Many in flight on several dtypes and collectives, waited in reverse.
    ts = [torch.full((64,), float(i + rank), device="tpu") for i in range(6)]
    gathered = torch.empty(world * 64, device="tpu")
    works = [dist.all_reduce(x, async_op=True) for x in ts]
    works.append(dist.all_gather_into_tensor(gathered, ts[0], async_op=True))
    b = torch.arange(10, device="tpu") + rank
    works.append(dist.broadcast(b, src=world - 1, async_op=True))
    for w in reversed(works):
        w.wait()
    out["many"] = all(x[0].item() == float(world * i + sum(range(world))) for i, x in enumerate(ts))
    # all_gather_into_tensor was queued after ts[0]'s all_reduce: it sees the sum.
    out["gather_order"] = gathered.cpu().tolist() == [float(sum(range(world)))] * (64 * world)
    out["broadcast"] = b.cpu().tolist() == (torch.arange(10) + world - 1).tolist()
    # A synchronous call after async ones keeps program order across ranks.
    s = torch.full((3,), float(rank), device="tpu")
    w = dist.all_reduce(s, async_op=True)
    dist.all_reduce(s)  # in order: it reduces the first one's sums
    w.wait()
    out["sync_after_async"] = s.cpu().tolist() == [float(world * sum(range(world)))] * 3
    # The Work keeps its tensor alive when the caller drops both.
    dist.all_reduce(torch.full((1 << 16,), 1.0, device="tpu"), async_op=True)
    junk = [torch.full((1 << 16,), 7.0, device="tpu") for _ in range(4)]
    torch.tpu.synchronize()
    del junk
    return out


def mismatch(rank: int, world: int) -> dict:
    """Mismatched sizes in an async call: every rank's stream fails with a
    DistBackendError naming the collective; the group stays usable."""
    t = torch.ones(4 + rank, device="tpu")
    w = dist.all_reduce(t, async_op=True)
    try:
        w.wait()  # raises if the failure is known already; else the stream does
        t.cpu()
        kind, message = None, ""
    except Exception as e:  # noqa: BLE001  (reported to the test)
        kind, message = type(e).__name__, str(e)
    ok = torch.ones(4, device="tpu")
    dist.all_reduce(ok)
    return {"kind": kind, "message": message, "exception": type(w.exception()).__name__,
            "after": ok.cpu().tolist() == [float(world)] * 4}


def killed_async(rank: int, world: int) -> dict:
    """The last rank dies; the others' async all_reduce fails through the
    stream within the timeout, and is_completed() turns true."""
    t = torch.ones(4, device="tpu")
    dist.all_reduce(t)
    if rank == world - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)
    start = time.monotonic()
    w = dist.all_reduce(t, async_op=True)
    issued = time.monotonic() - start
    try:
        w.wait()
        t.cpu()
        kind, message = None, ""
    except Exception as e:  # noqa: BLE001
        kind, message = type(e).__name__, str(e)
    return {"issued": issued, "elapsed": time.monotonic() - start, "kind": kind, "message": message,
            "completed": w.is_completed(), "exception": type(w.exception()).__name__}


def debug_mode_without_wait(rank: int, world: int) -> dict:
    """Debug mode (TPU_LAUNCH_BLOCKING=1): an async call completes before
    it returns, post-processing included (an average of a non-contiguous
    tensor), so reading it without wait() is right."""
    nc = torch.full((8, 4), float(rank + 1), device="tpu").t()
    w = dist.all_reduce(nc, op=dist.ReduceOp.AVG, async_op=True)
    value = nc.cpu()
    avg = sum(range(1, world + 1)) / world
    return {"mode": torch.tpu.get_mode(), "value": bool((value == avg).all()), "completed": w.is_completed()}


def queued_chain(rank: int, world: int) -> dict:
    """Async calls queued behind each other on rank 0, each joined late by
    rank 1 but within the timeout: none fails, though the last starts long
    after the stream's deadline would have passed had it counted from the
    call (the deadline's slack is set to 0 here so that the chain is short:
    2 x 1 s, against a chain of about 3 s)."""
    from torch_tpu.distributed.process_group import ProcessGroupTPU

    ProcessGroupTPU._DEADLINE_SLACK_S = 0.0
    ts = [torch.full((16,), float(rank + i), device="tpu") for i in range(5)]
    if rank == 0:
        works = [dist.all_reduce(t, async_op=True) for t in ts]
        for w in works:
            w.wait()
    else:
        for t in ts:
            time.sleep(0.6)
            dist.all_reduce(t)
    values = [t[0].item() for t in ts]
    return {"values": values == [float(world * i + sum(range(world))) for i in range(5)]}


def kernel_error_before(rank: int, world: int, async_op: bool, barrier: bool) -> dict:
    """Rank 0 queues a kernel that fails (an index out of range), then a
    collective: every rank raises at once (not after the timeout), rank 0
    naming its kernel error, and the group works on."""
    x = torch.randn(3, 5, device="tpu")
    t = torch.ones(4, device="tpu")
    start = time.monotonic()
    if rank == 0:
        x.index_select(1, torch.tensor([0, 5], device="tpu"))
    try:
        if barrier:
            dist.barrier()
        else:
            w = dist.all_reduce(t, async_op=async_op)
            if async_op:
                w.wait()
            t.cpu()
        kind, message = None, ""
    except Exception as e:  # noqa: BLE001  (reported to the test)
        kind, message = type(e).__name__, str(e)
    elapsed = time.monotonic() - start
    torch.tpu.synchronize()  # reported once: nothing left on the stream
    ok = torch.ones(4, device="tpu")
    dist.all_reduce(ok)
    return {"kind": kind, "message": message, "elapsed": elapsed, "after": ok.cpu().tolist() == [float(world)] * 4}


def failure_reported_once(rank: int, world: int) -> dict:
    """A failure that wait() raised is not raised again by the stream."""
    t = torch.ones(4 + rank, device="tpu")
    w = dist.all_reduce(t, async_op=True)
    kinds = []
    for _ in range(2):
        try:
            w.wait()
            torch.tpu.synchronize()
            kinds.append(None)
        except Exception as e:  # noqa: BLE001
            kinds.append(type(e).__name__)
    try:
        torch.tpu.synchronize()
        after = None
    except Exception as e:  # noqa: BLE001
        after = type(e).__name__
    return {"kinds": kinds, "after": after, "exception": type(w.exception()).__name__}


def threads_and_memory(rank: int, world: int) -> dict:
    """Groups made and destroyed stop their communication threads; a
    finished async call does not keep its tensor alive in the thread."""
    import threading

    t = torch.ones(1 << 20, device="tpu")
    dist.all_reduce(t, async_op=True).wait()
    torch.tpu.synchronize()
    base_threads = threading.active_count()
    for _ in range(4):
        g = dist.new_group(list(range(world)))
        dist.all_reduce(torch.ones(8, device="tpu"), group=g, async_op=True).wait()
        dist.destroy_process_group(g)
    threads_after = threading.active_count()
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    big = torch.ones(1 << 22, device="tpu")  # 16 MiB
    dist.all_reduce(big, async_op=True).wait()
    # The thread may still be leaving the job (it sets the signal first);
    # a synchronous call runs after it has.
    dist.barrier()
    del big
    import gc

    gc.collect()
    freed = torch.tpu.memory_allocated() <= before
    return {"threads": threads_after <= base_threads, "freed": freed}


def leaf_and_expanded(rank: int, world: int, async_op: bool) -> dict:
    """A leaf that requires grad is reduced in place (AVG: the division is
    post-processing), as with NCCL; an expanded tensor is refused on every
    rank, and neither leaves a stream waiting."""
    p = torch.full((4,), float(rank + 1), device="tpu", requires_grad=True)
    w = dist.all_reduce(p, op=dist.ReduceOp.AVG, async_op=async_op)
    if async_op:
        w.wait()
    out = {"leaf": p.detach().cpu().tolist() == [sum(range(1, world + 1)) / world] * 4}
    e = torch.ones(1, device="tpu").expand(4)
    try:
        dist.all_reduce(e, async_op=async_op)
        out["expanded"] = None
    except Exception as err:  # noqa: BLE001
        out["expanded"] = f"{type(err).__name__}: {err}"
    ok = torch.ones(4, device="tpu")
    dist.all_reduce(ok, async_op=async_op)
    out["after"] = ok.cpu().tolist() == [float(world)] * 4  # no stream left waiting
    return out


def chain_after_kernel_error(rank: int, world: int) -> dict:
    """Rank 0 queues a kernel error, then 10 async calls: the first fails
    on every rank, the others run; the stream reports the first failure
    once, rooted in the kernel error, without nesting."""
    x = torch.randn(3, 5, device="tpu")
    if rank == 0:
        x.index_select(1, torch.tensor([0, 5], device="tpu"))
    ts = [torch.full((8,), float(rank + i), device="tpu") for i in range(10)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    errors = []
    for _ in range(3):
        try:
            torch.tpu.synchronize()
        except Exception as e:  # noqa: BLE001
            errors.append(str(e))
    dist.barrier()  # the thread is done with every job
    ok = [w.exception() is None for w in works]
    values = [t[0].item() == float(world * i + sum(range(world))) for i, t in enumerate(ts)]
    return {"errors": errors, "ok": ok, "values": values}


def huge_timeout(rank: int, world: int) -> dict:
    """A group whose timeout is past gloo's nanosecond range (2,700 years)
    works: such a timeout means "never"."""
    import datetime

    g = dist.new_group(list(range(world)), timeout=datetime.timedelta(days=1e6))
    t = torch.ones(4, device="tpu")
    dist.all_reduce(t, group=g)
    dist.all_reduce(t, group=g, async_op=True).wait()
    return {"value": t.cpu().tolist() == [float(world * world)] * 4}


def side_stream_failure_once(rank: int, world: int) -> dict:
    """wait() on a side stream before the failure is known orders the side
    stream; the failure is raised once, by the issuing stream."""
    store = _store()
    issuer = torch.tpu.current_stream()
    t = torch.ones(4 + rank, device="tpu")
    if rank == 0:
        w = dist.all_reduce(t, async_op=True)
        side = torch.tpu.Stream()
        with torch.tpu.stream(side):
            w.wait()  # the failure is not known yet: rank 1 has not called
        store.set("waited", "1")
    else:
        store.wait(["waited"])
        w = dist.all_reduce(t, async_op=True)
        side = torch.tpu.Stream()
    raised = []
    for s in (side, issuer, issuer):
        try:
            s.synchronize()
            raised.append(None)
        except Exception as e:  # noqa: BLE001
            raised.append(type(e).__name__)
    return {"raised": raised}
