"""The row kernels (softmax, log_softmax, layer_norm, forward and
backward) against PyTorch's CPU backend, side by side in one process.

    python benchmarks/bench_rows.py [--repeat N] [--rows R] [--len L]

Each row is one op (or one op's backward through autograd's own
_softmax_backward_data / native_layer_norm_backward) on an R x L f32
tensor, timed with suite.side_by_side (median of interleaved samples,
each followed by a synchronize). Prints tpu/CPU and the bytes each moves
per second against the measured STREAM triad. A tool, not a test.
"""
from __future__ import annotations

import argparse

import suite
import torch
import torch.nn.functional as F


def cases(r: int, n: int):
    g = torch.Generator().manual_seed(0)
    x, dy = torch.randn(r, n, generator=g), torch.randn(r, n, generator=g)
    w, b = torch.randn(n, generator=g), torch.randn(n, generator=g)
    nb = 4 * r * n

    def fwd(fn):
        def make(d):
            a, ww, bb = x.to(d), w.to(d), b.to(d)
            return lambda: fn(a, ww, bb)
        return make

    def bwd(fn):
        def make(d):
            a = x.to(d).requires_grad_()
            ww, bb = w.to(d).requires_grad_(), b.to(d).requires_grad_()
            out = fn(a, ww, bb)
            gy = dy.to(d)
            return lambda: torch.autograd.grad(out, [a], gy, retain_graph=True)
        return make

    yield "softmax", fwd(lambda a, ww, bb: torch.softmax(a, -1)), 2 * nb
    yield "log_softmax", fwd(lambda a, ww, bb: torch.log_softmax(a, -1)), 2 * nb
    yield "softmax backward", bwd(lambda a, ww, bb: torch.softmax(a, -1)), 3 * nb
    yield "log_softmax backward", bwd(lambda a, ww, bb: torch.log_softmax(a, -1)), 3 * nb
    yield "layer_norm", fwd(lambda a, ww, bb: F.layer_norm(a, (n,), ww, bb)), 2 * nb
    yield "layer_norm backward (dx)", bwd(lambda a, ww, bb: F.layer_norm(a, (n,), ww, bb)), 3 * nb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--len", type=int, default=1024)
    args = ap.parse_args()
    torch.tpu.set_mode("strict")
    peaks = suite.probe(torch.get_num_threads())
    print(f"{suite.cpu_description()}; torch {torch.__version__} with {torch.get_num_threads()} threads; "
          f"STREAM triad {peaks['all']['triad_gbps']:.1f} GB/s; {args.rows} x {args.len} f32")
    print("| row | CPU ms | tpu ms | tpu/CPU | tpu GB/s | of STREAM |\n|---|---:|---:|---:|---:|---:|")
    for name, make, nbytes in cases(args.rows, args.len):
        c, t = suite.side_by_side(make, args.repeat)
        gbps = nbytes / t / 1e9
        print(f"| {name} | {c * 1e3:.2f} | {t * 1e3:.2f} | {t / c:.2f} | {gbps:.1f} | "
              f"{gbps / peaks['all']['triad_gbps'] * 100:.0f} % |", flush=True)


if __name__ == "__main__":
    main()
