"""Random number generators: one Philox generator per chip."""
from typing import Iterable, Union

import torch

from torch_tpu import _C
from torch_tpu.tpu._utils import _device_t, _get_device_index


def _generator(device: _device_t = None) -> torch.Generator:
    return _C._default_generator(_get_device_index(device, optional=True))


class _DefaultGenerators:
    """torch.tpu.default_generators[i]: chip i's default generator."""

    def __getitem__(self, index: int) -> torch.Generator:
        return _C._default_generator(index)

    def __len__(self) -> int:
        return _C._device_count()

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _DefaultGenerators()


def manual_seed(seed: int) -> None:
    """Seeds the current chip's generator."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for g in default_generators:
        g.manual_seed(int(seed))


def seed() -> None:
    """Seeds the current chip's generator with a non-deterministic number."""
    _generator().seed()


def seed_all() -> None:
    s = _generator().seed()
    manual_seed_all(s)


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: _device_t = "tpu") -> torch.Tensor:
    """The generator state of a chip: a CPU uint8 tensor (seed, offset)."""
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: _device_t = "tpu") -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [g.get_state() for g in default_generators]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for g, state in zip(default_generators, new_states):
        g.set_state(state)


__all__: list[Union[str]] = [
    "default_generators", "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
    "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
]
