"""The benchmark suite: the virtual TPU against PyTorch's CPU backend and
against the machine's own limits, in one process.

    python benchmarks/suite.py [--full] [--models] [--repeat N] [--no-write]

Every row runs tpu (strict mode) and CPU PyTorch on the same inputs with
the same thread count, warmed up and synchronised, and reports the median
time of each, the ratio tpu/CPU (below 1 means tpu is faster) and, where it
means something, the achieved GFLOP/s or GB/s with its fraction of the peak
that the suite measures first (torch_tpu._C._probe_machine: f32 FMA chains,
bf16 dot products where the cores have AVX512-BF16, STREAM triad). The table
is printed and written between the suite's markers in docs/benchmarks.md.

Default rows are a subset that runs in a few minutes; --full adds the large
sizes and every LLM shape, --models the model rows. The machine is noisy:
compare ratios, and rerun before drawing conclusions. A tool, not a test.

PyTorch's OpenMP workers spin for a few milliseconds after each parallel
region (libgomp's default), and with the two sides sampled in turn that
spinning thread would take a core from the tpu sample that follows (on a
2-core machine it doubled the tpu's times). Each sample is therefore
preceded by a busy pause (SETTLE_S, see settle()) in which the spinning ends, then by one
untimed call of the same side, so that each timed call finds its own
threads awake (as in a loop of calls) and the other side's asleep.
Making the workers wait passively instead (OMP_WAIT_POLICY=PASSIVE, what
this suite did before 2026-12-06) slows the CPU's short ops: it doubled
the CPU's greedy decoding and made the tpu look twice as fast as it is.
bench_ops.py, bench_attention.py and bench_fused.py time with this
module's `interleaved` too.
"""
from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401  (registers the device)

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"

# Seconds of pause before each sample: PyTorch's OpenMP workers stop
# spinning 5-10 ms after a parallel region (measured with
# time.process_time across a sleep), the tpu's workers sooner.
SETTLE_S = 0.03


def settle() -> None:
    """The pause before a sample: SETTLE_S of busy waiting on this thread.
    Not a sleep: on the KVM guests here, a process that sleeps 30 ms lets
    its vCPUs go idle, and the CPU side's next calls then took 4 or 8 ms
    (one or two scheduler ticks) instead of 0.2-0.5 in about half the
    samples, with or without torch_tpu imported; with a busy pause they do
    not (2026-12-06)."""
    end = time.perf_counter() + SETTLE_S
    while time.perf_counter() < end:
        pass


@dataclass
class Row:
    group: str
    name: str
    cpu_s: float
    tpu_s: float
    work: float = 0.0  # flops or bytes per call
    unit: str = ""  # "GFLOP/s" or "GB/s"
    peak: float = 0.0  # the same unit's peak, 0 for none
    note: str = ""
    cpu_bytes: int = 0  # peak bytes held during one call (peaks_side_by_side), 0: not measured
    tpu_bytes: int = 0

    @property
    def ratio(self) -> float:
        return self.tpu_s / self.cpu_s

    def rate(self, seconds: float) -> float:
        return self.work / seconds * 1e-9


def sync(device: str) -> None:
    if device == "tpu":
        torch.tpu.synchronize()


