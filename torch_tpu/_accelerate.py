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
then), and any other accelerator accelerate finds first.

Several processes (``accelerate launch``, torchrun): accelerate would find
no accelerator it knows and run each process alone. Where it would, the
processes instead form one group over torch-tpu's ``tpu_dist`` backend
(docs/distributed.md) as accelerate's ``MULTI_CPU`` type, the type whose
model wrapping (``DistributedDataParallel`` without ``device_ids``),
data sharding and collectives are device-generic, and each process uses
its chip (``tpu:LOCAL_RANK`` when it has that many, else ``tpu:0``, as
``tpu_dist`` chooses). ``accelerate launch --num_processes N`` (N > 1, no
other mode given) starts them through its torchrun launcher, as it does for
several GPUs; accelerate alone would start one process, since it counts
only the GPUs it knows.

``accelerate.utils.memory.clear_device_cache`` also empties the tpu cache
when tpu is the device accelerate uses, and ``find_executable_batch_size``
(``TrainingArguments(auto_find_batch_size=True)``) halves the batch size
on tpu's out-of-memory error as on CUDA's.
"""
import os
from types import ModuleType

import torch

from torch_tpu._import_hooks import replace, when_imported


def _patch_state(state: ModuleType) -> None:
    def make(original):
        def default_device(self) -> torch.device:
            device = original(self)
            if device.type == "cpu" and torch.tpu.is_available():
                return torch.device("tpu")
            return device
        return default_device

    replace(state.PartialState, "default_device", make)


def _patch_backend(state: ModuleType) -> None:
    distributed_type = state.DistributedType

    def make_prepare(original):
        def _prepare_backend(self, cpu: bool = False, sagemaker_dp=False, backend=None):
            chosen, kind = original(self, cpu, sagemaker_dp, backend)
            multi_process = int(os.environ.get("LOCAL_RANK", -1)) != -1
            if kind == distributed_type.NO and multi_process and not cpu and torch.tpu.is_available():
                return backend or "tpu_dist", distributed_type.MULTI_CPU
            return chosen, kind
        return _prepare_backend

    def make_set_device(original):
        def set_device(self) -> None:
            if self.device is None and self.backend == "tpu_dist" and not self._cpu:
                self.device = torch.device("tpu", torch.tpu.current_device())  # tpu_dist chose it
                return
            original(self)
        return set_device

    replace(state.PartialState, "_prepare_backend", make_prepare)
    replace(state.PartialState, "set_device", make_set_device)


def _patch_launch(launch: ModuleType) -> None:
    def make(original):
        def _validate_launch_command(args):
            args, defaults, mp_from_config_flag = original(args)
            chosen = any(getattr(args, name, False) for name in ("multi_gpu", "cpu", "use_cpu", "tpu",
                                                                  "use_deepspeed", "use_fsdp", "use_megatron_lm"))
            if not chosen and (args.num_processes or 1) > 1 and torch.tpu.is_available():
                args.multi_gpu = True  # accelerate's torchrun launcher; the processes pick tpu_dist
            return args, defaults, mp_from_config_flag
        return _validate_launch_command

    replace(launch, "_validate_launch_command", make)


def _patch_memory(memory: ModuleType) -> None:
    def make_clear(original):
        def clear_device_cache(garbage_collection: bool = False) -> None:
            original(garbage_collection)
            if torch.tpu.is_available():
                torch.tpu.empty_cache()
        return clear_device_cache

    # find_executable_batch_size (and so Trainer's auto_find_batch_size)
    # halves the batch on errors whose text it knows (" out of memory." for
    # CUDA); tpu's OutOfMemoryError reads "tpu:N out of memory: ...".
    def make_reduce(original):
        def should_reduce_batch_size(exception: Exception) -> bool:
            if original(exception):
                return True
            return (isinstance(exception, torch.OutOfMemoryError) and len(exception.args) == 1
                    and isinstance(exception.args[0], str) and exception.args[0].startswith("tpu:")
                    and " out of memory" in exception.args[0])
        return should_reduce_batch_size

    replace(memory, "clear_device_cache", make_clear)
    replace(memory, "should_reduce_batch_size", make_reduce)


def install() -> None:
    when_imported("accelerate.state", _patch_state)
    when_imported("accelerate.state", _patch_backend)
    when_imported("accelerate.commands.launch", _patch_launch)
    when_imported("accelerate.utils.memory", _patch_memory)
