"""The handles a tpu_dist collective returns (``torch.distributed.Work``).

A synchronous call (``async_op=False``, and calls on CPU tensors) returns a
``TpuWork``: it wraps the gloo works that carry the collective, and the
staging of its operands. Completion means: gloo has finished writing the
device memory, and the post-processing (copies back from contiguous
temporaries, the division of an average) has been queued on the stream the
collective was issued on. That post-processing runs once, on whichever
thread first sees gloo done: ``wait()``, ``is_completed()`` or the callback
behind ``get_future()``. ``wait()`` blocks the calling thread until then.

An asynchronous call on tpu tensors returns an ``AsyncWork``, which behaves
as NCCL's: the issuing stream already waits for the collective (a host
signal, ``tpu/signal.h``) and has its post-processing queued, so ``wait()``
only makes the caller's current stream wait too, and never blocks the host.
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


class AsyncWork(TpuWork):
    """An ``async_op=True`` collective on tpu tensors (``ProcessGroupTPU._start_async``).

    The call's signal (named ``signal_name``) is set by the group's
    communication thread when gloo is done (or has failed); ``stream``
    waits for it, then runs the post-processing, then records ``done``.
    The communication thread calls ``_settle``, sets the signal, then calls
    ``_notify``."""

    def __init__(self, name: str, signal_name: str, done: torch.Event, stream: torch.Stream,
                 outputs: List[torch.Tensor]) -> None:
        super().__init__(name, [], None, outputs, lambda e: e)
        self._signal_name = signal_name
        self._done = done
        self._stream = stream
        self._settled = False
        self._notified = False
        self._reported = False  # the failure has been taken off the stream

    def _settle(self, error: Optional[BaseException]) -> None:
        """The remote part is over (before the signal is set)."""
        with self._lock:
            self._error = error
            self._settled = True

    def _notify(self) -> None:
        """Completes the future, after the signal is set: a callback that
        synchronizes the stream would otherwise wait for itself."""
        with self._lock:
            self._notified = True
            fut = self._future
        if fut is not None:
            self._complete(fut)

    def _complete(self, fut: torch.futures.Future) -> None:
        if self._error is not None:
            fut.set_exception(self._error)
        else:
            fut.set_result(self._outputs)

    def wait(self, timeout: Optional[datetime.timedelta] = None) -> bool:
        """Makes the current stream of the tensors' chip wait for the
        collective (the issuing stream already does); the host goes on. A
        failure is raised here if it is known already, else by the
        stream's next synchronizing call; a failure is reported once."""
        if self._error is not None:
            self._take_stream_copy()
            raise self._error
        current = torch.tpu.current_stream(self._stream.device)
        if current != self._stream:
            # An event wait: ordered after the signal and the post-processing
            # on the issuing stream, which alone keeps a failure (reported
            # once, there).
            current.wait_event(self._done)
        return True

    def _take_stream_copy(self) -> None:
        """The issuing stream keeps the failure too (its signal wait
        failed); raised here, it is taken off the stream, so that the
        stream's next synchronizing call does not raise it a second time.
        Only on failure does this wait for the stream."""
        with self._lock:
            if self._reported:
                return
            self._reported = True
        try:
            self._stream.synchronize()
        except Exception as e:
            if self._signal_name not in str(e).split("\n", 1)[0]:
                # Another failure came first on the stream (a kernel
                # error): raise that one rather than drop it.
                raise e from self._error

    def is_completed(self) -> bool:
        return self._settled and (self._error is not None or self._done.query())

    def synchronize(self) -> None:
        self.wait()

    def block_current_stream(self) -> None:
        self.wait()

    def get_future(self) -> torch.futures.Future:
        """Completes when gloo is done, with the output tensors; work that
        reads them on the issuing stream is ordered after the collective."""
        with self._lock:
            if self._future is not None:
                return self._future
            fut = self._future = torch.futures.Future()
            notified = self._notified
        if notified:
            self._complete(fut)
        return fut
