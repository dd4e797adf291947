"""Fused mode against strict mode and PyTorch's CPU backend, in one run.

    python benchmarks/bench_fused.py [--repeat N] [--models] [--no-write]

Rows (issue 7): TorchTPU's own illustration, y = (y + 1) * 2 - 1 fifty
times on a 5000x5000 bf16 tensor; GELU written out as its tanh formula in
separate ops; LayerNorm written out in ops; a linear layer's product
with its bias and GELU (a matmul group); one AdamW step (foreach=True)
over GPT-2 small's parameter shapes; with --models, GPT-2 small's forward
at 1x128 and 8x512 and one training step. Each row samples CPU, tpu strict and tpu fused in
turn (suite.interleaved_all) and reports the medians, fused/strict and
fused/CPU (below 1: fused is faster), what the planner did
(torch.tpu.fusion_stats), and the device memory allocated at the peak of
one run in each mode, above what was allocated before it. Results go between this script's markers in
docs/benchmarks.md. A tool, not a test.
"""
from __future__ import annotations

import argparse
import datetime
import math
import platform
from typing import Callable

import suite
import torch



def in_mode(mode: str, fn: Callable[[], object]) -> Callable[[], object]:
    def run():
        with torch.tpu.mode(mode):
            return fn()
    return run


def chain(y):
    for _ in range(50):
        y = (y + 1) * 2 - 1
    return y


def gelu_tanh_ops(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))


def layer_norm_ops(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    d = x - mu
    var = (d * d).mean(-1, keepdim=True)
    return d / torch.sqrt(var + eps) * w + b


def gpt2_shapes() -> list[tuple[int, ...]]:
    e, v, n, layers = 768, 50257, 1024, 12
    shapes = [(v, e), (n, e)]
    for _ in range(layers):
        shapes += [(e,), (e,), (e, 3 * e), (3 * e,), (e, e), (e,), (e,), (e,), (e, 4 * e), (4 * e,),
                   (4 * e, e), (e,)]
    return shapes + [(e,), (e,)]


def adamw_step(device: str):
    torch.manual_seed(0)
    params = [torch.randn(s, device=device, requires_grad=True) for s in gpt2_shapes()]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
    return opt.step


def peak_rise(mode: str, fn: Callable[[], object]) -> int:
    """Device memory allocated at the peak of one run of fn, above what
    was allocated before it (its result included)."""
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    result = in_mode(mode, fn)()
    torch.tpu.synchronize()
    rise = torch.tpu.max_memory_allocated() - base
    del result
    return rise


def linear_gelu(x, w, b):
    return torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b), approximate="tanh")


