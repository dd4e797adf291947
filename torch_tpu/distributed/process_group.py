"""``ProcessGroupTPU``: the c10d process group behind the ``tpu_dist`` backend.

It is a Python ``torch.distributed.ProcessGroup`` (as PyTorch's own Python
process groups are) that owns a gloo process group over the same store,
rank and world size, and runs every collective through it on zero-copy CPU
views of the tpu tensors' device memory (``_views``). One call goes:

1. local checks (devices, dtypes, sizes on this rank);
2. staging on the device where gloo needs it (contiguous temporaries,
   int16 reduced as int32), queued on the tensors' current stream;
3. this rank's entry in the store (``_watch``), then the exchange of the
   fixed-size argument records (``_checks``): all ranks go on, or all
   raise the same error;
4. the drain of the stream: the work queued before the call (and the
   staging) has run, so the device memory holds the inputs;
5. gloo, asynchronously, on the views; the ``TpuWork`` it returns finishes
   the call (copies back, an average's division) on the issuing stream.

A synchronous call runs steps 1-5 on the calling thread, and c10d then
waits for its Work. An ``async_op=True`` call on tpu tensors runs steps 1-2
on the calling thread, queues on the stream a wait for a host signal
(``tpu/signal.h``) and the post-processing behind it, and hands steps 3-5
to the group's communication thread (``_comm``), which waits on the host
for the stream to reach the call, then sets the signal when gloo is done:
the host never waits, and later work on the stream waits for the result,
as with NCCL (``_start_async``). Both kinds go through gloo in program
order: a synchronous call first waits for the communication thread to
finish what it holds. CPU tensors take the synchronous path, without views.
"""
import collections
import datetime
import os
import threading
import weakref
from typing import Callable, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions

from torch_tpu import _C as _tpu_C
from torch_tpu.distributed import _checks as C
from torch_tpu.distributed._comm import CommThread
from torch_tpu.distributed._gloo import MAX_TIMEOUT, HandOver, make_gloo
from torch_tpu.distributed._p2p import PointToPoint
from torch_tpu.distributed._views import Staging
from torch_tpu.distributed._watch import Watch
from torch_tpu.distributed._work import AsyncWork, DoneWork, TpuWork

R = dist.ReduceOp.RedOpType
BACKEND_NAME = "tpu_dist"

# Bool reductions on the bytes as uint8 (values 0/1), as NCCL defines them:
# SUM is a logical or, PRODUCT a logical and.
_BOOL_OPS = {R.SUM: R.MAX, R.PRODUCT: R.MIN, R.MIN: R.MIN, R.MAX: R.MAX,
             R.BAND: R.MIN, R.BOR: R.MAX, R.BXOR: R.BXOR}
_BITWISE = (R.BAND, R.BOR, R.BXOR)


def _redop_id(op) -> int:
    return int(op.op if isinstance(op, dist.ReduceOp) else op)


def _timeout_of(opts) -> Optional[datetime.timedelta]:
    t = getattr(opts, "timeout", None)
    if t is None or t < datetime.timedelta(0):
        return None
    return min(t, MAX_TIMEOUT)  # gloo's nanosecond count would wrap


def _barrier_opts(timeout: Optional[datetime.timedelta]) -> dist.BarrierOptions:
    opts = dist.BarrierOptions()
    if timeout is not None:
        opts.timeout = timeout
    return opts


_live_groups: "weakref.WeakSet[ProcessGroupTPU]" = weakref.WeakSet()


def _quiesce_at_exit() -> None:
    """threading's exit hook (before Python joins non-daemon threads): each
    group's communication thread finishes its calls, and gloo's worker
    threads let go of their tensors, while the interpreter is whole. A
    gloo thread that releases a tensor during finalization needs the GIL
    and aborts the process ("terminate called without an active
    exception"; see _gloo.HandOver), with plain gloo as well."""
    for pg in list(_live_groups):
        try:
            pg.shutdown()
        except Exception:
            pass  # already shut down, or broken: nothing left to protect


try:
    threading._register_atexit(_quiesce_at_exit)  # type: ignore[attr-defined]
except RuntimeError:
    pass  # imported during interpreter shutdown


class _Call:
    """One collective on this rank, from its checks to its Work."""

    def __init__(self, pg: "ProcessGroupTPU", name: str, opts) -> None:
        self.pg = pg
        self.name = name
        self.seq = pg._next_seq()
        self.meta = C.Meta(name, self.seq)
        self.staging = Staging()
        self.timeout = _timeout_of(opts)
        self.equal: Tuple[int, ...] = ()
        self.rows: List[List[int]] = []
        # Asynchronous (see the module docstring) unless asked otherwise or
        # in debug mode, where every call completes before it returns.
        self.is_async = bool(getattr(opts, "asyncOp", False)) and torch.tpu.get_mode() != "debug"

    def __enter__(self) -> "_Call":
        return self

    def __exit__(self, kind, error, tb) -> bool:
        if error is not None:
            self.abandon()  # then raise this rank's own, more precise, error
            return False
        if self.staging.stream is None:
            self.is_async = False  # CPU tensors, or none: gloo's own semantics
        if not self.is_async:
            self.pg._comm.drain()
            try:
                # The inputs must be in device memory before gloo reads
                # them; a kernel error queued before the call is raised
                # here, before the exchange, so that every rank raises.
                self.staging.drain()
            except Exception as e:
                self.abandon()
                raise RuntimeError(f"tpu_dist {self.name} (collective #{self.seq}): the work queued before it "
                                   f"failed: {e}") from e
            self.pg._exchange(self)
        return False

    def abandon(self) -> None:
        """This rank cannot run the call: it still takes part in the
        exchange (in program order), so that the other ranks raise now."""
        self.meta.fail()
        self.pg._in_order(self.exchange_quietly)

    def exchange_quietly(self) -> None:
        try:
            self.pg._exchange(self)
        except Exception:
            pass

    def fail(self, message: str, kind=ValueError) -> None:
        raise kind(f"tpu_dist {self.name}: {message}")

    def start(self, launch: Callable[[], List[dist.Work]], outputs: List[torch.Tensor]) -> TpuWork:
        """Hands the views to gloo (the streams are drained), wraps its works."""
        if self.is_async:
            return self.pg._start_async(self, launch, outputs)
        try:
            works = launch()
        except Exception as e:
            raise self.explain(e) from e
        work = TpuWork(self.name, works, self.staging, outputs, self.explain)
        if torch.tpu.get_mode() == "debug":
            work.wait()  # debug mode: complete, post-processing included, before return
        return work

    def explain(self, cause: BaseException) -> BaseException:
        return self.pg._watch.explain(self.name, self.seq, cause, self.timeout)


