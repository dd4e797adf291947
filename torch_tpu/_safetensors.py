"""safetensors loads onto ``device="tpu"``.

safetensors parses the ``device`` argument of ``safe_open`` (and so of
``safetensors.torch.load_file``) in its Rust core against its own list of
device names, and refuses "tpu" ("device tpu is invalid"). An integer
index passes that parser and reaches PyTorch as ``tensor.to(index)``, which
PyTorch reads as a chip of the current accelerator: tpu.

So once ``safetensors`` is imported, its ``safe_open`` (in ``safetensors``
and in ``safetensors.torch``, whose ``load_file`` calls it) is replaced by
a function that turns "tpu", "tpu:N" and ``torch.device("tpu", N)`` into the
chip index and passes everything else through unchanged. The object it
returns is safetensors' own, so ``get_tensor``, ``get_slice``, ``keys`` and
the context manager behave as before. Nothing in safetensors' files on disk
changes.

Limit: code that bound ``safe_open`` to its own name before torch was
imported (``from safetensors import safe_open`` ahead of ``import torch``)
keeps the original, which accepts the chip index (``device=0``).
"""
from types import ModuleType
from typing import Any

import torch

from torch_tpu._import_hooks import replace, when_imported
from torch_tpu.tpu._utils import _get_device_index


def _tpu_index(device: Any) -> Any:
    """The chip index for a tpu device given as a string or torch.device; any
    other value unchanged."""
    if isinstance(device, str) and device.strip().split(":")[0].strip() == "tpu":
        device = torch.device(device)
    if isinstance(device, torch.device) and device.type == "tpu":
        if torch.accelerator.current_accelerator() != torch.device("tpu"):
            raise RuntimeError(
                f"safe_open: device {device} needs tpu to be torch's current accelerator (the chip "
                f"index goes through torch.accelerator), but it is {torch.accelerator.current_accelerator()}")
        return _get_device_index(device, optional=True)  # checked: a chip this process has
    return device


def _patch(module: ModuleType) -> None:
    def make(original: Any) -> Any:
        def safe_open(filename: Any, framework: str, device: Any = "cpu", *args: Any, **kwargs: Any) -> Any:
            return original(filename, framework, _tpu_index(device), *args, **kwargs)
        return safe_open

    if hasattr(module, "safe_open"):
        replace(module, "safe_open", make)


def install() -> None:
    when_imported("safetensors", _patch)
    when_imported("safetensors.torch", _patch)
