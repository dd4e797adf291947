"""tpu tensors and ``torch.multiprocessing``: a clear error, never a hang.

``torch.multiprocessing`` shares a CPU tensor by moving its storage to
shared memory and a CUDA tensor through a CUDA IPC handle. A tpu tensor has
neither: its device memory belongs to the process that allocated it (the
virtual TPU's memory is private memory of that process, and a real chip's
is reached only through that process's runtime). So a tpu tensor cannot be
shared between processes yet; the user moves it to the CPU first.

Where the refusal surfaces:

* ``Queue.put`` (``multiprocessing.queues.Queue`` and ``JoinableQueue``, the
  queues every context's ``Queue()`` makes) pickles in a background feeder
  thread, where an exception is only printed and the receiver waits
  forever. ``put`` is therefore wrapped with a cheap check that looks
  through the object and its built-in containers (list, tuple, dict, set,
  frozenset, up to ``_SCAN_LIMIT`` items) and raises ``RuntimeError`` in the
  caller, before anything is queued.
* Everything that pickles with ``ForkingPickler`` in the calling thread
  (``SimpleQueue.put``, ``Connection.send``, ``Pool`` arguments) gets the
  same ``RuntimeError`` from the reducers registered here for tensors and
  storages.
* A tpu tensor hidden where the check does not look (an attribute of a
  user object) reaches those reducers in the feeder thread. There they do
  not raise; they send a record whose unpickling raises the same
  ``RuntimeError`` in the receiver, so ``get`` fails instead of hanging.
"""
import functools
import multiprocessing.queues
import os
import threading
from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing  # noqa: F401  (registers PyTorch's reducers first)

# The name CPython gives the thread that pickles for multiprocessing.Queue.
_FEEDER_THREAD_NAME = "QueueFeederThread"

# Most objects the put-time check visits before it stops looking.
_SCAN_LIMIT = 10_000

_MESSAGE = (
    "tpu tensors cannot be shared between processes yet: device memory belongs to the "
    "process that allocated it, so a tpu tensor cannot be put on a torch.multiprocessing "
    "queue or sent through a pipe. Move it to the CPU first (tensor.cpu(), which "
    "torch.multiprocessing shares through shared memory) and back with .to('tpu') in the "
    "receiving process."
)


def _is_tpu(obj) -> bool:
    """True for a tensor or storage (untyped or typed) on the tpu device."""
    if isinstance(obj, torch.storage.TypedStorage):
        obj = obj._untyped_storage  # TypedStorage.device warns that it is deprecated
    if isinstance(obj, (torch.Tensor, torch.UntypedStorage)):
        return obj.device.type == "tpu"
    return False


def _describe(obj) -> str:
    if isinstance(obj, torch.Tensor):
        return f"a {obj.device} tensor of shape {tuple(obj.shape)} and dtype {obj.dtype}"
    if isinstance(obj, torch.storage.TypedStorage):
        obj = obj._untyped_storage
    return f"a {obj.device} storage of {obj.nbytes()} bytes"


def _rebuild_unshareable(message: str):
    """Unpickled in the receiving process: raises the sender's error."""
    raise RuntimeError(message)


def _refuse(obj):
    """The reduction of a tpu tensor or storage: raises, except in a Queue
    feeder thread, where a raise would be printed and lost; there the
    receiver gets a record that raises when it is unpickled."""
    what = _describe(obj)
    if threading.current_thread().name == _FEEDER_THREAD_NAME:
        message = f"process {os.getpid()} sent {what} through a multiprocessing queue. {_MESSAGE}"
        return (_rebuild_unshareable, (message,))
    raise RuntimeError(f"Cannot send {what} to another process. {_MESSAGE}")


def _checked_reducer(reduce):
    @functools.wraps(reduce)
    def reduce_checked(obj):
        if _is_tpu(obj):
            return _refuse(obj)
        return reduce(obj)

    reduce_checked._torch_tpu_checked = True
    return reduce_checked


def _install_reducers() -> None:
    """Wraps the reducers torch.multiprocessing registered for tensor and
    storage types with the tpu refusal (others pass through unchanged)."""
    storage_types = (torch.UntypedStorage, torch.storage.TypedStorage)
    for cls, reduce in list(ForkingPickler._extra_reducers.items()):
        if getattr(reduce, "_torch_tpu_checked", False):
            continue
        if isinstance(cls, type) and issubclass(cls, (torch.Tensor, *storage_types)):
            ForkingPickler.register(cls, _checked_reducer(reduce))


def _find_tpu(obj):
    """Returns the first tpu tensor or storage in obj, its built-in
    containers or the modules among them (their parameters and buffers),
    at most _SCAN_LIMIT objects visited, or None."""
    stack, seen, visited = [obj], set(), 0
    while stack and visited < _SCAN_LIMIT:
        item = stack.pop()
        visited += 1
        if _is_tpu(item):
            return item
        if isinstance(item, torch.nn.Module) and id(item) not in seen:
            seen.add(id(item))
            stack.extend(item.parameters())
            stack.extend(item.buffers())
        elif isinstance(item, (list, tuple, set, frozenset, dict)) and id(item) not in seen:
            seen.add(id(item))
            if isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())
            else:
                stack.extend(item)
    return None


def _checked_put(put):
    @functools.wraps(put)
    def put_checked(self, obj, *args, **kwargs):
        found = _find_tpu(obj)
        if found is not None:
            raise RuntimeError(
                f"Queue.put: cannot send {_describe(found)} to another process. {_MESSAGE}"
            )
        return put(self, obj, *args, **kwargs)

    put_checked._torch_tpu_checked = True
    return put_checked


def _install_put_checks() -> None:
    for cls in (multiprocessing.queues.Queue, multiprocessing.queues.JoinableQueue):
        put = cls.__dict__.get("put")
        if put is not None and not getattr(put, "_torch_tpu_checked", False):
            cls.put = _checked_put(put)


def install() -> None:
    """Installs the reducers and the put-time check (idempotent)."""
    _install_reducers()
    _install_put_checks()
