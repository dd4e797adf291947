"""Ray Train workers whose process group runs on ``tpu_dist`` train on tpu.

``TorchTrainer(..., torch_config=TorchConfig(backend="tpu_dist"))`` needs
nothing from here to form the group: Ray calls ``torch_tpu._loader.load()``
and then ``init_process_group("tpu_dist")`` in every worker. But Ray picks
a worker's device from the accelerators it schedules (GPU, HPU, NPU, TPU
VMs), and a worker with none of them gets its CPU device manager: so
``ray.train.torch.get_device()`` would answer ``cpu``, ``prepare_model``
would move the model there and ``prepare_data_loader`` the batches.

Once ``ray.air._internal.device_manager.cpu`` is imported, that manager
answers ``tpu:N`` (the chip ``tpu_dist`` chose for the process,
docs/distributed.md) in a process whose default group serves tpu tensors
with ``tpu_dist``, and ``cpu`` otherwise, as before: Ray's default backend
without GPUs, gloo, keeps training on the CPU. Ray sets
``ACCELERATE_TORCH_DEVICE`` in each worker before it creates the group
(Ray Train v2), so once ``ray.train.torch.config`` is imported, the group's
set-up sets it again afterwards, to the same device.
"""
import os
from types import ModuleType
from typing import List

import torch

from torch_tpu._import_hooks import replace, when_imported


def _tpu_dist_device() -> "torch.device | None":
    """This process's chip, if its default process group serves tpu tensors
    with tpu_dist; else None."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    config = dist.get_backend_config()  # "cpu:tpu_dist,tpu:tpu_dist", or one backend name
    backends = dict(item.split(":", 1) if ":" in item else ("tpu", item) for item in config.split(","))
    if backends.get("tpu") != "tpu_dist":
        return None
    return torch.device("tpu", torch.tpu.current_device())


def _patch_cpu_manager(cpu: ModuleType) -> None:
    def make(original):
        def get_devices(self) -> List[torch.device]:
            device = _tpu_dist_device()
            return [device] if device is not None else original(self)
        return get_devices

    replace(cpu.CPUTorchDeviceManager, "get_devices", make)


def _patch_config(config: ModuleType) -> None:
    def make(original):
        def _setup_torch_process_group(*args, **kwargs):
            original(*args, **kwargs)
            device = _tpu_dist_device()
            if device is not None and os.environ.get("ACCELERATE_TORCH_DEVICE") == "cpu":
                os.environ["ACCELERATE_TORCH_DEVICE"] = str(device)
        return _setup_torch_process_group

    replace(config, "_setup_torch_process_group", make)


def install() -> None:
    when_imported("ray.air._internal.device_manager.cpu", _patch_cpu_manager)
    when_imported("ray.train.torch.config", _patch_config)
