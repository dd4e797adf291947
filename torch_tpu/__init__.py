"""torch-tpu: a native PyTorch device, ``"tpu"``, backed by a virtual TPU.

Importing this package (or just ``import torch``, through PyTorch's
``torch.backends`` entry point) registers the device: ``torch.device("tpu")``,
``tensor.tpu()``, ``module.tpu()`` and the ``torch.tpu`` module.
"""


def _autoload() -> None:
    """Entry point for ``torch.backends``: importing this package registered it.

    Defined before ``import torch``: when this package is imported first,
    that import runs PyTorch's backend autoload, which looks this name up
    on the half-imported package; the registration below then follows."""


import torch  # noqa: E402

REQUIRED_TORCH = "2.13.0"
if torch.__version__.split("+")[0] != REQUIRED_TORCH:
    raise ImportError(
        f"torch-tpu was built for torch=={REQUIRED_TORCH} but torch {torch.__version__} is "
        "installed. A PrivateUse1 extension is tied to one PyTorch ABI: install "
        f"torch=={REQUIRED_TORCH}, or rebuild torch-tpu against this torch."
    )

from torch_tpu import _C  # noqa: E402  (after the version check, on purpose)
from torch_tpu import tpu as _tpu_module  # noqa: E402

__version__ = "0.1.0"


def _register() -> None:
    if torch._C._get_privateuse1_backend_name() == "tpu":
        return
    torch.utils.rename_privateuse1_backend("tpu")
    torch._register_device_module("tpu", _tpu_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_storage=True, for_packed_sequence=True
    )


_register()

# Integration with other PyTorch subsystems, each explained in its module:
# torch.compile's Inductor refuses tpu with a clear message (instead of its
# Pallas/JAX backend), and multiprocessing refuses to share tpu tensors.
# Libraries with their own device lists (accelerate, safetensors) learn tpu
# when they are imported, not before (torch_tpu/_import_hooks.py);
# transformers' Trainer checkpoints the tpu RNG state, and Lightning finds
# torch-tpu's accelerator (torch_tpu/lightning.py) the same way; Ray Train
# workers on tpu_dist get tpu from ray.train.torch.get_device(). The c10d
# backend "tpu_dist" is registered here; its process group is imported when
# the first group is created (torch_tpu/distributed/).
from torch_tpu import _accelerate, _compile, _multiprocessing, _ray, _safetensors, _transformers  # noqa: E402
from torch_tpu import distributed as _distributed  # noqa: E402  (registration only)
from torch_tpu import lightning as _lightning  # noqa: E402  (imports no Lightning itself)

_compile.install()
_multiprocessing.install()
_accelerate.install()
_ray.install()
_safetensors.install()
_transformers.install()
_lightning.install()
_distributed.install()

