"""``torch_tpu._loader.load()``: the entry point Ray Train calls for the
``tpu_dist`` backend.

Ray's ``TorchConfig(backend="tpu_dist")`` runs, in each worker, before
``init_process_group``: ``import torch_tpu._loader; torch_tpu._loader.load()``
(``ray.air._internal.device_manager.tpu``, TorchTPU's layout). Here importing
torch already imported torch-tpu (PyTorch's backend autoload) and with it
registered ``tpu_dist``, so ``load()`` only makes sure of that, also where
the autoload is off (``TORCH_DEVICE_BACKEND_AUTOLOAD=0``).
"""
import torch

import torch_tpu  # noqa: F401  (registers the device and tpu_dist)


def load() -> None:
    """Makes the tpu device and the ``tpu_dist`` c10d backend available in
    this process (idempotent)."""
    import torch.distributed as dist

    if not dist.is_backend_available("tpu_dist"):  # the package was imported without its install step
        raise RuntimeError("torch-tpu is imported but its c10d backend tpu_dist is not registered")
    if not torch.tpu.is_available():
        raise RuntimeError("torch-tpu is imported but has no tpu chip")
