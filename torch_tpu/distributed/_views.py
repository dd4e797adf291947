"""Zero-copy CPU views of tpu tensors, and the staging of operands that gloo
cannot take as they are.

The virtual TPU keeps its device memory in host memory, so a tpu tensor's
``data_ptr()`` is a host address. ``host_view`` wraps that address in a CPU
tensor with the same sizes and strides, so gloo reads and writes the device
memory in place. The view's storage holds a C++ reference to the tpu
storage, so the device block lives at least as long as the CPU view does,
whoever drops the view last (gloo's worker thread included, without the
GIL).

A view is only meaningful once the work queued on the tensor's stream has
run: ``Staging.drain`` synchronizes the streams before gloo touches memory.

What gloo cannot take as it is, the device converts first (``Staging``):

- a non-contiguous tensor goes through a contiguous temporary on its own
  device, copied back after the collective for outputs;
- bool reductions run on the same bytes as uint8, with SUM as MAX (logical
  or, as NCCL defines it) and PRODUCT as MIN (logical and);
- int16, which gloo does not know, is reduced as int32 on the device and
  converted back (two's-complement wrap-around, exactly as int16 arithmetic
  would wrap); for data movement every dtype travels as its bytes.
"""
import contextlib
from typing import Callable, List, Optional

import torch

from torch_tpu import _C as _tpu_C

# dtypes gloo's kernels are instantiated for (GENERATE_ALL_TYPES in
# ProcessGroupGlooDetail.hpp). bool runs as uint8, which is right for
# copies but not for SUM.
GLOO_DTYPES = frozenset(
    {
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int8,
        torch.uint8,
        torch.int32,
        torch.int64,
        torch.bool,
    }
)

# Reductions of a dtype gloo cannot reduce run in a wider one.
_REDUCE_AS = {torch.int16: torch.int32}


