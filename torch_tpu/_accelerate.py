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
when tpu is the device accelerate uses, and ``find_executable_batch_size``
(``TrainingArguments(auto_find_batch_size=True)``) halves the batch size
on tpu's out-of-memory error as on CUDA's.
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

    # find_executable_batch_size (and so Trainer's auto_find_batch_size)
    # halves the batch on errors whose text it knows (" out of memory." for
    # CUDA); tpu's OutOfMemoryError reads "tpu:N out of memory: ...".
    reduce = memory.should_reduce_batch_size

    def should_reduce_batch_size(exception: Exception) -> bool:
        if reduce(exception):
            return True
        return (isinstance(exception, torch.OutOfMemoryError) and len(exception.args) == 1
                and isinstance(exception.args[0], str) and exception.args[0].startswith("tpu:")
                and " out of memory" in exception.args[0])

    should_reduce_batch_size.__doc__ = reduce.__doc__
    should_reduce_batch_size._torch_tpu = True
    memory.should_reduce_batch_size = should_reduce_batch_size


def install() -> None:
    when_imported("accelerate.state", _patch_state)
    when_imported("accelerate.utils.memory", _patch_memory)
