"""Side-by-side timing of the native tpu kernels against PyTorch's CPU
backend, in one process. Prints a markdown table of speed ratios
(CPU time / tpu time: above 1 means the virtual TPU is faster).

    python benchmarks/bench_ops.py [--repeat N]

The machine is noisy: compare ratios, not absolute times. Timed with
suite.interleaved (see suite.py)."""
import argparse
import platform

from suite import interleaved

import torch  # noqa: E402


def cases():
    g = torch.Generator().manual_seed(0)
    big = torch.randn(4_000_000, generator=g)
    mat = torch.randn(2048, 2048, generator=g)
    row = torch.randn(2048, generator=g)
    a512, b512 = torch.randn(512, 512, generator=g), torch.randn(512, 512, generator=g)
    a1k, b1k = torch.randn(1024, 1024, generator=g), torch.randn(1024, 1024, generator=g)
    return [
        ("add f32, 4M", lambda d: (big.to(d), big.to(d)), lambda x, y: x + y),
        ("mul broadcast f32, 2048x2048 * 2048", lambda d: (mat.to(d), row.to(d)), lambda x, y: x * y),
        ("add_ in place bf16, 4M", lambda d: (big.bfloat16().to(d), big.bfloat16().to(d)), lambda x, y: x.add_(y)),
        ("div f32 by scalar, 4M", lambda d: (big.to(d), None), lambda x, _: x / 3.0),
        ("sum f32 all, 4M", lambda d: (big.to(d), None), lambda x, _: x.sum()),
        ("sum f32 dim=1, 2048x2048", lambda d: (mat.to(d), None), lambda x, _: x.sum(1)),
        ("mean f32 dim=0, 2048x2048", lambda d: (mat.to(d), None), lambda x, _: x.mean(0)),
        ("mm f32 512", lambda d: (a512.to(d), b512.to(d)), lambda x, y: x @ y),
        ("mm f32 1024", lambda d: (a1k.to(d), b1k.to(d)), lambda x, y: x @ y),
        ("mm bf16 1024", lambda d: (a1k.bfloat16().to(d), b1k.bfloat16().to(d)), lambda x, y: x @ y),
        ("addmm f32 1024", lambda d: (a1k.to(d), b1k.to(d)), lambda x, y: torch.addmm(y, x, y)),
        ("copy f32->bf16, 4M", lambda d: (big.to(d), None), lambda x, _: x.to(torch.bfloat16)),
        ("transpose copy f32, 2048x2048", lambda d: (mat.to(d), None), lambda x, _: x.t().contiguous()),
        ("normal_ f32, 4M", lambda d: (big.to(d), None), lambda x, _: x.normal_()),
        ("exp f32, 4M", lambda d: (big.to(d), None), lambda x, _: torch.exp(x)),
        ("tanh f32, 4M", lambda d: (big.to(d), None), lambda x, _: torch.tanh(x)),
        ("gelu f32, 4M", lambda d: (big.to(d), None), lambda x, _: torch.nn.functional.gelu(x)),
        ("gelu tanh bf16, 4M", lambda d: (big.bfloat16().to(d), None),
         lambda x, _: torch.nn.functional.gelu(x, approximate="tanh")),
        ("silu f32, 4M", lambda d: (big.to(d), None), lambda x, _: torch.nn.functional.silu(x)),
        ("relu f32, 4M", lambda d: (big.to(d), None), lambda x, _: torch.relu(x)),
        ("gt f32, 4M", lambda d: (big.to(d), None), lambda x, _: x > 0.5),
        ("where f32, 4M", lambda d: (big.to(d), big.to(d)), lambda x, y: torch.where(x > 0, x, y)),
        ("addcmul_ f32, 4M", lambda d: (big.to(d), big.to(d)), lambda x, y: x.addcmul_(y, y, value=0.1)),
        ("softmax f32, 2048x2048", lambda d: (mat.to(d), None), lambda x, _: torch.softmax(x, -1)),
        ("log_softmax f32 dim=0, 2048x2048", lambda d: (mat.to(d), None), lambda x, _: torch.log_softmax(x, 0)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    torch.tpu.set_fallback_error(True)  # every timed op must be native
    from torch_tpu import _C

    print(f"machine: {platform.machine()}, {torch.get_num_threads()} threads for torch CPU, "
          f"{_C._num_threads()} tpu kernel threads; torch {torch.__version__}; mode {torch.tpu.get_mode()}")
    print()
    print("| op | CPU ms | tpu ms | CPU/tpu |")
    print("|---|---:|---:|---:|")
    for name, make, fn in cases():
        cpu_x, cpu_y = make("cpu")
        tpu_x, tpu_y = make("tpu")
        t_cpu, t_tpu = interleaved(lambda: fn(cpu_x, cpu_y), lambda: fn(tpu_x, tpu_y), args.repeat)
        print(f"| {name} | {t_cpu * 1e3:.2f} | {t_tpu * 1e3:.2f} | {t_cpu / t_tpu:.2f} |")


if __name__ == "__main__":
    main()