def host_view(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor aliasing ``t``'s memory with ``t``'s sizes and strides.

    ``t`` on the CPU is returned as it is. For a tpu tensor the caller must
    have drained the work queued on its stream. The view keeps ``t``'s
    storage alive, and freeing it needs no GIL (see ``_C._host_view``)."""
    if t.device.type == "cpu":
        return t
    if t.numel() == 0:
        return torch.empty(t.shape, dtype=t.dtype)
    return _tpu_C._host_view(t)


def as_bytes(v: torch.Tensor, rows: bool = False) -> torch.Tensor:
    """A contiguous tensor's bytes: the same leading dims, the last in bytes;
    with ``rows``, two dims (dim 0, the bytes of one row), for dim-0 splits."""
    if rows:
        n = v.shape[0]
        v = v.reshape(n, v.numel() // n if n else 0)
    elif v.dim() == 0:
        v = v.reshape(1)
    if v.numel() == 0:
        return torch.empty(v.shape[:-1] + (v.shape[-1] * v.element_size(),), dtype=torch.uint8)
    return v.view(torch.uint8)


class Staging:
    """The operands of one collective call: CPU views for gloo, device
    temporaries where needed, and what to do after the collective.

    All tensors of a call are on one device (the caller checks). Work queued
    here (contiguous copies, casts) runs on that chip's current stream;
    ``drain`` waits for it and for everything queued before it; ``finish``
    queues the copies back on the same stream, from whichever thread sees
    the collective complete."""

    def __init__(self) -> None:
        self._keep: List[torch.Tensor] = []
        self._after: List[Callable[[], None]] = []
        self.stream: Optional[torch.Stream] = None

    def _note(self, t: torch.Tensor) -> None:
        if t.device.type == "tpu" and self.stream is None:
            self.stream = torch.tpu.current_stream(t.device)

    def _wire(self, t: torch.Tensor, reduce: bool, read: bool, write: bool) -> torch.Tensor:
        """The tensor gloo works on, on ``t``'s device: ``t`` itself or a temporary."""
        self._note(t)
        if write and torch._debug_has_internal_overlap(t) == 1:
            raise ValueError(f"a tensor of shape {tuple(t.shape)} and strides {t.stride()} has elements that share "
                             "memory (an expanded tensor): a collective cannot write it; pass .clone()")
        wide = _REDUCE_AS.get(t.dtype) if reduce else None
        if wide is None and t.is_contiguous():
            return t
        dtype = wide or t.dtype
        if read:
            tmp = t.to(dtype=dtype, memory_format=torch.contiguous_format, copy=True)
        else:
            tmp = torch.empty(t.shape, dtype=dtype, device=t.device)
        self._keep.append(tmp)
        if write:
            self._after.append(lambda: t.copy_(tmp))
        return tmp

    def _gloo(self, wire: torch.Tensor, reduce: bool, rows: bool) -> torch.Tensor:
        v = host_view(wire)
        if reduce:
            return v.view(torch.uint8) if v.dtype == torch.bool else v
        return v if v.dtype in GLOO_DTYPES else as_bytes(v, rows)

    def input(self, t: torch.Tensor, reduce: bool = False, rows: bool = False) -> torch.Tensor:
        """A view gloo reads from."""
        return self._gloo(self._wire(t, reduce, read=True, write=False), reduce, rows)

    def output(
        self, t: torch.Tensor, reduce: bool = False, post: Optional[Callable] = None, rows: bool = False
    ) -> torch.Tensor:
        """A view gloo writes to; its old contents are not read.

        ``post(wire)`` runs on the device after the collective and before
        the copy back of a temporary (the division of an average)."""
        n = len(self._after)
        wire = self._wire(t, reduce, read=False, write=True)
        if post is not None:
            self._after.insert(n, lambda: post(wire))
        return self._gloo(wire, reduce, rows)

    def inout(self, t: torch.Tensor, reduce: bool = False, post: Optional[Callable] = None) -> torch.Tensor:
        """A view gloo reads and overwrites (all_reduce, broadcast); ``post``
        as for ``output``."""
        n = len(self._after)
        wire = self._wire(t, reduce, read=True, write=True)
        if post is not None:
            self._after.insert(n, lambda: post(wire))
        return self._gloo(wire, reduce, False)

    def inout_flat(self, tensors: List[torch.Tensor], reduce: bool, post: Optional[Callable] = None) -> torch.Tensor:
        """One flat view over the concatenation of ``tensors`` (one dtype),
        built on the device, and the copies back of its slices."""
        for t in tensors:
            self._note(t)
        dtype = _REDUCE_AS.get(tensors[0].dtype, tensors[0].dtype) if reduce else tensors[0].dtype
        flat = torch.cat([t.reshape(-1).to(dtype) for t in tensors])
        self._keep.append(flat)
        if post is not None:
            self._after.append(lambda: post(flat))

        def back() -> None:
            offset = 0
            for t in tensors:
                n = t.numel()
                t.copy_(flat[offset : offset + n].view(t.shape))
                offset += n

        self._after.append(back)
        return self._gloo(flat, reduce, False)

    def after(self, fn: Callable[[], None]) -> None:
        """Queue ``fn`` with the post-processing (on the issuing stream)."""
        self._after.append(fn)

    def note(self, t: torch.Tensor) -> None:
        """Count ``t``'s stream among those to drain (for tensors used as they are)."""
        self._note(t)

    def drain(self) -> None:
        """Wait for the work queued on the operands' stream, staging included."""
        if self.stream is not None:
            self.stream.synchronize()

    def finish(self) -> None:
        """Queue the post-processing on the stream the call was issued on."""
        after, self._after = self._after, []
        # As a collective's own writes, the copies back bypass autograd (a
        # leaf that requires grad may be reduced in place, as with NCCL).
        on_stream = torch.tpu.stream(self.stream) if self.stream is not None else contextlib.nullcontext()
        with torch.no_grad(), on_stream:
            for fn in after:
                fn()
        self._keep = []