def rows(repeat: int, models: bool) -> list[tuple[str, dict[str, float], dict[str, int]]]:
    out = []

    def row(name, make_cpu, make_tpu, rep=repeat):
        cpu_fn, tpu_fn = make_cpu(), make_tpu()
        torch.tpu.reset_fusion_stats()
        in_mode("fused", tpu_fn)()
        torch.tpu.synchronize()
        stats = dict(torch.tpu.fusion_stats())
        stats["peak_strict"] = peak_rise("strict", tpu_fn)
        stats["peak_fused"] = peak_rise("fused", tpu_fn)
        t = suite.interleaved_all({"cpu": cpu_fn, "strict": in_mode("strict", tpu_fn),
                                   "fused": in_mode("fused", tpu_fn)}, rep, warmup=1)
        out.append((name, t, stats))
        print(f"  {name:48} strict {t['strict'] * 1e3:9.1f} ms  fused {t['fused'] * 1e3:9.1f} ms  "
              f"CPU {t['cpu'] * 1e3:9.1f} ms  fused/strict {t['fused'] / t['strict']:.2f}", flush=True)

    x = torch.randn(5000, 5000).to(torch.bfloat16)
    xt = x.to("tpu")
    row("(y + 1) * 2 - 1, 50 times, 5000x5000 bf16", lambda: lambda: chain(x), lambda: lambda: chain(xt))
    g = torch.randn(4096, 4096)
    gt = g.to("tpu")
    row("GELU tanh formula in ops, 4096x4096 f32", lambda: lambda: gelu_tanh_ops(g),
        lambda: lambda: gelu_tanh_ops(gt))
    ln = torch.randn(8192, 1024)
    w, b = torch.randn(1024), torch.randn(1024)
    lnt, wt, bt = ln.to("tpu"), w.to("tpu"), b.to("tpu")
    row("LayerNorm in ops, 8192x1024 f32", lambda: lambda: layer_norm_ops(ln, w, b),
        lambda: lambda: layer_norm_ops(lnt, wt, bt))
    lx, lw, lb = torch.randn(2048, 768), torch.randn(3072, 768) / 28, torch.randn(3072)
    lxt, lwt, lbt = lx.to("tpu"), lw.to("tpu"), lb.to("tpu")
    row("GELU(linear), 2048x768 @ 768x3072 + bias, f32", lambda: lambda: linear_gelu(lx, lw, lb),
        lambda: lambda: linear_gelu(lxt, lwt, lbt))
    row("AdamW step (foreach), GPT-2 small shapes", lambda: adamw_step("cpu"), lambda: adamw_step("tpu"),
        rep=max(3, repeat // 2))
    if models:
        import transformers
        transformers.logging.set_verbosity_error()
        config = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257)
        torch.manual_seed(0)
        cpu_model = transformers.AutoModelForCausalLM.from_config(config)
        tpu_model = transformers.AutoModelForCausalLM.from_config(config)
        tpu_model.load_state_dict(cpu_model.state_dict())
        tpu_model.to("tpu")
        ids = torch.randint(0, config.vocab_size, (1, 128))

        def forward(m, d):
            x = ids.to(d)

            def run():
                with torch.no_grad():
                    return m(x).logits
            return run
        # A quarter of a second per sample on 2 cores, and the VM's noise
        # is larger than the difference (the products are nine tenths of
        # the time and fuse nothing but their epilogues): many samples.
        row("GPT-2 small forward 1x128", lambda: forward(cpu_model.eval(), "cpu"),
            lambda: forward(tpu_model.eval(), "tpu"), rep=max(21, repeat))
        # At 8x512 the MLP's GELU (eight records of 12.6M elements) no
        # longer fits in cache: the memory-bound work fusion removes.
        ids = torch.randint(0, config.vocab_size, (8, 512))
        row("GPT-2 small forward 8x512", lambda: forward(cpu_model.eval(), "cpu"),
            lambda: forward(tpu_model.eval(), "tpu"), rep=3)
        tids = torch.randint(0, config.vocab_size, (8, 256))

        row("GPT-2 small train step 8x256 (AdamW)", lambda: suite.train_step(cpu_model, tids),
            lambda: suite.train_step(tpu_model, tids.to("tpu")), rep=3)
    return out


def table(results) -> str:
    lines = ["| row | CPU ms | strict ms | fused ms | fused/strict | fused/CPU | groups | records fused | "
             "bytes not written | peak MiB strict | peak MiB fused |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, t, st in results:
        lines.append(f"| {name} | {t['cpu'] * 1e3:.1f} | {t['strict'] * 1e3:.1f} | {t['fused'] * 1e3:.1f} | "
                     f"{t['fused'] / t['strict']:.2f} | {t['fused'] / t['cpu']:.2f} | {st['groups']} | "
                     f"{st['fused_records']} | {st['bytes_not_written'] / 2**20:.0f} MiB | "
                     f"{st['peak_strict'] / 2**20:.0f} | {st['peak_fused'] / 2**20:.0f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--models", action="store_true", help="add GPT-2 small's forward and training step")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = ap.parse_args()
    head = (f"Run {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} with `python benchmarks/bench_fused.py"
            f"{' --models' if args.models else ''}`. Machine: {platform.machine()}, {suite.cpu_description()}; "
            f"torch {torch.__version__} with {torch.get_num_threads()} threads; tpu with "
            f"{suite.torch_tpu._C._num_threads()} "
            "kernel threads. Groups, records and bytes are one fused run's (torch.tpu.fusion_stats).")
    print(head, flush=True)
    text = head + "\n\n" + table(rows(args.repeat, args.models))
    print("\n" + text)
    if not args.no_write:
        suite.write_section("fused", "bench_fused.py: fused mode against strict and CPU", text, at_end=True)


if __name__ == "__main__":
    main()