def interleaved_all(fns: dict[str, Callable[[], object]], repeat: int,
                    warmup: int = 2) -> dict[str, float]:
    """Median seconds of each fn() (each sample followed by a tpu
    synchronize, which costs a CPU-only sample nothing), after a warm-up,
    sampling them in turn so that a noisy spell slows all alike; each
    sample follows a pause and an untimed call (see the module's doc)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    torch.tpu.synchronize()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            settle()  # the other side's threads stop spinning
            fn()  # untimed: this side's threads are awake, as in a loop of calls
            torch.tpu.synchronize()
            start = time.perf_counter()
            fn()
            torch.tpu.synchronize()
            samples[k].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in samples.items()}


def interleaved(cpu_fn: Callable[[], object], tpu_fn: Callable[[], object], repeat: int,
                warmup: int = 2) -> tuple[float, float]:
    """interleaved_all of a CPU and a tpu function: their median seconds."""
    t = interleaved_all({"cpu": cpu_fn, "tpu": tpu_fn}, repeat, warmup)
    return t["cpu"], t["tpu"]


def side_by_side(make: Callable[[str], Callable[[], object]], repeat: int) -> tuple[float, float]:
    """interleaved() of make("cpu") and make("tpu")."""
    return interleaved(make("cpu"), make("tpu"), repeat)


def case_table(doc: str, column: str, cases: list[tuple[str, Callable[[dict], object]]],
               inputs: Callable[[], dict[str, torch.Tensor]]) -> None:
    """The main of the per-op benchmarks (bench_breadth, bench_training_ops):
    parses [--repeat N] [name filters...], makes every timed op native (the
    CPU fallback an error), and prints a markdown table of each case's CPU
    and tpu time (interleaved(), inputs() on each side) and their ratio."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("only", nargs="*", help="run the cases whose name contains one of these")
    args = parser.parse_args()
    torch.tpu.set_fallback_error(True)
    from torch_tpu import _C

    print(f"machine: {platform.machine()}, {cpu_description()}; {torch.get_num_threads()} threads for torch "
          f"CPU, {_C._num_threads()} tpu kernel threads; torch {torch.__version__}; mode {torch.tpu.get_mode()}")
    print()
    print(f"| {column} | CPU ms | tpu ms | tpu/CPU |")
    print("|---|---:|---:|---:|")
    cpu = inputs()
    tpu = {k: v.to("tpu") for k, v in cpu.items()}
    for name, fn in cases:
        if args.only and not any(o in name for o in args.only):
            continue
        t_cpu, t_tpu = interleaved(lambda: fn(cpu), lambda: fn(tpu), args.repeat)
        print(f"| {name} | {t_cpu * 1e3:.3f} | {t_tpu * 1e3:.3f} | {t_tpu / t_cpu:.2f} |", flush=True)


def peak_bytes(device: str, fn: Callable[[], object]) -> int:
    """The most bytes held at once during one call of fn, above what was
    held when it started: on tpu the device allocator's peak; on cpu the
    running sum of every CPU allocation and free that the profiler's
    memory events record, in time order (PyTorch's CPU allocator keeps no
    peak of its own). What fn returns is held until it is dropped, on
    both sides alike."""
    if device == "tpu":
        torch.tpu.synchronize()
        base = torch.tpu.memory_allocated()
        torch.tpu.reset_peak_memory_stats()
        result = fn()
        torch.tpu.synchronize()
        del result
        return torch.tpu.max_memory_allocated() - base
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    del result
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    held = peak = 0
    for _, nbytes in events:
        held += nbytes
        peak = max(peak, held)
    return peak


def peaks_side_by_side(make: Callable[[str], Callable[[], object]]) -> tuple[int, int]:
    """peak_bytes of make("cpu") and make("tpu"), each measured on its
    second call (the first creates state such as an optimizer's)."""
    out = []
    for device in ("cpu", "tpu"):
        fn = make(device)
        fn()
        out.append(peak_bytes(device, fn))
    return out[0], out[1]


# ---------------------------------------------------------------- machine


def cpu_description() -> str:
    model, flags = platform.processor() or "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    have = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_bf16") if f in flags]
    return f'{os.cpu_count()} cores, "{model}" ({", ".join(have) or "no SIMD flags read"})'


def probe(threads: int, tries: int = 3) -> dict:
    """The machine's peaks on one and on all threads: each the best of
    `tries` probes, since one probe that shares the cores with a passing
    process reads low (an all-thread f32 peak equal to one thread's)."""
    def best(n: int) -> dict:
        runs = [torch_tpu._C._probe_machine(n, 0.3, 768 << 20) for _ in range(tries)]
        return {k: max(r[k] for r in runs) for k in runs[0]}
    return {"one": best(1), "all": best(threads)}


# ------------------------------------------------------------------- rows


