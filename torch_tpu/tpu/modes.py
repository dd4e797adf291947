"""Execution modes (the names of Google's TorchTPU) and fallback accounting.

- ``strict`` (default): ops queue on streams; the host waits at sync points.
- ``debug`` (``TPU_LAUNCH_BLOCKING=1``): every op runs before its call
  returns, so a kernel error is raised at the op that caused it.
- ``fused`` (``TORCH_TPU_DEFER_AND_FUSE=1``): strict, plus fusion: chains
  of element-wise ops run as one pass over memory in cache-sized tiles, and
  values freed before anyone else reads them are never written. Same
  results as strict, bit for bit. ``TORCH_TPU_FUSE_LOG=1`` prints each group.
"""
import contextlib
from typing import Iterator

from torch_tpu import _C

MODES = ("strict", "debug", "fused")


def set_mode(mode: str) -> None:
    """Sets the process-wide execution mode."""
    _C._set_mode(mode)


def get_mode() -> str:
    return _C._get_mode()


@contextlib.contextmanager
def mode(name: str) -> Iterator[None]:
    """Runs a block in another execution mode, restoring the previous one."""
    previous = get_mode()
    set_mode(name)
    try:
        yield
    finally:
        set_mode(previous)


def fallback_stats() -> dict[str, int]:
    """Calls per op that ran through the CPU fallback since the last reset."""
    return dict(_C._fallback_stats())


def reset_fallback_stats() -> None:
    _C._reset_fallback_stats()


def fusion_stats() -> dict[str, int]:
    """What fused mode did since the last reset, over every chip and stream:
    ``groups`` (of two or more records run as one pass), ``fused_records``
    (records in them), ``values_not_written`` and ``bytes_not_written``
    (intermediates kept in cache instead of device memory)."""
    return dict(_C._fusion_stats())


def reset_fusion_stats() -> None:
    _C._reset_fusion_stats()


def set_fallback_error(enabled: bool) -> None:
    """When enabled, an op without a native kernel raises NotImplementedError
    instead of falling back (initially: ``TORCH_TPU_FALLBACK=error``)."""
    _C._set_fallback_error(bool(enabled))


def get_fallback_error() -> bool:
    return _C._get_fallback_error()
