"""Every collective against its definition, run inside each rank.

Each rank builds every rank's input from a seed (so it knows what the
others pass), runs the collective on tpu tensors, and compares the result,
copied to the CPU, with the definition computed on the CPU from those
inputs. Values are small integers (halves for floats), so every result is
exact in every dtype and the comparison is ``torch.equal``.
"""
import zlib
from typing import Callable, List

import torch
import torch.distributed as dist

R = dist.ReduceOp
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.uint8, torch.bool]
REDUCE_OPS = [R.SUM, R.AVG, R.MIN, R.MAX, R.PRODUCT]
BITWISE = [R.BAND, R.BOR, R.BXOR]


def make(tag: str, rank: int, shape, dtype: torch.dtype, op=None, device="tpu", layout="contiguous") -> torch.Tensor:
    """Rank ``rank``'s input for check ``tag``: the same on every rank."""
    g = torch.Generator().manual_seed(zlib.crc32(f"{tag}/{rank}/{dtype}/{op}".encode()))
    if dtype == torch.bool:
        lo, hi = 0, 2
    elif op == R.PRODUCT:
        lo, hi = (0, 3) if dtype == torch.uint8 else (-2, 3)
    elif dtype == torch.uint8:
        lo, hi = 0, 5
    elif dtype == torch.int8:
        lo, hi = -4, 5
    else:
        lo, hi = -9, 10
    if layout == "transposed":
        shape = tuple(reversed(shape))
    x = torch.randint(lo, hi, shape, generator=g)
    x = (x.double() / 2).to(dtype) if dtype.is_floating_point else x.to(dtype)
    x = x.to(device)
    return x.t() if layout == "transposed" else x


def reduce_def(xs: List[torch.Tensor], op, dtype: torch.dtype) -> torch.Tensor:
    """The reduction over ranks, as NCCL defines it (bool SUM is a logical or)."""
    s = torch.stack([x.cpu() for x in xs])
    if op in BITWISE:
        fn = {R.BAND: torch.bitwise_and, R.BOR: torch.bitwise_or, R.BXOR: torch.bitwise_xor}[op]
        out = s[0]
        for x in s[1:]:
            out = fn(out, x)
        return out
    if dtype == torch.bool:
        return s.any(0) if op in (R.SUM, R.MAX) else s.all(0)
    wide = s.double() if dtype.is_floating_point else s.long()
    if op == R.SUM:
        out = wide.sum(0)
    elif op == R.PRODUCT:
        out = wide.prod(0)
    elif op == R.MIN:
        out = wide.amin(0)
    elif op == R.MAX:
        out = wide.amax(0)
    elif op == R.AVG:
        n = len(xs)
        out = wide.sum(0) / n if dtype.is_floating_point else torch.div(wide.sum(0), n, rounding_mode="trunc")
    return out.to(dtype)


