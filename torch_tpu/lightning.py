"""Lightning on tpu: an Accelerator for ``lightning.pytorch`` (and the
standalone ``pytorch_lightning``) that runs the Trainer on torch-tpu's chip.

    trainer = lightning.pytorch.Trainer(accelerator="tpu", devices=1)
    trainer = lightning.pytorch.Trainer(accelerator=torch_tpu.lightning.TPUAccelerator())

Naming. Lightning registers ``"tpu"`` for its XLA accelerator, which needs
torch_xla; without torch_xla that name can only fail ("XLAAccelerator can
not run on your system"). So torch-tpu registers its accelerator as
``"torch_tpu"`` always, and also as ``"tpu"`` when torch_xla is not
installed: then the line a TPU user already writes works, and nothing that
worked before changes meaning. With torch_xla installed, ``"tpu"`` stays
XLA's (its user chose it by installing it) and ``"torch_tpu"`` picks this
one. ``accelerator="auto"`` chooses tpu where Lightning would choose the
CPU, as accelerate does (torch_tpu/_accelerate.py); ``accelerator="cpu"``
keeps the CPU.

Lightning's connector decides a few things by accelerator name or class
that an accelerator cannot declare itself, so three of its methods learn
this one (patched once ``lightning.pytorch`` or ``pytorch_lightning`` is
imported, by a hook from torch_tpu/__init__.py; this module itself is
imported only then or by the user):

- the strategy: Lightning hands any accelerator other than cuda/mps a
  ``SingleDeviceStrategy`` on the *CPU* (and the name "tpu" an XLA
  strategy); here it is a ``SingleDeviceStrategy`` on the chosen chip.
- mixed precision: ``precision="bf16-mixed"`` / ``"16-mixed"`` would
  autocast on cuda; here they autocast on tpu (``GradScaler("tpu")`` for
  float16).
- ``accelerator="auto"``, as above.

and the Trainer's device summary (whose "TPU available" line is about
XLA) gets a line for the tpu chip in use.

One chip per Trainer: ``devices="auto"`` means one chip, and more than
one raises an error (the Trainer's own launch of one process per chip is
not supported yet). ``strategy="ddp"`` on that chip wraps the module in
DistributedDataParallel over tpu_dist: DDPStrategy would hand DDP
``device_ids`` and a ``torch.cuda.Stream`` for any device but the CPU, so
for tpu it takes the CPU's path. Fabric is not covered.
"""
import importlib
import importlib.util
from types import ModuleType
from typing import Any, Callable, Union

import torch

from torch_tpu._import_hooks import replace, when_imported

NAME = "torch_tpu"
_ALIAS = "tpu"
_PACKAGES = ("lightning.pytorch", "pytorch_lightning")
_classes: dict[str, type] = {}

_Devices = Union[int, str, list[int], tuple[int, ...], None]


def _alias_is_ours() -> bool:
    """"tpu" is ours unless torch_xla is installed (found without importing it)."""
    return importlib.util.find_spec("torch_xla") is None


def _parse_devices(devices: _Devices, error: type) -> list[int]:
    """Lightning's device forms (N, -1, "N", "-1", "0,1", [0, 1]) as chip indices."""
    count = torch.tpu.device_count() if torch.tpu.is_available() else 0
    if isinstance(devices, str):
        text = devices.strip()
        if text in ("-1", "auto"):
            devices = -1 if text == "-1" else 1
        elif "," in text:
            devices = [int(part) for part in text.split(",") if part.strip()]
        else:
            devices = int(text)
    if isinstance(devices, bool) or devices is None:
        raise error(f"torch-tpu: devices={devices!r} is not a number of chips or a list of chip indices")
    if isinstance(devices, int):
        if devices == -1:
            indices = list(range(count))
        elif devices > 0:
            indices = list(range(devices))
        else:
            raise error(f"torch-tpu: devices={devices} is not a valid number of chips")
    else:
        indices = [int(i) for i in devices]
    if not indices or len(set(indices)) != len(indices) or any(i < 0 or i >= count for i in indices):
        raise error(f"torch-tpu: devices={devices!r} asks for chips {indices}, but the chips are "
                    f"{list(range(count))} (set TORCH_TPU_CHIPS for more)")
    return indices


def _build(package: str) -> type:
    """The accelerator class for one Lightning package (``lightning.pytorch``
    and ``pytorch_lightning`` each have their own base class)."""
    base = importlib.import_module(f"{package}.accelerators").Accelerator
    error = importlib.import_module(f"{package}.utilities.exceptions").MisconfigurationException

    class TPUAccelerator(base):
        """torch-tpu's chip as a Lightning accelerator (one chip per process)."""

        def setup_device(self, device: torch.device) -> None:
            if device.type != "tpu":
                raise error(f"torch-tpu: TPUAccelerator needs a tpu device, got {device} (from the strategy: "
                            f"strategy='auto' or SingleDeviceStrategy(device='tpu') runs on the chip)")
            torch.tpu.set_device(device)

        def teardown(self) -> None:
            torch.tpu.empty_cache()

        def get_device_stats(self, device: Any) -> dict[str, Any]:
            """The chip's memory statistics (torch.tpu.memory_stats), as cuda's accelerator reports."""
            return dict(torch.tpu.memory_stats(device))

        @staticmethod
        def parse_devices(devices: _Devices) -> list[int]:
            return _parse_devices(devices, error)

        @staticmethod
        def get_parallel_devices(devices: _Devices) -> list[torch.device]:
            indices = devices if isinstance(devices, list) else _parse_devices(devices, error)
            return [torch.device("tpu", i) for i in indices]

        @staticmethod
        def auto_device_count() -> int:
            """One: a Trainer runs on one chip (its own multi-chip launch is not supported yet)."""
            return 1

        @staticmethod
        def is_available() -> bool:
            return torch.tpu.is_available()

        @staticmethod
        def name() -> str:
            return NAME

        @classmethod
        def register_accelerators(cls, accelerator_registry: Any) -> None:
            description = "torch-tpu's virtual TPU chip (torch_tpu.lightning.TPUAccelerator)"
            accelerator_registry.register(NAME, cls, description=description, override=True)
            if _alias_is_ours():
                accelerator_registry.register(_ALIAS, cls, description=description, override=True)

    TPUAccelerator.__module__ = __name__
    TPUAccelerator.__doc__ = f"{TPUAccelerator.__doc__}\n\n    For ``{package}``.\n    "
    return TPUAccelerator