class ProcessGroupTPU(dist.ProcessGroup):
    """A process group for tpu tensors over gloo (see the module docstring)."""

    # An async call's stream deadline is 2 x the timeout plus this, from
    # the moment the communication thread starts the call.
    _DEADLINE_SLACK_S = 10.0

    def __init__(
        self,
        store: dist.Store,
        rank: int,
        size: int,
        timeout: datetime.timedelta = datetime.timedelta(minutes=30),
        group_name: str = "",
    ) -> None:
        super().__init__(rank, size)
        self._rank = rank
        self._size = size
        self._timeout = timeout
        self._group_name = group_name or "tpu_dist"
        gloo = make_gloo(dist.PrefixStore("gloo/", store), rank, size, timeout)
        self._gloo = HandOver(gloo)  # the collectives' view of it (see _gloo.HandOver)
        self._watch = Watch(store, rank, size, self._group_name, timeout)
        # The exchange of argument records can be turned off for latency
        # (one gloo round trip per collective); a mismatch then aborts the
        # process inside gloo instead of raising.
        self._check_args = os.environ.get("TORCH_TPU_DIST_CHECKS", "1") != "0"
        self._seq = 0
        self._seq_lock = threading.Lock()
        self._p2p = PointToPoint(gloo, rank, size)
        self._comm = CommThread(f"tpu_dist comm ({self._group_name}, rank {rank})")
        weakref.finalize(self, self._comm.stop)  # a group dropped without destroy_process_group
        self._coalescing: Optional[List[dist.Work]] = None
        # Names of async calls that failed, whose error a stream may still
        # hold (bounded: a stream keeps one error at a time).
        self._failed_signals: "collections.OrderedDict[str, str]" = collections.OrderedDict()
        _live_groups.add(self)
        # gloo serves as this group's backend for what c10d asks of the
        # C++ object itself (object collectives' device, timeouts,
        # sequence numbers); every collective goes through the methods here.
        for device in ("cpu", "tpu"):
            self._register_backend(torch.device(device), dist.ProcessGroup.BackendType.GLOO, gloo)
        self._set_default_backend(dist.ProcessGroup.BackendType.GLOO)

    # -- identity -----------------------------------------------------------

    def getBackendName(self) -> str:
        return BACKEND_NAME

    def _get_backend_name(self) -> str:
        return BACKEND_NAME

    def name(self) -> str:
        return BACKEND_NAME

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"ProcessGroupTPU(rank={self._rank}, size={self._size}, group={self._group_name!r})"

    def _next_seq(self) -> int:
        with self._seq_lock:
            self._seq += 1
            return self._seq

    def _get_sequence_number_for_group(self) -> int:
        return self._seq

    def _set_sequence_number_for_group(self) -> None:
        pass  # numbers start at 0 on every rank and advance in step

    # How long shutdown waits for gloo's worker threads to let go of the
    # tensors of completed collectives (they do within scheduling delays);
    # only a work still pending, or kept by the program, makes it wait longer.
    _RELEASE_WAIT_S = 2.0

    def shutdown(self) -> None:
        self._comm.stop(join=True)  # after the calls it holds
        # Before the interpreter finalizes (or the group is dropped, which
        # joins gloo's threads while holding the GIL): a gloo thread that
        # still holds a tensor needs the GIL to let go of it.
        self._gloo.wait_released(self._RELEASE_WAIT_S)
        self._gloo.shutdown()

    def abort(self) -> None:
        self._gloo.abort()

    # -- asynchronous calls ----------------------------------------------------

    def _in_order(self, fn: Callable[[], None]) -> None:
        """Runs ``fn`` (which talks to gloo) after what the communication
        thread holds: inline if it holds nothing, else queued."""
        if self._comm.idle():
            fn()
        else:
            self._comm.submit(fn)

    def _start_async(self, call: _Call, launch: Callable[[], List[dist.Work]], outputs: List[torch.Tensor]) -> AsyncWork:
        """Queues the collective on its stream and its remote part on the
        communication thread (see the module docstring)."""
        stream = call.staging.stream
        ready = torch.tpu.Event()
        ready.record(stream)
        timeout = (call.timeout or self._timeout).total_seconds()
        # The stream's deadline starts when the communication thread starts
        # the call (the signal is armed then), not now: a call may queue
        # behind others. From there the exchange and gloo each take at most
        # the timeout, after which the thread reports gloo's own error; the
        # deadline only catches a thread that never reports.
        deadline_s = 2 * timeout + self._DEADLINE_SLACK_S
        signal_name = f"tpu_dist {call.name} (collective #{call.seq} of group '{self._group_name}')"
        signal = _tpu_C._Signal(signal_name)
        signal.wait_on(stream.stream_id, stream.device_index, -1)
        try:
            call.staging.finish()
            done = torch.tpu.Event()
            done.record(stream)
        except BaseException as e:
            # The stream waits for the signal with no deadline: set it, or
            # the stream never drains. The exchange tells the other ranks.
            signal.set(False, f"not run: {e}")
            call.abandon()
            raise
        work = AsyncWork(call.name, signal_name, done, stream, outputs)

        def remote_part() -> None:
            error: Optional[BaseException] = None
            before: Optional[BaseException] = None
            carried: Optional[str] = None
            try:
                try:
                    ready.synchronize()
                except Exception as e:
                    carried = self._take_earlier_failure(str(e))
                    # An earlier async call of this group failed, and its
                    # error came off the stream here: this call's inputs
                    # are fine, so it runs, and its signal hands that
                    # error (its first cause: no nesting) back to the
                    # stream, which reports it once.
                    if carried is None:  # a kernel error queued before the call
                        before = e
                        call.meta.fail()
                signal.arm(deadline_s)
                if before is not None:
                    # The other ranks learn of it through the exchange; its
                    # own failure (a peer gone too) would hide the cause.
                    call.exchange_quietly()
                    raise RuntimeError(f"tpu_dist {call.name} (collective #{call.seq}): the work queued on "
                                       f"{stream} before it failed: {before}") from before
                self._exchange(call)
                try:
                    for w in launch():
                        w.wait()
                except Exception as e:
                    raise call.explain(e) from e
            except BaseException as e:  # noqa: B036  (reported through the signal and the Work)
                # As the stream reports it: a DistBackendError naming the call.
                error = e if isinstance(e, dist.DistBackendError) else dist.DistBackendError(str(e))
                if error is not e:
                    error.__cause__ = e
            work._settle(error)
            if error is not None:
                message = str(error)
                self._note_failure(signal_name, f"{signal_name} failed: {message}")
            elif carried is not None:
                message = f"it ran, but an earlier call failed: {carried}"
                self._note_failure(signal_name, carried)
            try:
                signal.set(error is None and carried is None, "" if error is None and carried is None else message)
            finally:
                work._notify()

        try:
            self._comm.submit(remote_part)
        except BaseException as e:
            signal.set(False, f"not run: {e}")  # the stream must not wait forever
            raise
        return work

    def _note_failure(self, signal_name: str, root: str) -> None:
        """``signal_name``'s signal is set with an error whose first cause
        is ``root``."""
        with self._seq_lock:
            self._failed_signals[signal_name] = root
            while len(self._failed_signals) > 64:  # a stream holds one error at a time
                self._failed_signals.popitem(last=False)

    def _take_earlier_failure(self, message: str) -> Optional[str]:
        """If ``message`` (an error taken off a stream) is the failure of
        one of this group's earlier async calls, its first cause (and the
        call is forgotten); else None."""
        with self._seq_lock:
            for name in list(self._failed_signals):
                if (name + " failed") in message:
                    return self._failed_signals.pop(name)
        return None

    # -- the exchange of argument records ------------------------------------

    def _exchange(self, call: _Call) -> None:
        self._watch.issued(call.seq, call.name)
        mine = call.meta.tensor()
        rows = [torch.empty_like(mine) for _ in range(self._size)]
        opts = AllgatherOptions()
        if call.timeout is not None:
            opts.timeout = call.timeout
        try:
            if not self._check_args:
                if call.name == "barrier":  # otherwise the exchange is the barrier
                    self._gloo.barrier(_barrier_opts(call.timeout)).wait()
                return
            self._gloo.allgather([rows], [mine], opts).wait()
        except Exception as e:
            raise call.explain(e) from e
        call.rows = [r.tolist() for r in rows]
        reason = C.verdict(call.rows, self._rank, call.equal)
        if reason is not None and not call.meta.values[C.ERROR]:
            raise ValueError(f"tpu_dist {call.name} (collective #{call.seq}): {reason}")

    def _work_for(self, work: TpuWork) -> TpuWork:
        if self._coalescing is not None:
            self._coalescing.append(work)
        return work

    # -- reductions -----------------------------------------------------------

    def _reduce_op(self, call: _Call, op, dtype: torch.dtype) -> Tuple["R", Optional[Callable]]:
        """The op gloo runs for ``op`` on ``dtype``, and the device step after it."""
        kind = op.op if isinstance(op, dist.ReduceOp) else R(op)
        if kind == R.PREMUL_SUM:
            call.fail("ReduceOp.PREMUL_SUM is not supported; scale the tensor and use SUM")
        if kind in _BITWISE and (dtype.is_floating_point or dtype.is_complex):
            call.fail(f"ReduceOp.{kind.name} needs an integer or bool tensor, got {dtype}", TypeError)
        if dtype == torch.bool:
            if kind == R.AVG:
                call.fail("cannot use ReduceOp.AVG with boolean inputs", TypeError)
            return _BOOL_OPS[kind], None
        if kind == R.AVG:
            n = self._size
            if dtype.is_floating_point:
                return R.SUM, lambda wire: wire.div_(n)
            # Integer average: the sum divided by the group size, rounded
            # toward zero (C integer division, as NCCL's).
            return R.SUM, lambda wire: wire.copy_(torch.div(wire, n, rounding_mode="trunc"))
        return kind, None

    def allreduce(self, tensors: List[torch.Tensor], opts=None) -> dist.Work:
        opts = opts or dist.AllreduceOptions()
        with _Call(self, "all_reduce", opts) as call:
            if isinstance(tensors, torch.Tensor):
                tensors = [tensors]
            if len(tensors) != 1:
                call.fail(f"takes one tensor per rank, got {len(tensors)} (use all_reduce_coalesced for lists)")
            t = tensors[0]
            C.check_tensors(call.name, [t], ["tensor"])
            kind, post = self._reduce_op(call, opts.reduceOp, t.dtype)
            call.meta.set(dtype=t.dtype, redop=_redop_id(opts.reduceOp), count=t.numel(), ntensors=1)
            call.equal = (C.DTYPE, C.REDOP, C.COUNT, C.NTENSORS)
            view = call.staging.inout(t, reduce=True, post=post)
        gopts = dist.AllreduceOptions()
        gopts.reduceOp = dist.ReduceOp(kind)
        if call.timeout is not None:
            gopts.timeout = call.timeout
        return self._work_for(call.start(lambda: [self._gloo.allreduce([view], gopts)], [t]))

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts=None) -> dist.Work:
        opts = opts or dist.AllreduceCoalescedOptions()
        with _Call(self, "all_reduce_coalesced", opts) as call:
            tensors = list(tensors)
            if not tensors:
                call.fail("needs at least one tensor")
            C.check_tensors(call.name, tensors, [f"tensors[{i}]" for i in range(len(tensors))])
            C.check_dtypes(call.name, tensors, [f"tensors[{i}]" for i in range(len(tensors))])
            kind, post = self._reduce_op(call, opts.reduceOp, tensors[0].dtype)
            call.meta.set(dtype=tensors[0].dtype, redop=_redop_id(opts.reduceOp),
                          count=sum(t.numel() for t in tensors), sig=C.fingerprint(t.numel() for t in tensors),
                          ntensors=len(tensors))
            call.equal = (C.DTYPE, C.REDOP, C.COUNT, C.SIG, C.NTENSORS)
            view = call.staging.inout_flat(tensors, reduce=True, post=post)
        gopts = dist.AllreduceOptions()
        gopts.reduceOp = dist.ReduceOp(kind)
        if call.timeout is not None:
            gopts.timeout = call.timeout
        return self._work_for(call.start(lambda: [self._gloo.allreduce([view], gopts)], tensors))

    def reduce(self, tensors: List[torch.Tensor], opts=None) -> dist.Work:
        opts = opts or dist.ReduceOptions()
        with _Call(self, "reduce", opts) as call:
            if len(tensors) != 1:
                call.fail(f"takes one tensor per rank, got {len(tensors)}")
            t = tensors[0]
            root = opts.rootRank
            self._check_rank(call, root, "dst")
            C.check_tensors(call.name, [t], ["tensor"])
            kind, post = self._reduce_op(call, opts.reduceOp, t.dtype)
            call.meta.set(dtype=t.dtype, root=root, redop=_redop_id(opts.reduceOp), count=t.numel())
            call.equal = (C.DTYPE, C.ROOT, C.REDOP, C.COUNT)
            if self._rank == root:
                view = call.staging.inout(t, reduce=True, post=post)
            else:
                # Gloo uses a non-root buffer as scratch; the contract leaves
                # it unchanged, so the reduction works on a copy.
                view = call.staging.input(t.clone(memory_format=torch.contiguous_format), reduce=True)
        gopts = dist.ReduceOptions()
        gopts.reduceOp = dist.ReduceOp(kind)
        gopts.rootRank = root
        gopts.rootTensor = 0
        if call.timeout is not None:
            gopts.timeout = call.timeout
        return self._work_for(call.start(lambda: [self._gloo.reduce([view], gopts)], [t]))

    # -- broadcast ------------------------------------------------------------

    def _check_rank(self, call: _Call, r: int, what: str) -> None:
        if not 0 <= r < self._size:
            call.fail(f"{what} rank {r} is not in the group (size {self._size})")

    def broadcast(self, tensors: List[torch.Tensor], opts=None) -> dist.Work:
        opts = opts or dist.BroadcastOptions()
        with _Call(self, "broadcast", opts) as call:
            if len(tensors) != 1:
                call.fail(f"takes one tensor per rank, got {len(tensors)}")
            t = tensors[0]
            root = opts.rootRank
            self._check_rank(call, root, "src")
            C.check_tensors(call.name, [t], ["tensor"])
            call.meta.set(dtype=t.dtype, root=root, count=t.numel())
            call.equal = (C.DTYPE, C.ROOT, C.COUNT)
            view = call.staging.inout(t) if self._rank != root else call.staging.input(t)
        gopts = dist.BroadcastOptions()
        gopts.rootRank = root
        gopts.rootTensor = 0
        if call.timeout is not None:
            gopts.timeout = call.timeout
        return self._work_for(call.start(lambda: [self._gloo.broadcast([view], gopts)], [t]))

    # -- all_gather -----------------------------------------------------------

    def _gather_opts(self, call: _Call) -> AllgatherOptions:
        gopts = AllgatherOptions()
        if call.timeout is not None:
            gopts.timeout = call.timeout
        return gopts

    def allgather(self, output_lists: List[List[torch.Tensor]], inputs: List[torch.Tensor], opts=None) -> dist.Work:
        opts = opts or AllgatherOptions()
        with _Call(self, "all_gather", opts) as call:
            if len(inputs) != 1 or len(output_lists) != 1:
                call.fail("takes one input tensor and one list of outputs per rank")
            inp, outs = inputs[0], list(output_lists[0])
            if len(outs) != self._size:
                call.fail(f"tensor_list has {len(outs)} tensors; it needs one per rank ({self._size})")
            labels = ["tensor"] + [f"tensor_list[{i}]" for i in range(len(outs))]
            C.check_tensors(call.name, [inp] + outs, labels)
            C.check_dtypes(call.name, [inp] + outs, labels)
            if outs[self._rank].numel() != inp.numel():
                call.fail(f"tensor_list[{self._rank}] has {outs[self._rank].numel()} elements but this rank's tensor has {inp.numel()}")
            call.meta.set(dtype=inp.dtype, count=inp.numel())
            for j in range(self._size):
                call.meta.sends(self._rank, j, inp.numel())
                call.meta.receives(j, self._rank, outs[j].numel())
            call.equal = (C.DTYPE,)
            in_view = call.staging.input(inp)
            out_views = [call.staging.output(o) for o in outs]
        # Consistent arguments give every rank the same list of sizes, so
        # the choice of path is the same everywhere.
        if all(o.numel() == inp.numel() for o in outs):
            return self._work_for(call.start(
                lambda: [self._gloo.allgather([out_views], [in_view], self._gather_opts(call))], outs))
        # Uneven sizes: one broadcast per rank, each from its own output slot.
        me = self._rank

        def launch() -> List[dist.Work]:
            out_views[me].copy_(in_view)  # drained device memory: an exact copy
            works = []
            for j in range(self._size):
                b = dist.BroadcastOptions()
                b.rootRank = j
                if call.timeout is not None:
                    b.timeout = call.timeout
                works.append(self._gloo.broadcast([out_views[j]], b))
            return works

        return self._work_for(call.start(launch, outs))

    def all_gather_single(self, output: torch.Tensor, inp: torch.Tensor, opts=None) -> dist.Work:
        opts = opts or AllgatherOptions()
        with _Call(self, "all_gather_into_tensor", opts) as call:
            C.check_tensors(call.name, [inp, output], ["input_tensor", "output_tensor"])
            C.check_dtypes(call.name, [inp, output], ["input_tensor", "output_tensor"])
            if output.numel() != inp.numel() * self._size:
                call.fail(f"output_tensor has {output.numel()} elements; it needs world_size ({self._size}) x "
                          f"input_tensor's {inp.numel()} = {inp.numel() * self._size}")
            call.meta.set(dtype=inp.dtype, count=inp.numel())
            call.equal = (C.DTYPE, C.COUNT)
            in_view = call.staging.input(inp)
            out_view = call.staging.output(output)
            in_view, out_view = in_view.reshape(-1), out_view.reshape(-1)
        return self._work_for(call.start(
            lambda: [self._gloo._allgather_base(out_view, in_view, self._gather_opts(call))], [output]))

    _allgather_base = all_gather_single

    def allgather_coalesced(self, output_lists: List[List[torch.Tensor]], inputs: List[torch.Tensor], opts=None) -> dist.Work:
        opts = opts or AllgatherOptions()
        with _Call(self, "all_gather_coalesced", opts) as call:
            if len(output_lists) != len(inputs):
                call.fail(f"{len(inputs)} inputs but {len(output_lists)} output lists")
            flat = list(inputs) + [o for lst in output_lists for o in lst]
            labels = [f"input_tensor_list[{i}]" for i in range(len(inputs))] + [
                f"output_tensor_lists[{i}][{j}]" for i, lst in enumerate(output_lists) for j in range(len(lst))]
            C.check_tensors(call.name, flat, labels)
            for i, (inp, lst) in enumerate(zip(inputs, output_lists)):
                if len(lst) != self._size:
                    call.fail(f"output_tensor_lists[{i}] has {len(lst)} tensors; it needs {self._size}")
                for j, o in enumerate(lst):
                    if o.numel() != inp.numel() or o.dtype != inp.dtype:
                        call.fail(f"output_tensor_lists[{i}][{j}] ({o.numel()} x {o.dtype}) does not match "
                                  f"input_tensor_list[{i}] ({inp.numel()} x {inp.dtype})")
            call.meta.set(sig=C.fingerprint([t.numel() for t in inputs] + [C._DTYPE_ID.get(t.dtype, 0) for t in inputs]),
                          ntensors=len(inputs))
            call.equal = (C.SIG, C.NTENSORS)
            pairs = [([call.staging.output(o) for o in lst], call.staging.input(inp))
                     for inp, lst in zip(inputs, output_lists)]
        outs = [o for lst in output_lists for o in lst]
        return self._work_for(call.start(
            lambda: [self._gloo.allgather([ov], [iv], self._gather_opts(call)) for ov, iv in pairs], outs))

    def all_gather_single_coalesced(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor], opts=None) -> dist.Work:
        opts = opts or AllgatherOptions()
        with _Call(self, "all_gather_into_tensor_coalesced", opts) as call:
            if len(outputs) != len(inputs):
                call.fail(f"{len(inputs)} inputs but {len(outputs)} outputs")
            C.check_tensors(call.name, list(inputs) + list(outputs),
                            [f"inputs[{i}]" for i in range(len(inputs))] + [f"outputs[{i}]" for i in range(len(outputs))])
            for i, (o, inp) in enumerate(zip(outputs, inputs)):
                if o.dtype != inp.dtype or o.numel() != inp.numel() * self._size:
                    call.fail(f"outputs[{i}] ({o.numel()} x {o.dtype}) must hold world_size x inputs[{i}] "
                              f"({inp.numel()} x {inp.dtype})")
            call.meta.set(sig=C.fingerprint([t.numel() for t in inputs] + [C._DTYPE_ID.get(t.dtype, 0) for t in inputs]),
                          ntensors=len(inputs))
            call.equal = (C.SIG, C.NTENSORS)
            pairs = [(call.staging.output(o).reshape(-1), call.staging.input(i).reshape(-1)) for o, i in zip(outputs, inputs)]
        return self._work_for(call.start(
            lambda: [self._gloo._allgather_base(ov, iv, self._gather_opts(call)) for ov, iv in pairs], list(outputs)))

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    # -- reduce_scatter -------------------------------------------------------

    def _rs_opts(self, call: _Call, kind) -> dist.ReduceScatterOptions:
        gopts = dist.ReduceScatterOptions()
        gopts.reduceOp = dist.ReduceOp(kind)
        if call.timeout is not None:
            gopts.timeout = call.timeout
        return gopts

    def reduce_scatter(self, outputs: List[torch.Tensor], input_lists: List[List[torch.Tensor]], opts=None) -> dist.Work:
        opts = opts or dist.ReduceScatterOptions()
        with _Call(self, "reduce_scatter", opts) as call:
            if len(outputs) != 1 or len(input_lists) != 1:
                call.fail("takes one output tensor and one list of inputs per rank")
            out, ins = outputs[0], list(input_lists[0])
            if len(ins) != self._size:
                call.fail(f"input_list has {len(ins)} tensors; it needs one per rank ({self._size})")
            labels = ["output"] + [f"input_list[{i}]" for i in range(len(ins))]
            C.check_tensors(call.name, [out] + ins, labels)
            C.check_dtypes(call.name, [out] + ins, labels)
            if ins[self._rank].numel() != out.numel():
                call.fail(f"output has {out.numel()} elements but input_list[{self._rank}] has {ins[self._rank].numel()}")
            kind, post = self._reduce_op(call, opts.reduceOp, out.dtype)
            call.meta.set(dtype=out.dtype, redop=_redop_id(opts.reduceOp),
                          sig=C.fingerprint(t.numel() for t in ins))
            call.equal = (C.DTYPE, C.REDOP, C.SIG)
            even = len({t.numel() for t in ins}) == 1
            flat = torch.cat([t.reshape(-1) for t in ins])
            if even:
                # One flat buffer, reduced and scattered by gloo in one call.
                flat_in = call.staging.input(flat, reduce=True).reshape(-1)
                out_view = call.staging.output(out, reduce=True, post=post).reshape(-1)
            else:
                # Uneven sizes: an all_reduce of the concatenation; this
                # rank's slice is copied out on the device.
                flat_in = call.staging.inout(flat, reduce=True, post=post)
                n0 = sum(t.numel() for t in ins[: self._rank])
                call.staging.after(lambda: out.copy_(flat[n0 : n0 + out.numel()].view(out.shape)))
        if even:
            return self._work_for(call.start(
                lambda: [self._gloo._reduce_scatter_base(out_view, flat_in, self._rs_opts(call, kind))], [out]))
        gopts = dist.AllreduceOptions()
        gopts.reduceOp = dist.ReduceOp(kind)
        if call.timeout is not None:
            gopts.timeout = call.timeout
        return self._work_for(call.start(lambda: [self._gloo.allreduce([flat_in], gopts)], [out]))

    def reduce_scatter_single(self, output: torch.Tensor, inp: torch.Tensor, opts=None) -> dist.Work:
        opts = opts or dist.ReduceScatterOptions()
        with _Call(self, "reduce_scatter_tensor", opts) as call:
            C.check_tensors(call.name, [inp, output], ["input", "output"])
            C.check_dtypes(call.name, [inp, output], ["input", "output"])
            if inp.numel() != output.numel() * self._size:
                call.fail(f"input has {inp.numel()} elements; it needs world_size ({self._size}) x output's "
                          f"{output.numel()} = {output.numel() * self._size}")
            kind, post = self._reduce_op(call, opts.reduceOp, output.dtype)
            call.meta.set(dtype=output.dtype, redop=_redop_id(opts.reduceOp), count=output.numel())
            call.equal = (C.DTYPE, C.REDOP, C.COUNT)
            in_view = call.staging.input(inp, reduce=True).reshape(-1)
            out_view = call.staging.output(output, reduce=True, post=post).reshape(-1)
        return self._work_for(call.start(
            lambda: [self._gloo._reduce_scatter_base(out_view, in_view, self._rs_opts(call, kind))], [output]))

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor], opts=None) -> dist.Work:
        opts = opts or dist.ReduceScatterOptions()
        with _Call(self, "reduce_scatter_tensor_coalesced", opts) as call:
            if len(outputs) != len(inputs) or not inputs:
                call.fail(f"{len(inputs)} inputs but {len(outputs)} outputs")
            C.check_tensors(call.name, list(inputs) + list(outputs),
                            [f"inputs[{i}]" for i in range(len(inputs))] + [f"outputs[{i}]" for i in range(len(outputs))])
            kinds = []
            pairs = []
            for i, (o, inp) in enumerate(zip(outputs, inputs)):
                if o.dtype != inp.dtype or inp.numel() != o.numel() * self._size:
                    call.fail(f"inputs[{i}] ({inp.numel()} x {inp.dtype}) must hold world_size x outputs[{i}] "
                              f"({o.numel()} x {o.dtype})")
                kind, post = self._reduce_op(call, opts.reduceOp, o.dtype)
                kinds.append(kind)
                pairs.append((call.staging.output(o, reduce=True, post=post).reshape(-1),
                              call.staging.input(inp, reduce=True).reshape(-1)))
            call.meta.set(redop=_redop_id(opts.reduceOp),
                          sig=C.fingerprint([t.numel() for t in outputs] + [C._DTYPE_ID.get(t.dtype, 0) for t in outputs]),
                          ntensors=len(outputs))
            call.equal = (C.REDOP, C.SIG, C.NTENSORS)
        return self._work_for(call.start(
            lambda: [self._gloo._reduce_scatter_base(ov, iv, self._rs_opts(call, k)) for (ov, iv), k in zip(pairs, kinds)],
            list(outputs)))

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # -- all_to_all -----------------------------------------------------------

    def _a2a_opts(self, call: _Call) -> dist.AllToAllOptions:
        gopts = dist.AllToAllOptions()
        if call.timeout is not None:
            gopts.timeout = call.timeout
        return gopts

    def all_to_all_single(
        self,
        output: torch.Tensor,
        inp: torch.Tensor,
        output_split_sizes: Optional[List[int]],
        input_split_sizes: Optional[List[int]],
        opts=None,
    ) -> dist.Work:
        opts = opts or dist.AllToAllOptions()
        with _Call(self, "all_to_all_single", opts) as call:
            C.check_tensors(call.name, [inp, output], ["input", "output"])
            C.check_dtypes(call.name, [inp, output], ["input", "output"])
            if inp.dim() == 0 or output.dim() == 0:
                call.fail("input and output need at least one dimension (the one that is split)")
            out_splits = self._splits(call, output, output_split_sizes, "output")
            in_splits = self._splits(call, inp, input_split_sizes, "input")
            row_in = inp.numel() // inp.shape[0] if inp.shape[0] else 0
            row_out = output.numel() // output.shape[0] if output.shape[0] else 0
            if inp.shape[0] and output.shape[0] and row_in != row_out:
                call.fail(f"a row (dim 0 slice) of input has {row_in} elements but one of output has {row_out}")
            row = row_in or row_out
            for j in range(self._size):
                call.meta.sends(self._rank, j, in_splits[j] * row)
                call.meta.receives(j, self._rank, out_splits[j] * row)
            call.meta.set(dtype=inp.dtype)
            call.equal = (C.DTYPE,)
            in_view = call.staging.input(inp, rows=True)
            out_view = call.staging.output(output, rows=True)
        return self._work_for(call.start(
            lambda: [self._gloo.alltoall_base(out_view, in_view, out_splits, in_splits, self._a2a_opts(call))], [output]))

    alltoall_base = all_to_all_single

    def _splits(self, call: _Call, t: torch.Tensor, splits: Optional[List[int]], what: str) -> List[int]:
        if not splits:
            if t.shape[0] % self._size:
                call.fail(f"{what}'s dim 0 ({t.shape[0]}) is not divisible by world_size ({self._size}); pass split sizes")
            return [t.shape[0] // self._size] * self._size
        splits = [int(s) for s in splits]
        if len(splits) != self._size or any(s < 0 for s in splits) or sum(splits) != t.shape[0]:
            call.fail(f"{what}_split_sizes {splits} must be {self._size} non-negative sizes summing to {what}'s dim 0 ({t.shape[0]})")
        return splits

    def alltoall(self, output_list: List[torch.Tensor], input_list: List[torch.Tensor], opts=None) -> dist.Work:
        opts = opts or dist.AllToAllOptions()
        with _Call(self, "all_to_all", opts) as call:
            outs, ins = list(output_list), list(input_list)
            if len(outs) != self._size or len(ins) != self._size:
                call.fail(f"output_tensor_list and input_tensor_list need {self._size} tensors each, got {len(outs)} and {len(ins)}")
            labels = [f"input_tensor_list[{i}]" for i in range(len(ins))] + [f"output_tensor_list[{i}]" for i in range(len(outs))]
            C.check_tensors(call.name, ins + outs, labels)
            C.check_dtypes(call.name, ins + outs, labels)
            for j in range(self._size):
                call.meta.sends(self._rank, j, ins[j].numel())
                call.meta.receives(j, self._rank, outs[j].numel())
            call.meta.set(dtype=ins[0].dtype)
            call.equal = (C.DTYPE,)
            # Gloo's list all_to_all needs one buffer: the inputs are
            # concatenated on the device and the outputs split after.
            in_flat = torch.cat([t.reshape(-1) for t in ins])
            out_flat = torch.empty(sum(o.numel() for o in outs), dtype=outs[0].dtype, device=outs[0].device)
            in_view = call.staging.input(in_flat, rows=True)
            out_view = call.staging.output(out_flat, rows=True)
            in_splits = [t.numel() for t in ins]
            out_splits = [t.numel() for t in outs]

            def split_back() -> None:
                offset = 0
                for o in outs:
                    o.copy_(out_flat[offset : offset + o.numel()].view(o.shape))
                    offset += o.numel()

            call.staging.after(split_back)
        return self._work_for(call.start(
            lambda: [self._gloo.alltoall_base(out_view, in_view, out_splits, in_splits, self._a2a_opts(call))], outs))

    # -- gather / scatter ---------------------------------------------------

    def gather(self, output_lists: List[List[torch.Tensor]], inputs: List[torch.Tensor], opts=None) -> dist.Work:
        opts = opts or dist.GatherOptions()
        with _Call(self, "gather", opts) as call:
            root = opts.rootRank
            self._check_rank(call, root, "dst")
            if len(inputs) != 1:
                call.fail(f"takes one input tensor per rank, got {len(inputs)}")
            inp = inputs[0]
            outs = list(output_lists[0]) if output_lists else []
            if self._rank == root and len(outs) != self._size:
                call.fail(f"gather_list on the destination rank has {len(outs)} tensors; it needs {self._size}")
            if self._rank != root and outs:
                call.fail("gather_list must be given on the destination rank only")
            labels = ["tensor"] + [f"gather_list[{i}]" for i in range(len(outs))]
            C.check_tensors(call.name, [inp] + outs, labels)
            C.check_dtypes(call.name, [inp] + outs, labels)
            call.meta.sends(self._rank, root, inp.numel())
            for j, o in enumerate(outs):
                call.meta.receives(j, root, o.numel())
            call.meta.set(dtype=inp.dtype, root=root, count=inp.numel())
            call.equal = (C.DTYPE, C.ROOT, C.COUNT)
            in_view = call.staging.input(inp)
            out_views = [call.staging.output(o) for o in outs]
        gopts = dist.GatherOptions()
        gopts.rootRank = root
        if call.timeout is not None:
            gopts.timeout = call.timeout
        return self._work_for(call.start(
            lambda: [self._gloo.gather([out_views] if out_views else [], [in_view], gopts)], outs))

    def scatter(self, outputs: List[torch.Tensor], input_lists: List[List[torch.Tensor]], opts=None) -> dist.Work:
        opts = opts or dist.ScatterOptions()
        with _Call(self, "scatter", opts) as call:
            root = opts.rootRank
            self._check_rank(call, root, "src")
            if len(outputs) != 1:
                call.fail(f"takes one output tensor per rank, got {len(outputs)}")
            out = outputs[0]
            ins = list(input_lists[0]) if input_lists else []
            if self._rank == root and len(ins) != self._size:
                call.fail(f"scatter_list on the source rank has {len(ins)} tensors; it needs {self._size}")
            if self._rank != root and ins:
                call.fail("scatter_list must be given on the source rank only")
            labels = ["tensor"] + [f"scatter_list[{i}]" for i in range(len(ins))]
            C.check_tensors(call.name, [out] + ins, labels)
            C.check_dtypes(call.name, [out] + ins, labels)
            for j, t in enumerate(ins):
                call.meta.sends(root, j, t.numel())
            call.meta.receives(root, self._rank, out.numel())
            call.meta.set(dtype=out.dtype, root=root, count=out.numel())
            call.equal = (C.DTYPE, C.ROOT, C.COUNT)
            out_view = call.staging.output(out)
            in_views = [call.staging.input(t) for t in ins]
        gopts = dist.ScatterOptions()
        gopts.rootRank = root
        if call.timeout is not None:
            gopts.timeout = call.timeout
        return self._work_for(call.start(
            lambda: [self._gloo.scatter([out_view], [in_views] if in_views else [], gopts)], [out]))

    # -- barrier ------------------------------------------------------------

    def barrier(self, opts=None) -> dist.Work:
        opts = opts or dist.BarrierOptions()
        with _Call(self, "barrier", opts) as call:
            # Work queued on this thread's chip finishes before the barrier,
            # as with NCCL's barrier (an all_reduce queued behind it); its
            # failure is raised on every rank (the exchange in _Call).
            if torch.tpu.is_initialized():
                try:
                    torch.tpu.current_stream().synchronize()
                except Exception as e:
                    raise RuntimeError(f"tpu_dist barrier (collective #{call.seq}): the work queued before it "
                                       f"failed: {e}") from e
        # The exchange is itself an all_gather: every rank has arrived.
        return DoneWork("barrier", None, [])

    # -- coalescing (c10d's _coalescing_manager with a device) --------------

    def _start_coalescing(self, device: torch.device) -> None:
        if self._coalescing is not None:
            raise RuntimeError("tpu_dist: coalescing already started")
        self._coalescing = []

    def _end_coalescing(self, device: torch.device) -> dist.Work:
        works, self._coalescing = self._coalescing or [], None
        return _AllOf(works)

    # -- point to point (_p2p) -----------------------------------------------

    def send(self, tensors: List[torch.Tensor], dst: int, tag: int = 0) -> dist.Work:
        return self._p2p.send(tensors, dst, tag)

    def recv(self, tensors: List[torch.Tensor], src: int, tag: int = 0) -> dist.Work:
        return self._p2p.recv(tensors, src, tag)

    def recv_anysource(self, tensors: List[torch.Tensor], tag: int = 0) -> dist.Work:
        return self._p2p.recv(tensors, None, tag)


class _AllOf(dist.Work):
    """The works of one coalescing block, as one."""

    def __init__(self, works: Sequence[dist.Work]) -> None:
        super().__init__()
        self.works = list(works)

    def wait(self, timeout=None) -> bool:
        for w in self.works:
            w.wait() if timeout is None else w.wait(timeout)
        return True

    def is_completed(self) -> bool:
        return all(w.is_completed() for w in self.works)

    def result(self) -> List[torch.Tensor]:
        return [t for w in self.works for t in w.result()]

    def get_future(self) -> torch.futures.Future:
        futs = [w.get_future() for w in self.works]
        fut = torch.futures.Future()

        def done(all_f) -> None:
            try:
                fut.set_result([t for f in all_f.value() for t in f.value()])
            except Exception as e:
                fut.set_exception(e)

        torch.futures.collect_all(futs).add_done_callback(done)
        return fut
