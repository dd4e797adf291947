"""The handle a tpu_dist collective returns (``torch.distributed.Work``).

A ``TpuWork`` wraps the gloo works that carry the collective, and the
staging of its operands. Completion means: gloo has finished writing the
device memory, and the post-processing (copies back from contiguous
temporaries, the division of an average) has been queued on the stream the
collective was issued on. That post-processing runs once, on whichever
thread first sees gloo done: ``wait()``, ``is_completed()`` or the callback
behind ``get_future()``.

``wait()`` blocks the calling thread until then (gloo semantics; NCCL only
makes the current stream wait, which needs a stream entry that waits for an
external completion, not yet in the runtime). Work queued on the stream
after ``wait()`` returns sees the result, because gloo wrote the memory
before and the copies back were queued before.
"""
import datetime
import threading
from typing import Callable, List, Optional, Sequence

import torch
import torch.distributed as dist

from torch_tpu.distributed._views import Staging


def _no_timeout(timeout) -> bool:
    return timeout is None or (isinstance(timeout, datetime.timedelta) and timeout <= datetime.timedelta(0))


class TpuWork(dist.Work):
    def __init__(
        self,
        name: str,
        inner: Sequence[dist.Work],
        staging: Optional[Staging],
        outputs: List[torch.Tensor],
        explain: Callable[[BaseException], BaseException],
        source_rank: Optional[Callable[[], int]] = None,
    ) -> None:
        super().__init__()
        self.name = name
        self._inner = list(inner)
        self._staging = staging
        self._outputs = outputs
        self._explain = explain
        self._source_rank = source_rank
        self._lock = threading.Lock()
        self._finished = False
        self._error: Optional[BaseException] = None
        self._future: Optional[torch.futures.Future] = None

    # -- completion ---------------------------------------------------------

    def _finish(self) -> None:
        with self._lock:
            if self._finished:
                return
            self._finished = True
            staging, self._staging = self._staging, None
        if staging is not None:
            staging.finish()

    def _failed(self, cause: BaseException) -> BaseException:
        with self._lock:
            if self._error is None:
                self._error = self._explain(cause)
                self._error.__cause__ = cause
                self._staging = None
            return self._error

    def _wait_inner(self, timeout) -> None:
        for w in self._inner:
            if _no_timeout(timeout):
                w.wait()
            else:
                w.wait(timeout)

    def wait(self, timeout: Optional[datetime.timedelta] = None) -> bool:
        if self._error is not None:
            raise self._error
        try:
            self._wait_inner(timeout)
        except Exception as e:
            raise self._failed(e) from e
        self._finish()
        return True

    def is_completed(self) -> bool:
        if self._finished or self._error is not None:
            return True
        if not all(w.is_completed() for w in self._inner):
            return False
        try:
            self.wait()
        except Exception:
            pass  # kept in self._error; exception() and wait() report it
        return True

    def is_success(self) -> bool:
        return self.is_completed() and self._error is None

    def exception(self) -> Optional[BaseException]:
        return self._error

    def result(self) -> List[torch.Tensor]:
        return self._outputs

    def source_rank(self) -> int:
        if self._source_rank is None:
            raise ValueError(f"tpu_dist {self.name}: source_rank() is only defined for recv from any source")
        return self._source_rank()

    def synchronize(self) -> None:
        self.wait()

    def block_current_stream(self) -> None:
        # The runtime has no stream entry that waits for gloo yet: the host
        # waits, after which anything queued on the stream is ordered.
        self.wait()

    # -- futures (DDP's comm hooks) ----------------------------------------

    def get_future(self) -> torch.futures.Future:
        with self._lock:
            if self._future is not None:
                return self._future
            fut = self._future = torch.futures.Future()
        inner = [w.get_future() for w in self._inner]
        remaining = [len(inner)]
        count_lock = threading.Lock()

        def settle() -> None:
            try:
                for f in inner:
                    f.wait()
            except Exception as e:
                fut.set_exception(self._failed(e))
                return
            try:
                self._finish()
            except Exception as e:
                fut.set_exception(e)
                return
            fut.set_result(self._outputs)

        def one_done(_f: torch.futures.Future) -> None:
            with count_lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                settle()

        if not inner:
            settle()
        for f in inner:
            f.add_done_callback(one_done)
        return fut


class DoneWork(TpuWork):
    """A collective that needed no communication (a group of one)."""

    def __init__(self, name: str, staging: Optional[Staging], outputs: List[torch.Tensor]) -> None:
        super().__init__(name, [], staging, outputs, lambda e: e)
        self._finish()
