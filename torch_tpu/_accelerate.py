"""Hugging Face accelerate picks tpu the way it picks cuda.

accelerate chooses its device from a fixed list of device types (mps,
cuda, npu, xpu, hpu, ...) and falls back to the CPU, so without help
``Accelerator()``, ``PartialState()`` and therefore ``transformers.Trainer``
would put the model on the CPU while torch.accelerator reports tpu. Once
``accelerate.state`` is imported, ``PartialState.default_device`` answers
``tpu`` where it would have answered ``cpu``.

What stays the user's choice, as with cuda: ``ACCELERATE_TORCH_DEVICE``
(read by accelerate before it asks for the default), ``cpu=True`` /
``TrainingArguments(use_cpu=True)`` (accelerate does not ask for the default
then), and any other accelerator accelerate finds first. Multi-process runs
keep accelerate's own backend choice until torch-tpu has a distributed
backend; then this module is where it is selected.

``accelerate.utils.memory.clear_device_cache`` also empties the tpu cache
when tpu is the device accelerate uses.
"""
from types import ModuleType

import torch

from torch_tpu._import_hooks import when_imported


def _patch_state(state: ModuleType) -> None:
    cls = state.PartialState
    original = cls.default_device.fget
    if getattr(original, "_torch_tpu", False):
        return

    def default_device(self) -> torch.device:
        device = original(self)
        if device.type == "cpu" and torch.tpu.is_available():
            return torch.device("tpu")
        return device

    default_device.__doc__ = (original.__doc__ or "") + "\n        (torch-tpu: tpu before the CPU.)\n"
    default_device._torch_tpu = True
    cls.default_device = property(default_device)


def _patch_memory(memory: ModuleType) -> None:
    original = memory.clear_device_cache
    if getattr(original, "_torch_tpu", False):
        return

    def clear_device_cache(garbage_collection: bool = False) -> None:
        original(garbage_collection)
        if torch.tpu.is_available():
            torch.tpu.empty_cache()

    clear_device_cache.__doc__ = original.__doc__
    clear_device_cache._torch_tpu = True
    memory.clear_device_cache = clear_device_cache


def install() -> None:
    when_imported("accelerate.state", _patch_state)
    when_imported("accelerate.utils.memory", _patch_memory)
