"""Device-index parsing shared by torch.tpu and torch.serialization."""
from typing import Any, Optional, Union

import torch

_device_t = Optional[Union[torch.device, str, int]]


def _get_device_index(device: Any, optional: bool = False, allow_cpu: bool = False) -> int:
    """The chip index named by ``device`` (an int, "tpu", "tpu:1" or a
    torch.device); the current chip for None or a device without index when
    ``optional``. Raises ValueError for another device type."""
    from torch_tpu import _C

    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if allow_cpu and device.type == "cpu":
            return -1
        if device.type != "tpu":
            raise ValueError(f"expected a tpu device, got {device}")
        if device.index is not None:
            return device.index
        device = None
    if device is None:
        if not optional:
            raise ValueError("expected a tpu device with an index, got None")
        return _C._current_device()
    if isinstance(device, int):
        return device
    raise ValueError(f"expected a tpu device, an int or None, got {device!r}")
