"""Device memory: the per-chip caching allocator, through PyTorch's
device-generic torch.accelerator memory calls (one set of numbers)."""
from collections import OrderedDict
from typing import Any

import torch

from torch_tpu.tpu._utils import _device_t, _get_device_index


def _index(device: _device_t) -> int:
    return _get_device_index(device, optional=True)


def memory_allocated(device: _device_t = None) -> int:
    """Bytes held by live tensors on the chip."""
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device: _device_t = None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device: _device_t = None) -> int:
    """Bytes the caching allocator holds, cached blocks included."""
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device: _device_t = None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def memory_stats(device: _device_t = None) -> "OrderedDict[str, Any]":
    """Allocator statistics, keyed as torch.cuda.memory_stats."""
    return torch.accelerator.memory_stats(_index(device))


def reset_peak_memory_stats(device: _device_t = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: _device_t = None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Releases every cached, unused block of every chip."""
    torch.accelerator.empty_cache()


def mem_get_info(device: _device_t = None) -> tuple[int, int]:
    """(free, total) bytes of the chip: capacity minus reserved, and capacity."""
    return torch.accelerator.get_memory_info(_index(device))
