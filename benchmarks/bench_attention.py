"""Side-by-side timing of scaled_dot_product_attention on the native tpu
ATTENTION kernel against PyTorch's CPU backend (its fused flash kernel
where it takes the inputs), in one process. Prints a markdown table of
speed ratios (CPU time / tpu time: above 1 means the virtual TPU is
faster), forward alone and forward + backward.

    python benchmarks/bench_attention.py [--repeat N] [--dtype float32|bfloat16] [--long]

--long adds L = S = 2048 (slow on a small machine). The machine is noisy:
compare ratios, not absolute times.


Timed with suite.interleaved (see suite.py for why PyTorch's OpenMP
workers wait passively)."""
import argparse
import os
import platform

from suite import interleaved

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--long", action="store_true", help="also L = S = 2048")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    torch.tpu.set_fallback_error(True)  # every timed op must be native
    from torch_tpu import _C

    print(f"machine: {platform.machine()}, {torch.get_num_threads()} threads for torch CPU, "
          f"{_C._num_threads()} tpu kernel threads; torch {torch.__version__}; {args.dtype}; "
          f"median of {args.repeat}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}")
    print()
    print("| B, H, L = S, E | causal | pass | CPU ms | tpu ms | CPU/tpu |")
    print("|---|---|---|---:|---:|---:|")
    lengths = [512, 2048] if args.long else [512]
    g = torch.Generator().manual_seed(0)
    for length, e in [(n, e) for n in lengths for e in (64, 128)]:
        shape = (1, 12, length, e)
        base = [torch.randn(shape, generator=g).to(dtype) for _ in range(3)]
        grad = torch.randn(shape, generator=g).to(dtype)
        for causal in (False, True):
            for backward in (False, True):
                steps = []
                for dev in ("cpu", "tpu"):
                    q, k, v = (t.to(dev).requires_grad_(backward) for t in base)
                    gd = grad.to(dev)

                    def step(q=q, k=k, v=v, gd=gd):
                        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        if backward:
                            torch.autograd.grad(out, (q, k, v), gd)

                    steps.append(step)
                t_cpu, t_tpu = interleaved(*steps, args.repeat)
                print(f"| 1, 12, {length}, {e} | {causal} | {'fwd+bwd' if backward else 'fwd'} | "
                      f"{t_cpu * 1e3:.1f} | {t_tpu * 1e3:.1f} | {t_cpu / t_tpu:.2f} |")


if __name__ == "__main__":
    main()
