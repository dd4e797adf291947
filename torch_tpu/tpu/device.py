"""Chips: availability, the current chip, and the modeled generation."""
from dataclasses import dataclass
from typing import Any

import torch

from torch_tpu import _C
from torch_tpu.tpu._utils import _device_t, _get_device_index

# torch.cuda's names for the types its functions take and raise.
Device = torch.device | str | int | None
OutOfMemoryError = torch.OutOfMemoryError

_CAPABILITY = {"v5e": (5, 0), "v5p": (5, 1), "v6e": (6, 0), "v7x": (7, 0)}


def is_available() -> bool:
    """True when the runtime starts and has at least one chip."""
    return _C._device_count() > 0


def is_initialized() -> bool:
    return is_available()


def _lazy_init() -> None:
    _C._init()


def _is_in_bad_fork() -> bool:
    """True in a child forked after the parent used the device."""
    return _C._is_in_bad_fork()


def device_count() -> int:
    """Number of chips (``TORCH_TPU_CHIPS``, default 1)."""
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def set_device(device: _device_t) -> None:
    if isinstance(device, int) and device < 0:
        return  # a no-op, as torch.cuda.set_device(-1)
    _C._set_device(_get_device_index(device, optional=True))


class device:
    """Context manager that makes ``device`` the current chip, like torch.cuda.device."""

    def __init__(self, device: Any):
        negative = device is None or (isinstance(device, int) and device < 0)  # no-op, as on CUDA
        self.idx = -1 if negative else _get_device_index(device, optional=True)
        self.prev_idx = -1

    def __enter__(self) -> None:
        if self.idx >= 0:
            self.prev_idx = _C._current_device()
            _C._set_device(self.idx)

    def __exit__(self, *args: Any) -> bool:
        if self.prev_idx >= 0:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager selecting the chip of a tensor (no-op for CPU tensors)."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.device.type == "tpu" else None)


def synchronize(device: _device_t = None) -> None:
    """Waits for all work on every stream of a chip; raises a kept kernel error."""
    _C._synchronize(_get_device_index(device, optional=True))


@dataclass(frozen=True)
class _TpuDeviceProperties:
    name: str
    generation: str
    total_memory: int
    hbm_bytes: int
    hbm_bandwidth: float
    peak_bf16_flops: float
    mxu_size: int
    chip_count: int
    major: int
    minor: int

    def __repr__(self) -> str:
        return (
            f"_TpuDeviceProperties(name='{self.name}', total_memory={self.total_memory // 2**20}MB, "
            f"hbm_bandwidth={self.hbm_bandwidth / 1e9:.0f}GB/s, "
            f"peak_bf16_flops={self.peak_bf16_flops / 1e12:.0f}TFLOP/s, mxu_size={self.mxu_size}, "
            f"chip_count={self.chip_count})"
        )


def get_device_properties(device: _device_t = None) -> _TpuDeviceProperties:
    """The modeled chip: name, memory, HBM bandwidth, peak bf16 FLOP/s, MXU size, chip count."""
    p = _C._get_device_properties(_get_device_index(device, optional=True))
    major, minor = _CAPABILITY[p["generation"]]
    return _TpuDeviceProperties(major=major, minor=minor, **p)


def get_device_name(device: _device_t = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: _device_t = None) -> tuple[int, int]:
    """(major, minor) of the modeled TPU generation: v5e (5, 0), v5p (5, 1), v6e (6, 0), v7x (7, 0)."""
    p = get_device_properties(device)
    return (p.major, p.minor)


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Dtypes torch.autocast may use on tpu (bf16 is the TPU's native matrix type)."""
    return [torch.bfloat16, torch.float16]


def is_bf16_supported() -> bool:
    return True


def init() -> None:
    """Starts the runtime now instead of at first use, as torch.cuda.init;
    a no-op when it has started."""
    _lazy_init()


def can_device_access_peer(device: _device_t, peer_device: _device_t) -> bool:
    """True when ``device`` can read ``peer_device``'s memory directly. The
    virtual chips of one process all reach each other (chip-to-chip copies
    run without a trip through host tensors); as on CUDA, a chip is not its
    own peer. Raises for a chip this process does not have."""
    index = _get_device_index(device, optional=True)
    peer = _get_device_index(peer_device, optional=True)
    return index != peer