def accelerator_class(package: str = "lightning.pytorch") -> type:
    """torch-tpu's accelerator class for ``package`` ("lightning.pytorch" or
    "pytorch_lightning"): what to instantiate for ``Trainer(accelerator=...)``."""
    if package not in _PACKAGES:
        raise ValueError(f"torch-tpu: no Lightning accelerator for {package!r}; choose one of {_PACKAGES}")
    if package not in _classes:
        built = _build(package)
        # Building imports the package, whose import hook may have built and
        # registered the class already: keep that one, so there is one class.
        _classes.setdefault(package, built)
    return _classes[package]


def __getattr__(name: str) -> Any:
    # TPUAccelerator is built on first use, so importing this module does
    # not import Lightning.
    if name == "TPUAccelerator":
        return accelerator_class("lightning.pytorch")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _patch_connector(package: str, accelerator: type) -> None:
    connectors = importlib.import_module(f"{package}.trainer.connectors.accelerator_connector")
    strategies = importlib.import_module(f"{package}.strategies")
    precision = importlib.import_module(f"{package}.plugins.precision")
    error = importlib.import_module(f"{package}.utilities.exceptions").MisconfigurationException
    cls = connectors._AcceleratorConnector

    def make_auto(choose_auto: Callable) -> Callable:
        def _choose_auto_accelerator() -> str:
            choice = choose_auto()
            return NAME if choice == "cpu" and accelerator.is_available() else choice
        return _choose_auto_accelerator

    def make_strategy(choose_strategy: Callable) -> Callable:
        def _choose_strategy(self: Any) -> Any:
            if not isinstance(self.accelerator, accelerator):
                return choose_strategy(self)
            if self._num_nodes_flag > 1 or len(self._parallel_devices) > 1:
                raise error(f"torch-tpu: Lightning's Trainer runs on one tpu chip (devices=1, num_nodes=1); "
                            f"launching several from the Trainer is not supported yet; got devices "
                            f"{self._parallel_devices} on {self._num_nodes_flag} node(s)")
            return strategies.SingleDeviceStrategy(device=self._parallel_devices[0])
        return _choose_strategy

    def make_precision(init_precision: Callable) -> Callable:
        def _check_and_init_precision(self: Any) -> Any:
            if (isinstance(self.accelerator, accelerator) and self._precision_plugin_flag is None
                    and self._precision_flag in ("16-mixed", "bf16-mixed")):
                self._validate_precision_choice()
                return precision.MixedPrecision(self._precision_flag, device="tpu")
            return init_precision(self)
        return _check_and_init_precision

    replace(cls, "_choose_auto_accelerator", make_auto)
    replace(cls, "_choose_strategy", make_strategy)
    replace(cls, "_check_and_init_precision", make_precision)


def _patch_ddp(package: str) -> None:
    """DDPStrategy gives DDP ``device_ids`` and a ``torch.cuda.Stream`` for
    every device but the CPU; for tpu it takes the CPU's path (no
    device_ids: DDP uses the module's own device), and its process group
    backend is already PyTorch's default for tpu, tpu_dist."""
    def make(original: Callable) -> Callable:
        def determine_ddp_device_ids(self: Any) -> Any:
            return None if self.root_device.type == "tpu" else original(self)
        return determine_ddp_device_ids

    replace(importlib.import_module(f"{package}.strategies").DDPStrategy, "determine_ddp_device_ids", make)


def _patch_device_log(package: str, accelerator: type) -> None:
    setup = importlib.import_module(f"{package}.trainer.setup")
    rank_zero_info = importlib.import_module(f"{package}.utilities.rank_zero").rank_zero_info

    def make(original: Callable) -> Callable:
        def _log_device_info(trainer: Any) -> None:
            original(trainer)
            # A strategy given by the user may have its own device (the registry's
            # "single_device" is on the CPU): setup_device refuses it at fit time.
            if isinstance(trainer.accelerator, accelerator) and trainer.strategy.root_device.type == "tpu":
                name = torch.tpu.get_device_name(trainer.strategy.root_device)
                rank_zero_info(f"torch-tpu: using {trainer.num_devices} of {torch.tpu.device_count()} tpu "
                               f"chip(s) ({name}), accelerator {NAME!r}")
        return _log_device_info

    replace(setup, "_log_device_info", make)


def _install_into(package: str) -> Callable[[ModuleType], None]:
    def hook(module: ModuleType) -> None:
        accelerator = accelerator_class(package)
        accelerator.register_accelerators(importlib.import_module(f"{package}.accelerators").AcceleratorRegistry)
        _patch_connector(package, accelerator)
        _patch_device_log(package, accelerator)
        _patch_ddp(package)

    return hook


def install() -> None:
    """Registers the accelerator once a Lightning package has been imported."""
    for package in _PACKAGES:
        when_imported(package, _install_into(package))
