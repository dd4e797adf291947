"""send / recv for tpu_dist.

A message travels in two parts on two gloo tags: a record (dtype, element
count) and the payload, the tensor's bytes straight from device memory. The
receiver posts the payload's receive only once the record has arrived, into
a buffer of exactly the size the sender announced, so that a size mismatch
is an error on the receiver instead of an abort inside gloo (a payload
larger than the posted buffer kills the process in gloo's TCP pair).

Receives are posted by a progress thread per (source, tag), in the order
they were issued, as soon as their records arrive, whether or not anyone
waits: so a receiver that issues ``irecv`` and then blocks elsewhere
(``barrier``) does not hold up the sender, as with gloo and NCCL. gloo
matches messages between two ranks on one tag in order, so the n-th receive
gets the n-th send. ``recv`` from any source has its own thread per tag;
mixed with receives from a named source on the same tag, the order between
the two kinds is not kept.
"""
import collections
import datetime
import threading
from typing import Deque, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from torch_tpu.distributed import _checks as C
from torch_tpu.distributed._views import Staging, as_bytes
from torch_tpu.distributed._work import TpuWork

_MAX_TAG = 1 << 29


def _tags(tag: int) -> Tuple[int, int]:
    """(payload tag, record tag) for a user tag."""
    if not 0 <= tag < _MAX_TAG:
        raise ValueError(f"tpu_dist: tag {tag} is out of range [0, {_MAX_TAG})")
    return 2 * tag, 2 * tag + 1


def p2p_error(name: str, rank: int, peer: Optional[int], cause: BaseException) -> BaseException:
    who = f"rank {peer}" if peer is not None else "any rank"
    return dist.DistBackendError(f"tpu_dist: {name} between rank {rank} and {who} failed; gloo: {str(cause).strip()}")


def _payload(staging: Staging, t: torch.Tensor, out: bool) -> torch.Tensor:
    """The bytes of ``t`` (or of its contiguous temporary) as one flat view."""
    if t.numel() == 0:
        return torch.empty(0, dtype=torch.uint8)
    view = staging.output(t) if out else staging.input(t)
    return as_bytes(view.reshape(-1))


class SendWork(TpuWork):
    def get_future(self) -> torch.futures.Future:
        raise RuntimeError("tpu_dist: send/recv works have no future (as with gloo); call wait()")


class RecvWork(dist.Work):
    """A receive: record first, then the payload (see the module docstring)."""

    def __init__(self, p2p: "PointToPoint", t: torch.Tensor, src: Optional[int], data_tag: int,
                 meta: torch.Tensor, meta_work: dist.Work, view: torch.Tensor, staging: Staging) -> None:
        super().__init__()
        self.p2p, self.t, self.src, self.data_tag = p2p, t, src, data_tag
        self.meta, self.meta_work, self.view, self.staging = meta, meta_work, view, staging
        self.data_work: Optional[dist.Work] = None
        self.error: Optional[BaseException] = None
        self.posted = threading.Event()  # the payload's receive is posted (or failed)
        self.finished = False
        self.lock = threading.Lock()

    def _fail(self, e: BaseException) -> None:
        if self.error is None:
            self.error = e if isinstance(e, ValueError) else p2p_error("recv", self.p2p.rank, self.src, e)

    def post(self) -> None:
        """Wait for the sender's record and post the payload's receive (the
        progress thread calls this, in issue order)."""
        try:
            self.meta_work.wait()
            if self.src is None:
                self.src = self.meta_work._source_rank()
            magic, dtype_id, count = self.meta.tolist()
            if magic != C._MAGIC:
                raise ValueError(f"tpu_dist recv: rank {self.src} sent a malformed record")
            sent = C.DTYPES[dtype_id - 1] if 0 < dtype_id <= len(C.DTYPES) else None
            nbytes = count * (sent.itemsize if sent is not None else 1)
            buf = self.view
            if sent != self.t.dtype or count != self.t.numel():
                self._fail(ValueError(
                    f"tpu_dist recv from rank {self.src}: expected {self.t.numel()} elements of {self.t.dtype}, "
                    f"but rank {self.src} sent {count} elements of {sent}"))
                buf = torch.empty(nbytes, dtype=torch.uint8)  # received and dropped
            if nbytes:
                self.data_work = self.p2p.gloo.recv([buf], self.src, self.data_tag)
        except Exception as e:  # noqa: BLE001  (kept for wait())
            self._fail(e)
        finally:
            self.posted.set()

    def wait(self, timeout: Optional[datetime.timedelta] = None) -> bool:
        if timeout is not None and timeout <= datetime.timedelta(0):
            timeout = None
        with self.lock:
            if not self.finished:
                if not self.posted.wait(None if timeout is None else timeout.total_seconds()):
                    raise dist.DistBackendError(
                        f"tpu_dist: recv from {'rank ' + str(self.src) if self.src is not None else 'any rank'} "
                        f"did not complete within {timeout.total_seconds():g} s")
                if self.data_work is not None:
                    try:
                        self.data_work.wait() if timeout is None else self.data_work.wait(timeout)
                    except Exception as e:  # noqa: BLE001
                        self._fail(e)
                self.finished = True
                if self.error is None:
                    self.staging.finish()
                self.staging = None
        if self.error is not None:
            raise self.error
        return True

    def is_completed(self) -> bool:
        if self.finished:
            return True
        if not self.posted.is_set() or (self.data_work is not None and not self.data_work.is_completed()):
            return False
        try:
            self.wait()
        except Exception:  # noqa: BLE001  (kept in self.error)
            pass
        return True

    def is_success(self) -> bool:
        return self.is_completed() and self.error is None

    def exception(self) -> Optional[BaseException]:
        return self.error

    def result(self) -> List[torch.Tensor]:
        return [self.t]

    def source_rank(self) -> int:
        self.posted.wait()
        return self.src

    _source_rank = source_rank

    def synchronize(self) -> None:
        self.wait()

    def get_future(self):
        raise RuntimeError("tpu_dist: send/recv works have no future (as with gloo); call wait()")


