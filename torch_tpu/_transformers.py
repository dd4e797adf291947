"""Hugging Face transformers' Trainer checkpoints the tpu random state.

``Trainer._save_rng_state`` writes the python, numpy and CPU generators
plus those of a fixed list of devices (cuda, xla, npu, hpu, mlu, musa) to
``rng_state.pth``, and ``_load_rng_state`` restores the same list. Without
help, a run resumed from a checkpoint on tpu would draw different dropout
masks from the uninterrupted run, so ``resume_from_checkpoint`` would not
reproduce it. Once ``transformers.trainer`` is imported, both methods also
handle a ``"tpu"`` entry in the same file, with the same rules as cuda's:
the current chip's state in a single-process run, every chip's state
(``get_rng_state_all``) in a distributed one.

The entry is added to the file transformers has just written (read back,
extended, written again) rather than by copying transformers' method, so a
new release's other RNG entries are kept. A checkpoint without the entry
(written by a plain transformers) still loads: the tpu generator is then
left as it is, which is transformers' own behaviour for a missing device.
"""
import os
from types import ModuleType
from typing import Any, Callable, Optional

import torch

from torch_tpu._import_hooks import replace, when_imported

_KEY = "tpu"


def _rng_file(trainer: Any, directory: str) -> str:
    """The file transformers reads and writes for this process."""
    if trainer.args.world_size <= 1:
        return os.path.join(directory, "rng_state.pth")
    return os.path.join(directory, f"rng_state_{trainer.args.process_index}.pth")


def _is_distributed(trainer: Any, trainer_module: ModuleType) -> bool:
    return trainer.args.parallel_mode == trainer_module.ParallelMode.DISTRIBUTED


def _load(path: str, trainer_module: ModuleType) -> dict:
    # The file holds numpy's state: transformers' allow-list of its globals.
    with trainer_module.safe_globals():
        return torch.load(path, weights_only=True)


def _wrap_save(original: Callable, trainer_module: ModuleType) -> Callable:
    def _save_rng_state(self: Any, output_dir: str) -> None:
        original(self, output_dir)
        path = _rng_file(self, output_dir)
        if not torch.tpu.is_available() or not os.path.isfile(path):
            return
        states = _load(path, trainer_module)
        if _is_distributed(self, trainer_module):
            states[_KEY] = torch.tpu.get_rng_state_all()
        else:
            states[_KEY] = torch.tpu.get_rng_state()
        torch.save(states, path)

    return _save_rng_state


def _wrap_load(original: Callable, trainer_module: ModuleType) -> Callable:
    def _load_rng_state(self: Any, checkpoint: Optional[str]) -> None:
        original(self, checkpoint)
        if checkpoint is None or not torch.tpu.is_available():
            return
        path = _rng_file(self, checkpoint)
        if not os.path.isfile(path):
            return
        states = _load(path, trainer_module)
        if _KEY in states:
            # transformers' helper: the same error handling as for cuda.
            trainer_module.set_rng_state_for_device("TPU", torch.tpu, states,
                                                    _is_distributed(self, trainer_module))

    return _load_rng_state


def _patch_trainer(trainer_module: ModuleType) -> None:
    replace(trainer_module.Trainer, "_save_rng_state", lambda original: _wrap_save(original, trainer_module))
    replace(trainer_module.Trainer, "_load_rng_state", lambda original: _wrap_load(original, trainer_module))


def install() -> None:
    when_imported("transformers.trainer", _patch_trainer)
