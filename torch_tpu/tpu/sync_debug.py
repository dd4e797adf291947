"""torch.tpu.set_sync_debug_mode: find the calls that make the host wait
for the device, as torch.cuda.set_sync_debug_mode does.

Counted, where CUDA counts them: blocking copies between host and device
(Tensor.item(), .cpu(), .tolist(), .numpy(), print, .to("tpu") of pageable
memory), torch.tpu.Stream.synchronize(), and ops whose result needs the
device's data on the host (torch.nonzero, x[mask], masked_select, unique,
bincount, equal, ...). As on CUDA, torch.tpu.synchronize() and
Event.synchronize() are explicit waits and are not counted. Copies that
need no wait (non_blocking with pinned memory, a host scalar operand) are
not either. Off, each of these calls pays one flag check."""
from typing import Union

__all__ = ["get_sync_debug_mode", "set_sync_debug_mode"]

_MODES = {"default": 0, "warn": 1, "error": 2}


def set_sync_debug_mode(debug_mode: Union[int, str]) -> None:
    """0 or "default": nothing; 1 or "warn": a UserWarning at every
    synchronizing call; 2 or "error": a RuntimeError instead, before the
    call queues anything. The message ("called a synchronizing TPU
    operation: ...") names the call. Other values raise RuntimeError, as on
    CUDA."""
    from torch_tpu import _C

    if isinstance(debug_mode, str):
        if debug_mode not in _MODES:
            raise RuntimeError(
                f"torch.tpu.set_sync_debug_mode: invalid value of debug_mode {debug_mode!r}, expected one of "
                "`default`, `warn`, `error`"
            )
        debug_mode = _MODES[debug_mode]
    if not isinstance(debug_mode, int):
        raise RuntimeError(
            f"torch.tpu.set_sync_debug_mode: invalid argument {debug_mode!r} of type {type(debug_mode).__name__} "
            "(expected 0, 1, 2, 'default', 'warn' or 'error')"
        )
    if not 0 <= debug_mode <= 2:
        raise RuntimeError(
            f"torch.tpu.set_sync_debug_mode: invalid value of debug_mode {debug_mode}, expected one of 0, 1, 2"
        )
    _C._set_sync_debug_mode(int(debug_mode))


def get_sync_debug_mode() -> int:
    """The current mode: 0 (default), 1 (warn) or 2 (error)."""
    from torch_tpu import _C

    return _C._get_sync_debug_mode()
