"""The communication thread of a tpu_dist group: the part of an
asynchronous collective that waits for other ranks, run off the caller's
thread and in program order.

gloo pairs the collectives of different ranks by the order in which each
rank issues them, so everything a group sends through gloo (argument
exchanges, collectives) must leave in program order. An asynchronous call
hands its remote part to this thread; a synchronous call first waits until
the thread has nothing left (``drain``), then runs inline, as it did before
asynchronous calls existed. One thread per group, started on first use,
stopped by the group's ``shutdown`` (``destroy_process_group``, and at
interpreter exit: ``process_group._quiesce_at_exit``) or when the group is
garbage collected.

The thread is not a daemon: a daemon thread would still be inside gloo
when the interpreter finalizes, and a thread that meets finalization inside
C++ code aborts the process ("terminate called without an active
exception"). ``stop`` lets it finish the jobs it holds, each bounded by the
group's timeout (gloo's).
"""
import collections
import threading
from typing import Callable, Deque, Optional


class CommThread:
    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: Deque[Callable[[], None]] = collections.deque()
        self._cv = threading.Condition()
        self._pending = 0  # queued or running
        self._stopping = False
        self._thread: Optional[threading.Thread] = None

    def idle(self) -> bool:
        with self._cv:
            return self._pending == 0

    def submit(self, job: Callable[[], None]) -> None:
        """Runs ``job()`` after every job submitted before it. The job must
        not raise: it reports its outcome itself (signal, Work)."""
        with self._cv:
            if self._stopping:
                raise RuntimeError(f"{self._name}: the process group has been shut down")
            self._jobs.append(job)
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=False)
                self._thread.start()
            self._cv.notify_all()

    def drain(self) -> None:
        """Blocks until every submitted job has run (the GIL is released
        while waiting, as for any Condition wait)."""
        if threading.current_thread() is self._thread:
            return  # a job that issues a collective of its own: already in order
        with self._cv:
            while self._pending:
                self._cv.wait()

    def stop(self, join: bool = False) -> None:
        """The thread runs what it holds, then ends; later ``submit`` calls
        raise. ``join``: wait for it to end (not from a job)."""
        with self._cv:
            self._stopping = True
            thread = self._thread
            self._cv.notify_all()
        if join and thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._jobs and not self._stopping:
                    self._cv.wait()
                if not self._jobs:
                    return  # stopping, and nothing left
                job = self._jobs.popleft()
            try:
                job()
            finally:
                # Drop the closure now: it holds the call's tensors, which
                # would otherwise live until the next job.
                job = None  # type: ignore[assignment]
                with self._cv:
                    self._pending -= 1
                    self._cv.notify_all()