class Checker:
    def __init__(self, rank: int, world: int, device: str = "tpu", async_op: bool = False) -> None:
        self.rank, self.world, self.device = rank, world, device
        self.async_op = async_op
        self.failures: List[str] = []
        self.count = 0

    def call(self, collective: Callable, *args, **kwargs) -> None:
        """Runs a collective; asynchronously, the Work is waited for as
        with NCCL (the current stream waits; the results are read later)."""
        self.wait(collective(*args, async_op=self.async_op, **kwargs))

    def wait(self, work) -> None:
        if self.async_op:
            assert work is not None, "async_op=True returned no Work"
            work.wait()

    def expect(self, what: str, got: torch.Tensor, want: torch.Tensor) -> None:
        self.count += 1
        got = got.cpu()
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            self.failures.append(f"rank {self.rank}: {what}: got {got.dtype} {tuple(got.shape)} "
                                 f"{got.flatten()[:8].tolist()}, want {want.dtype} {tuple(want.shape)} "
                                 f"{want.flatten()[:8].tolist()}")

    def guard(self, what: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as e:  # noqa: BLE001  (reported, the other checks go on)
            self.failures.append(f"rank {self.rank}: {what}: raised {type(e).__name__}: {e}")

    def make(self, tag, r, shape, dtype, op=None, layout="contiguous"):
        return make(tag, r, shape, dtype, op, self.device, layout)

    # -- the checks -----------------------------------------------------------

    def all_reduce(self, dtype, op, layout) -> None:
        if dtype == torch.bool and op == R.AVG:
            return
        tag = f"ar/{layout}"
        xs = [make(tag, r, (3, 5), dtype, op, "cpu", layout) for r in range(self.world)]
        t = self.make(tag, self.rank, (3, 5), dtype, op, layout)
        self.call(dist.all_reduce, t, op=op)
        self.expect(f"all_reduce {op} {dtype} {layout}", t, reduce_def(xs, op, dtype))

    def all_reduce_coalesced(self, dtype) -> None:
        shapes = [(4,), (2, 3), ()]
        for op in (R.SUM, R.MAX):
            ts = [self.make(f"arc{i}", self.rank, s, dtype, op) for i, s in enumerate(shapes)]
            with dist._coalescing_manager(async_ops=self.async_op) as cm:
                for t in ts:
                    dist.all_reduce(t, op=op)
            self.wait(cm)
            for i, (s, t) in enumerate(zip(shapes, ts)):
                want = reduce_def([make(f"arc{i}", r, s, dtype, op, "cpu") for r in range(self.world)], op, dtype)
                self.expect(f"coalesced all_reduce {op} {dtype} [{i}]", t, want)

    def broadcast(self, dtype, layout) -> None:
        src = self.world - 1
        t = self.make("bc", self.rank, (4, 3), dtype, layout=layout)
        self.call(dist.broadcast, t, src=src)
        self.expect(f"broadcast {dtype} {layout}", t, make("bc", src, (4, 3), dtype, device="cpu", layout=layout))

    def reduce(self, dtype) -> None:
        dst = 1 % self.world
        for op in (R.SUM, R.MAX, R.AVG) if dtype != torch.bool else (R.SUM, R.MIN):
            t = self.make("rd", self.rank, (7,), dtype, op)
            self.call(dist.reduce, t, dst=dst, op=op)
            xs = [make("rd", r, (7,), dtype, op, "cpu") for r in range(self.world)]
            want = reduce_def(xs, op, dtype) if self.rank == dst else xs[self.rank]
            self.expect(f"reduce {op} {dtype} (rank {self.rank}, dst {dst})", t, want)

    def all_gather(self, dtype, layout) -> None:
        t = self.make("ag", self.rank, (2, 3), dtype, layout=layout)
        outs = [torch.empty_like(t) if layout == "contiguous" else torch.empty(3, 2, dtype=dtype, device=self.device).t()
                for _ in range(self.world)]
        self.call(dist.all_gather, outs, t)
        for r, o in enumerate(outs):
            self.expect(f"all_gather {dtype} {layout} [{r}]", o, make("ag", r, (2, 3), dtype, device="cpu", layout=layout))

    def all_gather_uneven(self, dtype) -> None:
        t = self.make("agu", self.rank, (self.rank + 1,), dtype)
        outs = [torch.empty(r + 1, dtype=dtype, device=self.device) for r in range(self.world)]
        self.call(dist.all_gather, outs, t)
        for r, o in enumerate(outs):
            self.expect(f"all_gather uneven {dtype} [{r}]", o, make("agu", r, (r + 1,), dtype, device="cpu"))

    def all_gather_into_tensor(self, dtype) -> None:
        t = self.make("agt", self.rank, (2, 3), dtype)
        out = torch.empty(self.world * 2, 3, dtype=dtype, device=self.device)
        self.call(dist.all_gather_into_tensor, out, t)
        want = torch.cat([make("agt", r, (2, 3), dtype, device="cpu") for r in range(self.world)])
        self.expect(f"all_gather_into_tensor {dtype}", out, want)
        # Coalesced (FSDP's pattern): several in one coalescing block.
        ins = [self.make(f"agc{i}", self.rank, (i + 1,), dtype) for i in range(2)]
        outs = [torch.empty(self.world * (i + 1), dtype=dtype, device=self.device) for i in range(2)]
        with dist._coalescing_manager(async_ops=self.async_op) as cm:
            for o, i in zip(outs, ins):
                dist.all_gather_into_tensor(o, i)
        self.wait(cm)
        for i, o in enumerate(outs):
            want = torch.cat([make(f"agc{i}", r, (i + 1,), dtype, device="cpu") for r in range(self.world)])
            self.expect(f"coalesced all_gather_into_tensor {dtype} [{i}]", o, want)

    def all_gather_coalesced(self, dtype) -> None:
        ins = [self.make(f"agl{i}", self.rank, (i + 2,), dtype) for i in range(2)]
        outs = [[torch.empty(i + 2, dtype=dtype, device=self.device) for _ in range(self.world)] for i in range(2)]
        self.call(dist.all_gather_coalesced, outs, ins)
        for i, lst in enumerate(outs):
            for r, o in enumerate(lst):
                self.expect(f"all_gather_coalesced {dtype} [{i}][{r}]", o, make(f"agl{i}", r, (i + 2,), dtype, device="cpu"))

    def reduce_scatter(self, dtype, op, uneven=False) -> None:
        if dtype == torch.bool and op == R.AVG:
            return
        sizes = [j + 1 if uneven else 3 for j in range(self.world)]
        tag = f"rs/{uneven}"
        ins = [self.make(f"{tag}/{j}", self.rank, (sizes[j],), dtype, op) for j in range(self.world)]
        out = torch.empty(sizes[self.rank], dtype=dtype, device=self.device)
        self.call(dist.reduce_scatter, out, ins, op=op)
        want = reduce_def([make(f"{tag}/{self.rank}", r, (sizes[self.rank],), dtype, op, "cpu")
                           for r in range(self.world)], op, dtype)
        self.expect(f"reduce_scatter {op} {dtype} uneven={uneven}", out, want)

    def reduce_scatter_tensor(self, dtype, op) -> None:
        if dtype == torch.bool and op == R.AVG:
            return
        t = self.make("rst", self.rank, (self.world * 2, 3), dtype, op)
        out = torch.empty(2, 3, dtype=dtype, device=self.device)
        self.call(dist.reduce_scatter_tensor, out, t, op=op)
        full = reduce_def([make("rst", r, (self.world * 2, 3), dtype, op, "cpu") for r in range(self.world)], op, dtype)
        self.expect(f"reduce_scatter_tensor {op} {dtype}", out, full[2 * self.rank : 2 * self.rank + 2])

    def reduce_scatter_coalesced(self, dtype) -> None:
        ins = [self.make(f"rsc{i}", self.rank, (self.world * (i + 1),), dtype) for i in range(2)]
        outs = [torch.empty(i + 1, dtype=dtype, device=self.device) for i in range(2)]
        with dist._coalescing_manager(async_ops=self.async_op) as cm:
            for o, t in zip(outs, ins):
                dist.reduce_scatter_tensor(o, t)
        self.wait(cm)
        for i, o in enumerate(outs):
            n = i + 1
            full = reduce_def([make(f"rsc{i}", r, (self.world * n,), dtype, None, "cpu") for r in range(self.world)],
                              R.SUM, dtype)
            self.expect(f"coalesced reduce_scatter_tensor {dtype} [{i}]", o, full[n * self.rank : n * (self.rank + 1)])

    def all_to_all(self, dtype) -> None:
        # Rank r sends r + j + 1 elements to rank j.
        ins = [self.make(f"a2a/{self.rank}->{j}", 0, (self.rank + j + 1,), dtype) for j in range(self.world)]
        outs = [torch.empty(j + self.rank + 1, dtype=dtype, device=self.device) for j in range(self.world)]
        self.call(dist.all_to_all, outs, ins)
        for j, o in enumerate(outs):
            self.expect(f"all_to_all {dtype} from {j}", o, make(f"a2a/{j}->{self.rank}", 0, (j + self.rank + 1,), dtype,
                                                                device="cpu"))

    def all_to_all_single(self, dtype, splits: bool) -> None:
        if splits:
            in_splits = [self.rank + j + 1 for j in range(self.world)]
            out_splits = [j + self.rank + 1 for j in range(self.world)]
        else:
            in_splits = out_splits = [2] * self.world
        t = self.make(f"a2as/{splits}", self.rank, (sum(in_splits), 3), dtype)
        out = torch.empty(sum(out_splits), 3, dtype=dtype, device=self.device)
        self.call(dist.all_to_all_single, out, t, out_splits if splits else None, in_splits if splits else None)
        parts = []
        for j in range(self.world):
            src_splits = [j + k + 1 for k in range(self.world)] if splits else [2] * self.world
            full = make(f"a2as/{splits}", j, (sum(src_splits), 3), dtype, device="cpu")
            start = sum(src_splits[: self.rank])
            parts.append(full[start : start + src_splits[self.rank]])
        self.expect(f"all_to_all_single {dtype} splits={splits}", out, torch.cat(parts))

    def gather_scatter(self, dtype) -> None:
        root = 0
        t = self.make("ga", self.rank, (5,), dtype)
        outs = [torch.empty(5, dtype=dtype, device=self.device) for _ in range(self.world)] if self.rank == root else None
        self.call(dist.gather, t, outs, dst=root)
        if self.rank == root:
            for r, o in enumerate(outs):
                self.expect(f"gather {dtype} [{r}]", o, make("ga", r, (5,), dtype, device="cpu"))
        ins = [self.make("sc", j, (4,), dtype) for j in range(self.world)] if self.rank == root else None
        out = torch.empty(4, dtype=dtype, device=self.device)
        self.call(dist.scatter, out, ins, src=root)
        self.expect(f"scatter {dtype}", out, make("sc", self.rank, (4,), dtype, device="cpu"))

    def send_recv(self, dtype) -> None:
        nxt, prv = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        t = self.make("p2p", self.rank, (6,), dtype)
        r = torch.empty(6, dtype=dtype, device=self.device)
        ops = [dist.P2POp(dist.irecv, r, prv), dist.P2POp(dist.isend, t, nxt)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        self.expect(f"batch_isend_irecv {dtype}", r, make("p2p", prv, (6,), dtype, device="cpu"))
        # Blocking send/recv between ranks 0 and 1, two messages on one tag.
        if self.rank in (0, 1):
            peer = 1 - self.rank
            a = self.make("sr/a", self.rank, (3, 2), dtype, layout="transposed")
            b = self.make("sr/b", self.rank, (1,), dtype)
            if self.rank == 0:
                dist.send(a, peer)
                dist.send(b, peer)
            else:
                ra = torch.empty(3, 2, dtype=dtype, device=self.device)
                rb = torch.empty(1, dtype=dtype, device=self.device)
                wa = dist.irecv(ra, peer)
                wb = dist.irecv(rb, peer)
                wb.wait()  # the second first: payloads still land in issue order
                wa.wait()
                self.expect(f"send/recv {dtype} a", ra, make("sr/a", peer, (3, 2), dtype, device="cpu", layout="transposed"))
                self.expect(f"send/recv {dtype} b", rb, make("sr/b", peer, (1,), dtype, device="cpu"))


def run_all(rank: int, world: int, device: str = "tpu", dtypes=None, async_op: bool = False) -> dict:
    c = Checker(rank, world, device, async_op)
    for dtype in dtypes or DTYPES:
        for op in REDUCE_OPS:
            c.guard(f"all_reduce {op} {dtype}", lambda: c.all_reduce(dtype, op, "contiguous"))
            c.guard(f"reduce_scatter {op} {dtype}", lambda: c.reduce_scatter(dtype, op))
            c.guard(f"reduce_scatter_tensor {op} {dtype}", lambda: c.reduce_scatter_tensor(dtype, op))
        if not dtype.is_floating_point:
            for op in BITWISE:
                c.guard(f"all_reduce {op} {dtype}", lambda: c.all_reduce(dtype, op, "contiguous"))
        c.guard(f"all_reduce transposed {dtype}", lambda: c.all_reduce(dtype, R.SUM, "transposed"))
        c.guard(f"all_reduce_coalesced {dtype}", lambda: c.all_reduce_coalesced(dtype))
        c.guard(f"broadcast {dtype}", lambda: c.broadcast(dtype, "contiguous"))
        c.guard(f"broadcast transposed {dtype}", lambda: c.broadcast(dtype, "transposed"))
        c.guard(f"reduce {dtype}", lambda: c.reduce(dtype))
        c.guard(f"all_gather {dtype}", lambda: c.all_gather(dtype, "contiguous"))
        c.guard(f"all_gather transposed {dtype}", lambda: c.all_gather(dtype, "transposed"))
        c.guard(f"all_gather uneven {dtype}", lambda: c.all_gather_uneven(dtype))
        c.guard(f"all_gather_into_tensor {dtype}", lambda: c.all_gather_into_tensor(dtype))
        c.guard(f"all_gather_coalesced {dtype}", lambda: c.all_gather_coalesced(dtype))
        c.guard(f"reduce_scatter uneven {dtype}", lambda: c.reduce_scatter(dtype, R.SUM, uneven=True))
        c.guard(f"reduce_scatter coalesced {dtype}", lambda: c.reduce_scatter_coalesced(dtype))
        c.guard(f"all_to_all {dtype}", lambda: c.all_to_all(dtype))
        c.guard(f"all_to_all_single {dtype}", lambda: c.all_to_all_single(dtype, False))
        c.guard(f"all_to_all_single splits {dtype}", lambda: c.all_to_all_single(dtype, True))
        c.guard(f"gather/scatter {dtype}", lambda: c.gather_scatter(dtype))
        c.guard(f"send/recv {dtype}", lambda: c.send_recv(dtype))
    dist.barrier()
    return {"failures": c.failures, "checks": c.count}
