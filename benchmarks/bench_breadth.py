"""The breadth of the native kernels: ops a model or a training loop meets
besides its products and activations (masks, mixed dtypes, broadcasts
and transposed operands, conversions, integer and bool ops, reductions
along other dims, gathers, scans, triangles), each on one
[8, 12, 256, 256] tensor (6.3M elements: a GPT-2 training step's
attention scores), tpu (strict mode) against PyTorch's CPU backend in one
process. Prints a markdown table of tpu/CPU time ratios (below 1: the
virtual TPU is faster), with every op running natively (the CPU fallback
is an error).

    python benchmarks/bench_breadth.py [--repeat N] [name filters...]

The machine is noisy: compare ratios, not absolute times. Timed with
suite.interleaved (see suite.py)."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from suite import case_table

S = (8, 12, 256, 256)


def inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "f": torch.randn(S, generator=g), "h": torch.randn(S, generator=g).bfloat16(),
        "b": torch.rand(S, generator=g) < 0.5, "i": torch.randint(0, 100, S, generator=g),
        "i32": torch.randint(0, 100, S, generator=g, dtype=torch.int32),
        "u8": torch.randint(0, 100, S, generator=g, dtype=torch.uint8),
        "rowb": torch.rand(8, 12, 256, 1, generator=g) < 0.5, "rowf": torch.randn(8, 12, 256, 1, generator=g),
        "colf": torch.randn(256, generator=g), "fT": torch.randn(S, generator=g).transpose(-1, -2),
        "idx": torch.randint(0, 256, S, generator=g),
    }


Case = tuple[str, Callable[[dict[str, torch.Tensor]], object]]
CASES: list[Case] = [
    ("mul f32 * bool mask", lambda d: d["f"] * d["b"]),
    ("mul f32 * int64", lambda d: d["f"] * d["i"]),
    ("mul bf16 * bool mask", lambda d: d["h"] * d["b"]),
    ("add f32 + bf16", lambda d: d["f"] + d["h"]),
    ("add f32 + transposed f32", lambda d: d["f"] + d["fT"]),
    ("add f32 + row [.., 1]", lambda d: d["f"] + d["rowf"]),
    ("add f32 + column [256]", lambda d: d["f"] + d["colf"]),
    ("where(row mask, 0, f32)", lambda d: torch.where(d["rowb"], 0.0, d["f"])),
    ("where(mask, f32, f32)", lambda d: torch.where(d["b"], d["f"], d["f"])),
    ("masked_fill", lambda d: d["f"].masked_fill(d["b"], -1e9)),
    ("isneginf", lambda d: torch.isneginf(d["f"])),
    ("isnan", lambda d: torch.isnan(d["f"])),
    ("logical_not bool", lambda d: ~d["b"]),
    ("bool & bool", lambda d: d["b"] & d["b"]),
    ("f32 > 0", lambda d: d["f"] > 0),
    ("int64 + int64", lambda d: d["i"] + d["i"]),
    ("int32 * 2", lambda d: d["i32"] * 2),
    ("uint8 != 0", lambda d: d["u8"] != 0),
    ("bool -> f32", lambda d: d["b"].to(torch.float32)),
    ("int64 -> f32", lambda d: d["i"].to(torch.float32)),
    ("f32 -> int64", lambda d: d["f"].to(torch.int64)),
    ("f32 -> bf16", lambda d: d["f"].to(torch.bfloat16)),
    ("transposed f32 -> contiguous", lambda d: d["fT"].contiguous()),
    ("all(-1) bool", lambda d: d["b"].all(-1)),
    ("sum(-1) f32", lambda d: d["f"].sum(-1)),
    ("sum(0) f32", lambda d: d["f"].sum(0)),
    ("max(-1) f32", lambda d: d["f"].max(-1)),
    ("var(-1) f32", lambda d: d["f"].var(-1)),
    ("vector norm(-1) f32", lambda d: d["f"].norm(dim=-1)),
    ("cumsum(-1) f32", lambda d: d["f"].cumsum(-1)),
    ("gather(-1)", lambda d: d["f"].gather(-1, d["idx"])),
    ("triu", lambda d: d["f"].triu()),
    ("cat(-1)", lambda d: torch.cat([d["f"], d["f"]], -1)),
    ("softmax bf16", lambda d: torch.softmax(d["h"], -1)),
    ("_safe_softmax f32", lambda d: torch.ops.aten._safe_softmax(d["f"], -1)),
    ("dropout f32", lambda d: F.dropout(d["f"], 0.1)),
    ("tanh f32", lambda d: d["f"].tanh()),
    ("gelu (erf) f32", lambda d: F.gelu(d["f"])),
    ("lerp f32", lambda d: d["f"].lerp(d["fT"], 0.5)),
]


def main() -> None:
    case_table(__doc__, "op on [8, 12, 256, 256]", CASES, inputs)


if __name__ == "__main__":
    main()