def dispatch_rows(repeat: int) -> list[Row]:
    """10,000 adds on 1-element tensors: host time to issue them, and time
    until the device has run them."""
    n = 10_000
    out = []
    issue: dict[str, list[float]] = {"cpu": [], "tpu": []}
    total: dict[str, list[float]] = {"cpu": [], "tpu": []}
    for _ in range(max(3, repeat // 3)):
        for d in ("cpu", "tpu"):
            x, y = torch.ones(1, device=d), torch.ones(1, device=d)
            for _ in range(100):
                x = x + y
            sync(d)
            start = time.perf_counter()
            z = x
            for _ in range(n):
                z = z + y
            mid = time.perf_counter()
            sync(d)
            end = time.perf_counter()
            issue[d].append((mid - start) / n)
            total[d].append((end - start) / n)
    for what, t in (("issue", issue), ("until synchronize", total)):
        c, p = statistics.median(t["cpu"]), statistics.median(t["tpu"])
        out.append(Row("dispatch", f"10,000 tiny adds, {what}", c, p,
                       note=f"{p * 1e6:.2f} us/op (CPU {c * 1e6:.2f})"))
    return out


def gemm_rows(full: bool, repeat: int, peaks: dict) -> list[Row]:
    squares = [512, 1024, 2048] + ([4096] if full else [])
    llm = [(m, k, n) for m in (1, 8, 128, 2048) for (k, n) in
           ((768, 3072), (3072, 768), (4096, 11008), (11008, 4096))]
    if not full:
        llm = [(1, 4096, 11008), (128, 768, 3072), (2048, 4096, 4096)]
    shapes = [(s, s, s) for s in squares] + llm
    rows = []
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        peak = peaks["fma_f32_gflops"] if dtype == torch.float32 or not peaks["dot_bf16_gflops"] \
            else peaks["dot_bf16_gflops"]
        for m, k, n in shapes:
            a = torch.randn(m, k, generator=g).to(dtype)
            b = torch.randn(k, n, generator=g).to(dtype)

            def make(d, a=a, b=b):
                x, y = a.to(d), b.to(d)
                return lambda: torch.mm(x, y)
            c, t = side_by_side(make, repeat)
            name = f"mm {str(dtype)[6:]} {m}x{k}x{n}" if (m, k) != (k, n) or m != k else f"mm {str(dtype)[6:]} {m}"
            rows.append(Row("GEMM", name, c, t, work=2.0 * m * k * n, unit="GFLOP/s", peak=peak))
    return rows


def memory_rows(full: bool, repeat: int, peaks: dict) -> list[Row]:
    sizes = [1 << 20, 16 << 20] + ([64 << 20] if full else [])
    rows = []
    g = torch.Generator().manual_seed(0)
    for n in sizes:
        x = torch.randn(n, generator=g)
        y = torch.randn(n, generator=g)
        side = int(math.isqrt(n))
        cases: list[tuple[str, Callable, float]] = [
            ("add", lambda a, b: a + b, 3 * 4 * n),
            ("mul", lambda a, b: a * b, 3 * 4 * n),
            ("gelu", lambda a, b: F.gelu(a), 2 * 4 * n),
            ("softmax rows of 1024", lambda a, b: torch.softmax(a.view(-1, 1024), -1), 2 * 4 * n),
            ("layer_norm rows of 1024", lambda a, b: F.layer_norm(a.view(-1, 1024), (1024,)), 2 * 4 * n),
            ("sum", lambda a, b: a.sum(), 4 * n),
            ("transpose copy", lambda a, b: a[: side * side].view(side, side).t().contiguous(), 2 * 4 * side * side),
        ]
        for name, fn, nbytes in cases:
            def make(d, fn=fn):
                a, b = x.to(d), y.to(d)
                return lambda: fn(a, b)
            c, t = side_by_side(make, repeat)
            label = f"{name}, f32 {n >> 20}M"
            rows.append(Row("memory-bound", label, c, t, work=nbytes, unit="GB/s", peak=peaks["triad_gbps"]))
    return rows


def attention_rows(full: bool, repeat: int) -> list[Row]:
    shapes = [(1, 12, 512, 64), (1, 12, 1024, 128)]
    if full:
        shapes += [(8, 12, 128, 64), (4, 16, 1024, 64), (1, 32, 2048, 128), (2, 12, 2048, 64)]
    rows = []
    g = torch.Generator().manual_seed(0)
    for b, h, l, e in shapes:
        q, k, v = (torch.randn(b, h, l, e, generator=g) for _ in range(3))
        flops_fwd = 2 * 2 * b * h * l * l * e / 2  # causal: half the scores

        def fwd(d):
            qq, kk, vv = q.to(d), k.to(d), v.to(d)
            return lambda: F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)

        def fwd_bwd(d):
            qq, kk, vv = (t.to(d).requires_grad_() for t in (q, k, v))

            def step():
                out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
                out.sum().backward()
            return step
        for label, make, flops in (("fwd", fwd, flops_fwd), ("fwd+bwd", fwd_bwd, 3.5 * flops_fwd)):
            c, t = side_by_side(make, repeat)
            rows.append(Row("attention", f"causal {b}x{h}x{l}x{e} {label}", c, t, work=flops, unit="GFLOP/s"))
    return rows


def train_step(model: torch.nn.Module, ids: torch.Tensor) -> Callable[[], None]:
    """One causal-LM training step (forward, backward, AdamW foreach) on
    `ids`, the labels being the inputs."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

    def step():
        loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def model_rows(full: bool, repeat: int) -> list[Row]:
    """GPT-2 small and a ~100M Llama from configs (random init)."""
    import transformers
    transformers.logging.set_verbosity_error()
    configs = {
        "GPT-2 small": transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257),
        "Llama ~100M": transformers.LlamaConfig(hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                                                num_attention_heads=12, num_key_value_heads=4, vocab_size=32000),
    }
    rows = []
    for name, config in configs.items():
        torch.manual_seed(0)
        base = transformers.AutoModelForCausalLM.from_config(config).eval()
        models = {"cpu": base, "tpu": transformers.AutoModelForCausalLM.from_config(config).eval()}
        models["tpu"].load_state_dict(base.state_dict())
        models["tpu"].to("tpu")
        shapes = [(1, 128)] + ([(8, 512)] if full else [])
        for bsz, seq in shapes:
            ids = torch.randint(0, config.vocab_size, (bsz, seq))

            def fwd(d, ids=ids):
                m, x = models[d], ids.to(d)

                def run():
                    with torch.no_grad():
                        return m(x).logits
                return run
            c, t = side_by_side(fwd, max(3, repeat // 3))
            m = peaks_side_by_side(fwd)
            rows.append(Row("models", f"{name} forward {bsz}x{seq}", c, t, cpu_bytes=m[0], tpu_bytes=m[1]))
        prompt = torch.randint(0, config.vocab_size, (1, 16))
        new = 32

        def decode(d):
            m, x = models[d], prompt.to(d)
            return lambda: m.generate(x, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                                      pad_token_id=0)
        c, t = side_by_side(decode, 3)
        m = peaks_side_by_side(decode)
        rows.append(Row("models", f"{name} greedy decode, {new} tokens", c, t,
                        note=f"{new / t:.1f} tokens/s (CPU {new / c:.1f})", cpu_bytes=m[0], tpu_bytes=m[1]))
        if full:
            ids = torch.randint(0, config.vocab_size, (8, 256))

            def train(d):
                return train_step(models[d], ids.to(d))
            c, t = side_by_side(train, 3)
            m = peaks_side_by_side(train)
            rows.append(Row("models", f"{name} train step 8x256 (AdamW)", c, t, cpu_bytes=m[0], tpu_bytes=m[1]))
    return rows


# ------------------------------------------------------------------ table


def fmt_rate(r: Row) -> tuple[str, str]:
    if not r.unit:
        mem = (f"peak {r.tpu_bytes / 2**20:.0f} MiB (CPU {r.cpu_bytes / 2**20:.0f}, "
               f"{r.tpu_bytes / max(r.cpu_bytes, 1):.2f})" if r.cpu_bytes else "")
        return "; ".join(x for x in (r.note, mem) if x), ""
    tpu_rate = r.rate(r.tpu_s)
    cpu_rate = r.rate(r.cpu_s)
    rate = f"{tpu_rate:.1f} {r.unit} (CPU {cpu_rate:.1f})"
    frac = f"{100 * tpu_rate / r.peak:.0f} %" if r.peak else ""
    return rate, frac


def table(rows: list[Row]) -> str:
    lines = ["| group | row | CPU ms | tpu ms | tpu/CPU | tpu rate | of peak |",
             "|---|---|---:|---:|---:|---|---:|"]
    for r in rows:
        rate, frac = fmt_rate(r)
        lines.append(f"| {r.group} | {r.name} | {r.cpu_s * 1e3:.4g} | {r.tpu_s * 1e3:.4g} | "
                     f"{r.ratio:.2f} | {rate} | {frac} |")
    return "\n".join(lines)


def header(args, peaks: dict) -> str:
    one, all_ = peaks["one"], peaks["all"]
    bf16 = (f"bf16 dot products {all_['dot_bf16_gflops']:.0f} GFLOP/s"
            if all_["dot_bf16_gflops"] else "no bf16 dot-product instructions")
    return "\n".join([
        f"Run {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} with `python benchmarks/suite.py"
        f"{' --full' if args.full else ''}{' --models' if args.models else ''}`.",
        "",
        f"Machine: {platform.machine()}, {cpu_description()}; torch {torch.__version__} with "
        f"{torch.get_num_threads()} threads; tpu with {torch_tpu._C._num_threads()} kernel threads, strict mode.",
        f"Measured peaks on all threads: f32 FMA {all_['fma_f32_gflops']:.0f} GFLOP/s, {bf16}, "
        f"STREAM triad {all_['triad_gbps']:.1f} GB/s (one thread: {one['fma_f32_gflops']:.0f} GFLOP/s, "
        f"{one['triad_gbps']:.1f} GB/s).",
        "`tpu/CPU` below 1 means the virtual TPU is faster. bf16 GEMM is stated against the bf16 "
        "dot-product peak where the cores have one, else against the f32 FMA peak.",
    ])


def write_section(marker: str, title: str, text: str, at_end: bool = False) -> None:
    """Replaces the block between ``<!-- marker:begin -->`` and its end
    marker in docs/benchmarks.md with ``title`` and ``text``; a new block
    goes after the intro paragraph, or with ``at_end`` at the end."""
    begin, end = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    block = f"{begin}\n## {title}\n\n{text}\n{end}"
    if begin in doc and end in doc:
        head, rest = doc.split(begin, 1)
        doc = head + block + rest.split(end, 1)[1]
    elif at_end:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    else:
        lines = doc.split("\n\n", 2)  # after the title and the intro paragraph
        doc = "\n\n".join(lines[:2] + [block] + lines[2:])
    DOC.write_text(doc)
    print(f"\nwrote {DOC}")


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="every size and shape the issue names")
    ap.add_argument("--models", action="store_true", help="include the model rows")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = ap.parse_args(argv)
    torch.tpu.set_mode("strict")
    threads = torch.get_num_threads()
    peaks = probe(threads)
    print(header(args, peaks), flush=True)
    rows: list[Row] = []
    for fn in (lambda: dispatch_rows(args.repeat), lambda: gemm_rows(args.full, args.repeat, peaks["all"]),
               lambda: memory_rows(args.full, args.repeat, peaks["all"]),
               lambda: attention_rows(args.full, args.repeat)):
        new = fn()
        for r in new:
            print(f"  {r.group:13} {r.name:40} tpu/CPU {r.ratio:6.2f}", flush=True)
        rows += new
    if args.models or args.full:
        rows += model_rows(args.full, args.repeat)
    text = header(args, peaks) + "\n\n" + table(rows)
    print("\n" + table(rows))
    if not args.no_write:
        write_section("suite", "suite.py: the benchmark suite", text)


if __name__ == "__main__":
    main()
