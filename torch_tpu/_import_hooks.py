"""Run a function when a module is imported: how torch-tpu meets libraries
that keep their own list of devices (accelerate, safetensors, Lightning)
without patching their files on disk and without importing them early.

``when_imported("accelerate.state", fn)`` calls ``fn(module)`` once: at
once if the module is already in ``sys.modules``, otherwise right after
its first import finishes (a finder on ``sys.meta_path`` wraps the loader
of just that module). An exception in ``fn`` becomes a warning: an
integration that no longer fits a new release of a library must not break
the import of that library.

``replace(owner, name, make)`` is how the integrations change a library:
``owner.name`` becomes ``make(original)``, once.
"""
import functools
import importlib.abc
import importlib.machinery
import inspect
import sys
import threading
import warnings
from types import ModuleType
from typing import Any, Callable

_Hook = Callable[[ModuleType], None]
_pending: dict[str, list[_Hook]] = {}
_lock = threading.Lock()


def _run(name: str, module: ModuleType, hooks: list[_Hook]) -> None:
    for hook in hooks:
        try:
            hook(module)
        except Exception as error:  # noqa: BLE001  (any failure is only a warning)
            warnings.warn(f"torch-tpu: its integration with {name} failed and is skipped: {error!r}",
                          RuntimeWarning, stacklevel=2)


class _Loader(importlib.abc.Loader):
    """The module's own loader, then the hooks waiting for it."""

    def __init__(self, name: str, loader: importlib.abc.Loader):
        self._name = name
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec):
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        with _lock:
            hooks = _pending.pop(self._name, [])
        _run(self._name, module, hooks)

    def __getattr__(self, attr: str):  # get_source, get_filename, ... for tools
        return getattr(self._loader, attr)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a watched name it asks the finders after it
    and wraps the loader they return."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(fullname, spec.loader)
                return spec
        return None


_finder = _Finder()


class _SpecWatch(importlib.machinery.ModuleSpec):
    """The class a partially initialized module's spec is switched to: the
    import system sets ``spec._initializing = False`` once the module's
    code has run (importlib._bootstrap._load_unlocked, also when it
    failed), and that assignment runs the hooks waiting for the module."""

    def __setattr__(self, attr: str, value) -> None:
        object.__setattr__(self, attr, value)
        if attr != "_initializing" or value:
            return
        with _lock:
            hooks = _deferred.pop(self.name, [])
        if not hooks:
            return
        module = sys.modules.get(self.name)
        if module is not None and getattr(module, "__spec__", None) is self:
            _run(self.name, module, hooks)
        else:  # its import failed: wait for the next one
            for hook in hooks:
                when_imported(self.name, hook)


_deferred: dict[str, list[_Hook]] = {}


def _defer(name: str, module: ModuleType, hook: _Hook) -> bool:
    """For a module still running its own code (it imported torch, whose
    backend autoload imported torch-tpu, which asks for it): arrange for
    ``hook`` to run once that code has finished. False if it cannot be."""
    spec = getattr(module, "__spec__", None)
    if spec is None or not getattr(spec, "_initializing", False) or type(spec) not in (
            importlib.machinery.ModuleSpec, _SpecWatch):
        return False
    with _lock:
        _deferred.setdefault(name, []).append(hook)
    spec.__class__ = _SpecWatch
    return True


def when_imported(name: str, hook: _Hook) -> None:
    """Call ``hook(module)`` once the module ``name`` is imported (now, if it
    is; when its import finishes, if it is being imported: ``import
    pytorch_lightning`` before ``import torch`` imports torch-tpu halfway
    through pytorch_lightning's own code)."""
    module = sys.modules.get(name)
    if module is not None:
        if not _defer(name, module, hook):
            _run(name, module, [hook])
        return
    with _lock:
        _pending.setdefault(name, []).append(hook)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)


_MARK = "_torch_tpu"


def replace(owner: Any, name: str, make: Callable[[Callable], Callable]) -> None:
    """Sets ``owner.name`` to ``make(original)``, with the original's name and
    docstring, unless it is already a replacement (a hook that runs twice, a
    library imported under two names, keeps one layer). A property is
    replaced through its getter, a staticmethod stays one."""
    static = inspect.getattr_static(owner, name)
    original = static.fget if isinstance(static, property) else getattr(owner, name)
    if getattr(original, _MARK, False):
        return
    replacement = functools.wraps(original)(make(original))
    setattr(replacement, _MARK, True)
    if isinstance(static, property):
        replacement = property(replacement)
    elif isinstance(static, staticmethod):
        replacement = staticmethod(replacement)
    setattr(owner, name, replacement)
