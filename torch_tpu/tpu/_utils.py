"""Device-index parsing shared by torch.tpu and torch.serialization."""
import re
from typing import Any, Optional, Union

import torch

_device_t = Optional[Union[torch.device, str, int]]


def _check_index(index: int) -> int:
    """`index` if it names a chip of this process; else a RuntimeError that
    names it (checked here, before PyTorch narrows it to 8 bits)."""
    from torch_tpu import _C

    if not -(2**63) <= index < 2**63:  # beyond what the binding takes
        raise RuntimeError(f"device: invalid device index tpu:{index}")
    _C._check_device_index(index)
    return index


def _get_device_index(device: Any, optional: bool = False, allow_cpu: bool = False) -> int:
    """The chip index named by ``device`` (an int, "tpu", "tpu:1" or a
    torch.device); the current chip for None or a device without index when
    ``optional``. Raises ValueError for another device type and
    RuntimeError, naming the index, for a chip this process does not have."""
    from torch_tpu import _C

    if isinstance(device, str):
        # Read the index before torch.device does: it keeps 8 bits of it.
        match = re.fullmatch(r"\s*tpu\s*:\s*(-?\d+)\s*", device)
        if match:
            return _check_index(int(match.group(1)))
        device = torch.device(device)
    if isinstance(device, torch.device):
        if allow_cpu and device.type == "cpu":
            return -1
        if device.type != "tpu":
            raise ValueError(f"expected a tpu device, got {device}")
        if device.index is not None:
            return _check_index(device.index)
        device = None
    if device is None:
        if not optional:
            raise ValueError("expected a tpu device with an index, got None")
        return _C._current_device()
    if isinstance(device, int) and not isinstance(device, bool):
        return _check_index(device)
    raise ValueError(f"expected a tpu device, an int or None, got {device!r}")
