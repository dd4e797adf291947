"""torch.compile and the tpu device: a clear error from Inductor.

There is no native compile backend for tpu yet. PyTorch's Inductor already
knows a device named "tpu" (Google's TPUs, for which it generates Pallas
kernels run by JAX), so without this module ``torch.compile(f)`` on tpu
tensors runs that code generator and fails with "No module named 'jax'".

Inductor lets a device bring its own code generator
(``torch._inductor.codegen.common.register_backend_for_device``) and fills
in its defaults only for devices nobody registered, when it first compiles.
This module registers, for "tpu", a code generator that refuses with a
message naming what works instead:

    torch.compile(f, backend="eager")      # Dynamo graph capture, tpu kernels
    torch.compile(f, backend="aot_eager")  # plus AOTAutograd (joint forward/backward)

A real tpu backend will replace the registration.

Importing Inductor takes over a second, far too much for ``import torch``
(which loads this package), so the registration runs only once Inductor's
registry module is imported: a one-shot import hook on ``sys.meta_path``
registers right after that module has executed, before Inductor can use
it. If the module is imported already, the registration happens at once.
"""
import importlib.abc
import importlib.util
import sys
import threading

_REGISTRY_MODULE = "torch._inductor.codegen.common"

WORKING_BACKENDS = ("eager", "aot_eager")

MESSAGE = (
    "torch.compile: the tpu device has no compile backend yet, so Inductor (torch.compile's "
    "default backend) cannot generate code for tpu tensors. Use "
    "torch.compile(fn, backend='eager') or torch.compile(fn, backend='aot_eager'): both capture "
    "the graph with Dynamo and run it with the tpu device's own kernels (aot_eager also traces "
    "the backward with AOTAutograd). Or call the function uncompiled."
)


class _RefuseMeta(type):
    """Any attribute Inductor asks of the tpu code generator that it does
    not have (get_backend_features, create, ...) raises the message."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise RuntimeError(MESSAGE)


class NoTpuCodegen(metaclass=_RefuseMeta):
    """Stands for both the tpu kernel scheduling and the tpu wrapper code
    generator in Inductor's registry; constructing or using it raises
    RuntimeError(MESSAGE)."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError(MESSAGE)


def _register(common) -> None:
    """Registers NoTpuCodegen for "tpu", replacing Inductor's own Pallas
    entry if it got there first (Inductor registered before this package
    was imported), but not a code generator from this package."""
    current = common.get_scheduling_for_device("tpu")
    if current is None or not getattr(current, "__module__", "").startswith("torch_tpu"):
        common.register_backend_for_device("tpu", NoTpuCodegen, NoTpuCodegen)


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """One-shot finder: lets the normal machinery find the registry
    module, and wraps its loader so that _register runs right after the
    module body."""

    def __init__(self):
        self._lock = threading.Lock()

    def find_spec(self, fullname, path, target=None):
        if fullname != _REGISTRY_MODULE:
            return None
        with self._lock:
            if self not in sys.meta_path:
                return None
            sys.meta_path.remove(self)  # one shot; the lookup below must not see it
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_register(module):
            exec_module(module)
            _register(module)

        spec.loader.exec_module = exec_and_register
        return spec


def install() -> None:
    """Registers now if Inductor's registry is loaded, else on its import."""
    common = sys.modules.get(_REGISTRY_MODULE)
    if common is not None:
        _register(common)
    elif not any(isinstance(f, _RegisterAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())
