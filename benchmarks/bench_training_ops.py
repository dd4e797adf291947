"""Ops a training loop meets besides its products: activations and their
gradients, the piecewise backwards, selection and masks, the CNN layers,
index_add, each at a natural size, tpu (strict mode) against PyTorch's
CPU backend in one process. Prints a markdown table of tpu/CPU time
ratios (below 1: the virtual TPU is faster); every op runs natively (the
CPU fallback is an error).

    python benchmarks/bench_training_ops.py [--repeat N] [name filters...]

The machine is noisy: compare ratios, not absolute times. Timed with
suite.interleaved (see suite.py)."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from suite import case_table

A = torch.ops.aten
N = 1 << 20


def inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "x": torch.randn(N, generator=g), "g": torch.randn(N, generator=g),
        "y": torch.rand(N, generator=g) * 2 - 1, "p": torch.rand(N, generator=g) + 0.1,
        "m": torch.rand(N, generator=g) < 0.5, "x2": torch.randn(1024, 1024, generator=g),
        "img": torch.randn(8, 64, 32, 32, generator=g), "w": torch.randn(64, 64, 3, 3, generator=g),
        "rows": torch.randint(0, 1024, (1024,), generator=g),
    }


Case = tuple[str, Callable[[dict[str, torch.Tensor]], object]]
CASES: list[Case] = [
    ("gelu (erf), 1M", lambda d: F.gelu(d["x"])),
    ("gelu_backward (erf), 1M", lambda d: A.gelu_backward(d["g"], d["x"])),
    ("gelu_backward (tanh), 1M", lambda d: A.gelu_backward(d["g"], d["x"], approximate="tanh")),
    ("silu, 1M", lambda d: F.silu(d["x"])),
    ("silu_backward, 1M", lambda d: A.silu_backward(d["g"], d["x"])),
    ("threshold_backward (relu), 1M", lambda d: A.threshold_backward(d["g"], d["x"], 0.0)),
    ("sigmoid_backward, 1M", lambda d: A.sigmoid_backward(d["g"], d["y"])),
    ("tanh_backward, 1M", lambda d: A.tanh_backward(d["g"], d["y"])),
    ("leaky_relu_backward, 1M", lambda d: A.leaky_relu_backward(d["g"], d["x"], 0.01, False)),
    ("hardswish, 1M", lambda d: F.hardswish(d["x"])),
    ("hardswish_backward, 1M", lambda d: A.hardswish_backward(d["g"], d["x"])),
    ("topk(8) of 1024 rows of 1024", lambda d: d["x2"].topk(8, 1)),
    ("nonzero of a 1M bool mask", lambda d: d["m"].nonzero()),
    ("sum of a 1M bool mask", lambda d: d["m"].sum()),
    ("x[mask], 1M", lambda d: d["x"][d["m"]]),
    ("index_add of 1024 rows of 1024", lambda d: d["x2"].index_add(0, d["rows"], d["x2"])),
    ("conv2d 3x3, 8x64x32x32 -> 64", lambda d: F.conv2d(d["img"], d["w"], padding=1)),
    ("batch_norm (training), 8x64x32x32", lambda d: F.batch_norm(d["img"], None, None, training=True)),
    ("max_pool2d 2x2, 8x64x32x32", lambda d: F.max_pool2d(d["img"], 2)),
    ("avg_pool2d 2x2, 8x64x32x32", lambda d: F.avg_pool2d(d["img"], 2)),
    # Known slow: still computed per element in f64 (the reference's form).
    ("rsqrt, 1M", lambda d: d["p"].rsqrt()),
    ("softplus, 1M", lambda d: F.softplus(d["x"])),
    ("elu, 1M", lambda d: F.elu(d["x"])),
    ("mish_backward, 1M", lambda d: A.mish_backward(d["g"], d["x"])),
    ("atan2, 1M", lambda d: torch.atan2(d["x"], d["g"])),
    ("randn, 1M", lambda d: torch.randn(N, device=d["x"].device)),
]


def main() -> None:
    case_table(__doc__, "op", CASES, inputs)


if __name__ == "__main__":
    main()