class PointToPoint:
    """The send/recv half of a ProcessGroupTPU."""

    def __init__(self, gloo, rank: int, size: int) -> None:
        self.gloo, self.rank, self.size = gloo, rank, size
        self.lock = threading.Lock()
        self.queues: Dict[Tuple[Optional[int], int], Deque[RecvWork]] = {}
        self.running: Dict[Tuple[Optional[int], int], bool] = {}

    def _check(self, name: str, tensors: List[torch.Tensor], peer: Optional[int], what: str) -> torch.Tensor:
        if len(tensors) != 1:
            raise ValueError(f"tpu_dist {name}: takes one tensor, got {len(tensors)}")
        if peer is not None and (not 0 <= peer < self.size or peer == self.rank):
            raise ValueError(f"tpu_dist {name}: {what} rank {peer} is not another rank of the group (size {self.size})")
        C.check_tensors(name, tensors, ["tensor"])
        return tensors[0]

    def send(self, tensors: List[torch.Tensor], dst: int, tag: int) -> dist.Work:
        t = self._check("send", tensors, dst, "dst")
        data_tag, meta_tag = _tags(tag)
        staging = Staging()
        view = _payload(staging, t, out=False)
        meta = torch.tensor([C._MAGIC, C._DTYPE_ID.get(t.dtype, 0), t.numel()], dtype=torch.int64)
        staging.drain()

        def explain(e: BaseException) -> BaseException:
            return p2p_error("send", self.rank, dst, e)

        try:
            works = [self.gloo.send([meta], dst, meta_tag)]
            if view.numel():
                works.append(self.gloo.send([view], dst, data_tag))
        except Exception as e:
            raise explain(e) from e
        return SendWork("send", works, staging, [t], explain)

    def recv(self, tensors: List[torch.Tensor], src: Optional[int], tag: int) -> dist.Work:
        t = self._check("recv", tensors, src, "src")
        data_tag, meta_tag = _tags(tag)
        staging = Staging()
        view = _payload(staging, t, out=True)
        # The stream may still read the old contents: drain before gloo writes.
        staging.drain()
        meta = torch.empty(3, dtype=torch.int64)
        try:
            if src is None:
                meta_work = self.gloo.recv_anysource([meta], meta_tag)
            else:
                meta_work = self.gloo.recv([meta], src, meta_tag)
        except Exception as e:
            raise p2p_error("recv", self.rank, src, e) from e
        work = RecvWork(self, t, src, data_tag, meta, meta_work, view, staging)
        key = (src, tag)
        with self.lock:
            self.queues.setdefault(key, collections.deque()).append(work)
            start = not self.running.get(key)
            self.running[key] = True
        if start:
            threading.Thread(target=self._progress, args=(key,), name=f"tpu_dist-recv-{src}-{tag}",
                             daemon=True).start()
        return work

    def _progress(self, key: Tuple[Optional[int], int]) -> None:
        """Post the payload receives of one (source, tag), in issue order."""
        queue = self.queues[key]
        while True:
            with self.lock:
                if not queue:
                    self.running[key] = False
                    return
                head = queue.popleft()
            head.post()
