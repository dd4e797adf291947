"""Random programs of tensor ops, and a differential runner for them
(tpu against PyTorch's CPU backend, in one process). Used by
tests/test_fuzz.py; also runnable by hand:

    python tests/fuzz_programs.py --start 0 --count 200 [--ops 30] [--modes strict,debug] [--shrink]
    python tests/fuzz_programs.py --show 1234      # print program 1234 as a script
    python tests/fuzz_programs.py --device cpu     # CPU against itself: checks the fuzzer

TORCH_TPU_FUZZ_SKIP=REGEX makes the generator leave out statements that
match REGEX, to look past a known bug while hunting for others (the
programs change with it).

A program is a list of Python statements over variables v0, v1, ... and a
name DEV (the device). ``generate(seed)`` builds one from a seeded
random.Random, executing each candidate statement on the CPU while it
builds, so that it knows every operand's shape, dtype and values and can
keep the program inside the part of PyTorch whose CPU results are defined:
no integer division by zero (or INT_MIN / -1, or negative integer powers),
no float->int conversion of out-of-range values, no duplicate indices in
index_put, and no in-place op whose sources overlap the written memory (or
that writes an expanded tensor with more than one value) unless the CPU
refuses it. Some statements are meant to raise (shape mismatches,
forbidden casts, bad dims, overlapping writes): then both devices must.

``run(program, mode)`` executes every statement on both devices and checks,
for every statement: both raise or neither; the result's dtype, shape and
device; that it aliases the same earlier variables on both devices; and the
values of the result and of every variable sharing its storage (so an
in-place op through a view is checked in its base too). Values are compared
after the program has run (strict mode keeps its queue), from clones taken
after each statement: exactly for integer and bool, with a tolerance per
dtype for floats (scaled by the operands' magnitude for sums and matrix
products).

A float value that differs is re-checked locally: the statement is re-run
on the CPU from the tpu's own inputs at that point, so that a rounding
difference upstream (a sum in another order, an exp one ulp off) that a
later floor, comparison or cancellation amplifies is not reported, while
every op is still checked against what the CPU computes from the same
inputs. For float16/bfloat16 a second local reference is the statement
computed in float32 and rounded once: PyTorch's own CPU kernels do that in
their vectorised loops but round some intermediates to the half type in
their scalar loops (alpha * other in add, the quotient of a rounding
division), so the CPU disagrees with itself between long and short inputs.
"""
from __future__ import annotations

import argparse
import builtins
import contextlib
import math
import os
import random
import re
import sys
import time
import warnings
from dataclasses import dataclass, field

import torch

F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
I8, I16, I32, I64, U8, BOOL = torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool
FLOATS = [F32, F64, F16, BF16]
INTS = [I8, I16, I32, I64, U8]
DTYPES = FLOATS + INTS + [BOOL]
DTYPE_WEIGHTS = [30, 8, 8, 8, 6, 4, 8, 12, 6, 10]

# relative tolerance per dtype (atol is this times a scale, see _scale)
TOL = {F32: 1e-5, F64: 1e-7, F16: 1e-2, BF16: 1e-2}

MAX_NUMEL = 8192
BIG = 0.06  # the share of operands made large, for the vectorised and multi-threaded kernel paths

# Statements matching this regular expression are never generated: a way to
# look past a known bug while hunting for others (it changes the programs).
_SKIP = os.environ.get("TORCH_TPU_FUZZ_SKIP")
_SKIP = re.compile(_SKIP) if _SKIP else None


def dname(dt: torch.dtype) -> str:
    return str(dt)  # "torch.float32"


# ----------------------------------------------------------------------------
# programs

@dataclass
class Step:
    code: str
    target: str              # the variable assigned or mutated
    kind: str = "elem"       # "elem" | "rdiv" (rounding division) | "reduce" | "matmul": see _scale
    inputs: tuple = ()       # variables read (for the tolerance scale)
    expect_error: bool = False
    compiled: object = None

    def obj(self):
        if self.compiled is None:
            self.compiled = compile(self.code, "<fuzz>", "exec")
        return self.compiled


@dataclass
class Program:
    seed: int
    steps: list = field(default_factory=list)

    def source(self, device: str = "tpu", upto: int | None = None, mark: int | None = None) -> str:
        lines = ["import torch", f'DEV = "{device}"  # "cpu" gives the reference']
        for i, s in enumerate(self.steps[: None if upto is None else upto + 1]):
            note = "  # <-- here" if i == mark else ""
            if s.expect_error:
                note += "  # raises on CPU"
            lines.append(f"{s.code}{note}")
        return "\n".join(lines)

    def __str__(self):
        return self.source()


def namespace(device: str) -> dict:
    return {"torch": torch, "DEV": device, "__builtins__": builtins}


def _exec(step: Step, ns: dict):
    try:
        exec(step.obj(), ns)
    except Exception as e:  # noqa: BLE001 - any exception type counts as "raised"
        return e
    return None


def _is_var(name: str) -> bool:
    return name[:1] == "v" and name[1:].isdigit()


# ----------------------------------------------------------------------------
# generator

def _lit(v) -> str:
    if isinstance(v, bool):
        return repr(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "float('nan')"
        if math.isinf(v):
            return "float('inf')" if v > 0 else "float('-inf')"
        return repr(v)
    return repr(v)


def _nest(flat: list, shape: tuple):
    if len(shape) == 0:
        return flat[0]
    if len(shape) == 1:
        return list(flat)
    step = len(flat) // shape[0]
    return [_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _fmt_nested(x) -> str:
    if isinstance(x, list):
        return "[" + ", ".join(_fmt_nested(e) for e in x) + "]"
    return _lit(x)


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _int_range(dt):
    info = torch.iinfo(dt)
    return info.min, info.max


def _finite_max(t: torch.Tensor) -> float:
    if t.numel() == 0:
        return 0.0
    a = t.detach().to(torch.float64).abs()
    a = a[torch.isfinite(a)]
    return float(a.max()) if a.numel() else 0.0


def _finite_sum(t: torch.Tensor) -> float:
    if t.numel() == 0:
        return 0.0
    a = t.detach().to(torch.float64).abs()
    a = a[torch.isfinite(a)]
    return float(a.sum())


def float_into_int_ok(dst: torch.dtype, src) -> bool:
    """Whether writing ``src`` (tensor or Python number) into an integer
    tensor of dtype ``dst`` is defined on the CPU: a float source must be
    finite and inside the target's range, with a margin for rounding."""
    if dst.is_floating_point or dst == BOOL:
        return True
    if isinstance(src, torch.Tensor):
        if not src.dtype.is_floating_point:
            return True
        vals = src.detach().to(torch.float64).reshape(-1)
    elif isinstance(src, float):
        vals = torch.tensor([src], dtype=torch.float64)
    else:
        return True
    lo, hi = _int_range(dst)
    lo, hi = (0, 254) if dst == U8 else (lo + 1, hi - 1)
    if vals.numel() == 0:
        return True
    return bool(torch.isfinite(vals).all() and (vals >= lo).all() and (vals <= hi).all())


class _Gen:
    def __init__(self, seed: int, n_ops: int):
        self.rng = random.Random(seed)
        self.seed = seed
        self.n_ops = n_ops
        self.ns = namespace("cpu")
        self.steps: list[Step] = []
        self.nvars = 0
        self.errors = 0
        self.max_errors = 2

    # -- bookkeeping -------------------------------------------------------
    def fresh(self) -> str:
        name = f"v{self.nvars}"
        self.nvars += 1
        return name

    def emit(self, code: str, target: str, kind="elem", inputs=(), new=False, must_raise=None) -> bool:
        """Runs a candidate statement on the CPU and keeps it if it is
        acceptable; returns whether it was kept. With ``must_raise`` (the
        tensor an in-place statement writes to), it is kept only if the CPU
        raises, and the written storage is restored otherwise."""
        step = Step(code, target, kind, tuple(i for i in inputs if i))
        if _SKIP is not None and _SKIP.search(code):
            if new:
                self.nvars -= 1
            return False
        try:
            step.obj()
        except SyntaxError:
            raise AssertionError(f"generator wrote bad syntax: {code}")
        saved = _snapshot(must_raise) if must_raise is not None and must_raise.numel() else None
        exc = _exec(step, self.ns)
        if exc is None and must_raise is not None:
            if saved is not None:
                n = saved.numel()
                torch.as_strided(must_raise, (n,), (1,), 0).copy_(saved)
            return False
        if exc is None:
            val = self.ns.get(target)
            if isinstance(val, torch.Tensor) and val.numel() > MAX_NUMEL:
                if new:
                    self.ns.pop(target, None)
                    self.nvars -= 1
                return False
        else:
            if self.errors >= self.max_errors or isinstance(exc, (NameError, SyntaxError)):
                if new:
                    self.nvars -= 1
                return False
            self.errors += 1
            step.expect_error = True
        self.steps.append(step)
        return True

    def tensors(self):
        return [n for n, v in self.ns.items() if _is_var(n) and isinstance(v, torch.Tensor)]

    def scalars(self):
        return [n for n, v in self.ns.items() if _is_var(n) and isinstance(v, (bool, int, float))]

    def pick(self, pred=None):
        names = [n for n in self.tensors() if pred is None or pred(self.ns[n])]
        if not names:
            return None
        if self.rng.random() < 0.6:
            return self.rng.choice(names[-3:])
        return self.rng.choice(names)

    def val(self, expr: str):
        return eval(expr, self.ns)

    # -- random pieces -----------------------------------------------------
    def rand_dtype(self, pool=None):
        if pool is None:
            return self.rng.choices(DTYPES, DTYPE_WEIGHTS)[0]
        return self.rng.choice(pool)

    def rand_shape(self, max_numel=48):
        r = self.rng
        if r.random() < BIG:
            while True:
                shape = tuple(r.choice([1, 3, 7, 16, 33, 64, 130]) for _ in range(r.randint(1, 3)))
                if 64 < _numel(shape) <= 4096:
                    return shape
        while True:
            nd = r.choices([0, 1, 2, 3, 4], [1, 3, 4, 3, 1])[0]
            shape = tuple(r.choices([0, 1, 2, 3, 4, 5], [1, 8, 6, 6, 5, 3])[0] for _ in range(nd))
            if 0 in shape and r.random() < 0.5:
                continue  # empty tensors: about 1 in 12
            if _numel(shape) <= max_numel:
                return shape

    def rand_value(self, dt, specials=False):
        r = self.rng
        if dt == BOOL:
            return r.random() < 0.5
        if dt.is_floating_point:
            x = r.random()
            if specials and x < 0.08:
                return r.choice([math.inf, -math.inf, math.nan, -0.0, 0.0])
            if x < 0.45:
                return round(r.uniform(-4, 4), 2)
            if x < 0.75:
                return float(r.randint(-5, 5))
            if x < 0.85:
                return round(r.uniform(-100, 100), 1)
            if x < 0.93:
                return r.choice([0.5, -0.5, 1.5, 2.5, -2.5, 0.1, 0.25])
            return round(r.uniform(-0.5, 0.5), 3)
        if dt == U8:
            return r.randint(200, 255) if r.random() < 0.05 else r.randint(0, 20)
        if dt == I8:
            return r.choice([-128, 127, -127, 126]) if r.random() < 0.04 else r.randint(-10, 10)
        if dt == I16:
            return r.choice([-32768, 32767]) if r.random() < 0.03 else r.randint(-100, 100)
        return r.randint(-1000, 1000) if r.random() < 0.2 else r.randint(-10, 10)

    def rand_scalar(self, kind=None):
        r = self.rng
        kind = kind or r.choices(["int", "float", "bool"], [5, 4, 1])[0]
        if kind == "int":
            v = r.choice([-3, -2, -1, 0, 1, 2, 3, 5, 7])
        elif kind == "float":
            v = r.choice([0.5, -1.5, 2.0, 2.5, 0.25, -0.1, 3.75, 1e-3, 100.0])
        else:
            v = r.random() < 0.5
        return v

    @staticmethod
    def fmt_scalar(v) -> str:
        s = _lit(v)
        return f"({s})" if s.startswith("-") else s

    def tensor_expr(self, shape, dt) -> str:
        r = self.rng
        n = _numel(shape)
        if n == 0:
            return f"torch.empty({shape!r}, dtype={dname(dt)}, device=DEV)"
        x = r.random()
        if n > 64:  # too long to write out: drawn from a seeded CPU generator
            g = f"torch.Generator().manual_seed({r.randrange(1 << 16)})"
            if dt.is_floating_point:
                return f"(torch.randn({shape!r}, generator={g}) * 4).round(decimals=2).to(DEV, {dname(dt)})"
            lo, hi = {U8: (0, 21), BOOL: (0, 2)}.get(dt, (-10, 11))
            return f"torch.randint({lo}, {hi}, {shape!r}, generator={g}).to(DEV, {dname(dt)})"
        if x < 0.08:
            return f"torch.arange({n}, device=DEV).reshape({shape!r}).to({dname(dt)})"
        if x < 0.14:
            return f"torch.full({shape!r}, {_lit(self.rand_value(dt))}, dtype={dname(dt)}, device=DEV)"
        specials = r.random() < 0.12
        flat = [self.rand_value(dt, specials) for _ in range(n)]
        return f"torch.tensor({_fmt_nested(_nest(flat, shape))}, dtype={dname(dt)}, device=DEV)"

    def zero_dim_expr(self, dt=None, cpu=False):
        dt = dt or self.rand_dtype()
        v = self.rand_value(dt)
        if dt in (I16, I32, I64) and self.rng.random() < 0.3:
            v = self.rng.choice([300, -200, 256, 1000])  # wider than int8/uint8
        dev = "" if cpu else ", device=DEV"
        return f"torch.tensor({_lit(v)}, dtype={dname(dt)}{dev})"

    def new_input(self, shape=None, dt=None) -> str | None:
        shape = self.rand_shape() if shape is None else tuple(shape)
        dt = dt or self.rand_dtype()
        name = self.fresh()
        if self.emit(f"{name} = {self.tensor_expr(shape, dt)}", name, new=True):
            return name
        return None

    def bcast_shape(self, shape):
        """A shape that broadcasts with ``shape``."""
        r = self.rng
        k = r.randint(0, len(shape))
        out = [s if r.random() < 0.6 else 1 for s in shape[len(shape) - k:]]
        if r.random() < 0.15:
            out = [r.randint(1, 3)] + out
        if r.random() < 0.1 and len(shape) > 0:
            i = r.randrange(len(out)) if out else 0
            if out:
                out[i] = r.randint(2, 4)  # sometimes not broadcastable
        return tuple(out)

    def rand_dim(self, nd):
        if nd == 0:
            return self.rng.choice([0, -1])
        return self.rng.randint(-nd, nd - 1)

    def reshape_shape(self, n):
        r = self.rng
        if n == 0:
            return r.choice([(0,), (0, 3), (2, 0), (-1, 0), (0, 1, 2)])
        factors = []
        m, p = n, 2
        while m > 1:
            while m % p == 0:
                factors.append(p)
                m //= p
            p += 1
        r.shuffle(factors)
        nd = r.randint(1, 4)
        dims = [1] * nd
        for f in factors:
            dims[r.randrange(nd)] *= f
        if r.random() < 0.4:
            dims[r.randrange(nd)] = -1
        if r.random() < 0.05:
            dims[0] += 1  # wrong numel
        return tuple(dims)

    def index_str(self, shape):
        r = self.rng
        parts = []
        nd = len(shape)
        k = r.randint(1, max(1, nd))
        if r.random() < 0.15:
            parts.append("...")
        for d in range(min(k, nd) if nd else 0):
            s = shape[d] if "..." not in parts else shape[nd - min(k, nd) + d]
            x = r.random()
            if x < 0.2:
                parts.append(":")
            elif x < 0.4 and s > 0:
                parts.append(str(r.randint(-s, s - 1)))
            elif x < 0.6:
                a, b = r.randint(-s - 1, s + 1), r.randint(-s - 1, s + 1)
                parts.append(f"{a}:{b}")
            elif x < 0.75:
                parts.append(f"::{r.randint(1, 3)}")
            elif x < 0.85:
                parts.append(f"{r.randint(0, max(0, s))}::{r.randint(1, 2)}")
            else:
                parts.append("None")
        if not parts:
            parts = [r.choice(["None", "...", "()"])]
            if parts[0] == "()":
                return "()"
        return ", ".join(parts)

    # -- op families -------------------------------------------------------
    def operand(self, a_name, a):
        """Picks a second operand for an element-wise op with tensor a:
        returns (expression, input name or None)."""
        r = self.rng
        x = r.random()
        if x < 0.3:
            b = self.pick(lambda t: _bcastable(t.shape, a.shape))
            if b is not None:
                return b, b
        if x < 0.55:
            dt = a.dtype if r.random() < 0.5 else self.rand_dtype()
            b = self.new_input(self.bcast_shape(tuple(a.shape)), dt)
            if b is not None:
                return b, b
        if x < 0.7:
            sc = self.scalars()
            if sc and r.random() < 0.3:
                return r.choice(sc), None
            return self.fmt_scalar(self.rand_scalar()), None
        if x < 0.92:
            return self.zero_dim_expr(), None
        return self.zero_dim_expr(cpu=True), None

    def g_binary(self):
        r = self.rng
        a = self.pick()
        if a is None:
            return False
        at = self.ns[a]
        family = r.choices(["arith", "div", "cmp", "minmax", "pow", "logical", "bitwise", "atan2"],
                           [10, 7, 5, 2, 2, 1, 1, 1])[0]
        b, b_in = self.operand(a, at)
        swap = r.random() < 0.4
        x, y = (b, a) if swap else (a, b)
        tensor_first = not (swap and b_in is None and not b.startswith("torch."))
        ops = {
            "arith": ["{x} + {y}", "{x} - {y}", "{x} * {y}", "torch.add({x}, {y}, alpha={al})",
                      "torch.sub({x}, {y}, alpha={al})", "torch.mul({x}, {y})", "torch.rsub({x}, {y})"],
            "div": ["{x} / {y}", "torch.div({x}, {y})", "torch.div({x}, {y}, rounding_mode='trunc')",
                    "torch.div({x}, {y}, rounding_mode='floor')", "{x} // {y}", "torch.remainder({x}, {y})",
                    "{x} % {y}", "torch.fmod({x}, {y})", "torch.floor_divide({x}, {y})"],
            "cmp": ["{x} < {y}", "{x} <= {y}", "{x} > {y}", "{x} >= {y}", "{x} == {y}", "{x} != {y}",
                    "torch.eq({x}, {y})", "torch.gt({x}, {y})"],
            "minmax": ["torch.maximum({x}, {y})", "torch.minimum({x}, {y})"],
            "pow": ["{x} ** {y}", "torch.pow({x}, {y})"],
            "logical": ["torch.logical_and({x}, {y})", "torch.logical_or({x}, {y})", "torch.logical_xor({x}, {y})"],
            "bitwise": ["{x} & {y}", "{x} | {y}", "{x} ^ {y}"],
            "atan2": ["torch.atan2({x}, {y})"],
        }[family]
        if not tensor_first:
            ops = [o for o in ops if not o.startswith("torch.")] or ["{x} * {y}"]
        tmpl = r.choice(ops)
        al = self.fmt_scalar(r.choice([2, -1, 3, 0.5, True]))
        name = self.fresh()
        code = f"{name} = " + tmpl.format(x=x, y=y, al=al)
        true_div = tmpl in ("{x} / {y}", "torch.div({x}, {y})")
        if family in ("div", "pow") and not true_div and not self.defined_int_division(family, x, y):
            self.nvars -= 1
            return False
        kind = "rdiv" if family == "div" and not true_div else "elem"
        return self.emit(code, name, kind=kind, inputs=(a, b_in), new=True)

    def defined_int_division(self, family, x, y) -> bool:
        """Whether x / y (family "div", any rounding) or x ** y ("pow")
        is defined on the CPU when computed in an integer dtype: no zero
        divisor, no INT_MIN / -1, no negative integer exponent."""
        try:
            num, den = self.val(x), self.val(y)
            ct = torch.result_type(num, den)
        except Exception:  # noqa: BLE001 - the op will raise on both devices
            return True
        if ct.is_floating_point:
            return True
        num = num if isinstance(num, torch.Tensor) else torch.tensor(num)
        den = den if isinstance(den, torch.Tensor) else torch.tensor(den)
        num, den = num.to(ct), den.to(ct)
        if family == "pow":
            return ct == BOOL or not bool((den < 0).any())
        if bool((den == 0).any()):
            return False
        if ct != BOOL and ct != U8 and bool((num == _int_range(ct)[0]).any()) and bool((den == -1).any()):
            return False
        return True

    def g_unary(self):
        r = self.rng
        a = self.pick()
        if a is None:
            return False
        at = self.ns[a]
        ops = ["-{a}", "torch.neg({a})", "{a}.abs()", "torch.abs({a})", "{a}.exp()", "torch.relu({a})",
               "torch.sigmoid({a})", "torch.tanh({a})", "{a}.sqrt()", "torch.log({a})", "torch.reciprocal({a})",
               "torch.floor({a})", "torch.ceil({a})", "torch.round({a})", "torch.trunc({a})", "torch.sign({a})",
               "torch.square({a})", "torch.logical_not({a})", "~{a}", "torch.sin({a})", "torch.nan_to_num({a})",
               "{a}.clamp({lo}, {hi})", "{a}.clamp(min={lo})", "{a}.clamp(max={hi})", "torch.clamp({a}, {tlo}, {thi})",
               "torch.where({c}, {a}, {b})", "torch.where({a} > 0, {a}, {b})", "{a}.clone()", "torch.zeros_like({a})",
               "torch.ones_like({a})", "torch.full_like({a}, {s})", "torch.isnan({a})", "torch.isfinite({a})",
               "torch.rsqrt({a})", "torch.expm1({a})", "torch.erf({a})"]
        tmpl = r.choice(ops)
        fill = {"a": a}
        inputs = [a]
        if "{lo}" in tmpl or "{hi}" in tmpl:
            kind = "int" if not at.dtype.is_floating_point and r.random() < 0.8 else "float"
            lo, hi = self.rand_scalar(kind), self.rand_scalar(kind)
            if r.random() < 0.85 and lo > hi:
                lo, hi = hi, lo
            fill.update(lo=self.fmt_scalar(lo), hi=self.fmt_scalar(hi))
        if "{tlo}" in tmpl:
            tlo = self.new_input(self.bcast_shape(tuple(at.shape)), at.dtype if r.random() < 0.7 else None)
            if tlo is None:
                return False
            fill.update(tlo=tlo, thi=self.fmt_scalar(self.rand_scalar("int")) if r.random() < 0.5 else "None")
            inputs.append(tlo)
        if "{c}" in tmpl:
            c = self.pick(lambda t: t.dtype == BOOL and _bcastable(t.shape, at.shape))
            if c is None:
                c = self.new_input(self.bcast_shape(tuple(at.shape)), BOOL)
                if c is None:
                    return False
            fill["c"] = c
            inputs.append(c)
        if "{b}" in tmpl:
            b, b_in = self.operand(a, at)
            fill["b"] = b
            inputs.append(b_in)
        if "{s}" in tmpl:
            v = self.rand_value(at.dtype) if at.dtype != BOOL else True
            if not at.dtype.is_floating_point and isinstance(v, float):
                v = int(v)
            fill["s"] = self.fmt_scalar(v)
        name = self.fresh()
        return self.emit(f"{name} = " + tmpl.format(**fill), name, inputs=inputs, new=True)

    def g_reduce(self):
        r = self.rng
        a = self.pick()
        if a is None:
            return False
        at = self.ns[a]
        nd = at.dim()
        kd = r.random() < 0.4
        d = self.rand_dim(nd)
        ndims = r.randint(0, max(1, nd))
        dims = tuple(r.sample(range(-nd, 0) if r.random() < 0.3 else range(nd), min(ndims, nd))) if nd else (0,)
        dims_s = repr(dims) if r.random() < 0.7 else repr(list(dims))
        if at.dtype.is_floating_point:
            pool = FLOATS
        else:
            pool = FLOATS + [I64, I32, I16] + ([I8, U8] if r.random() < 0.3 else [])
        dt = dname(r.choice(pool))
        ops = ["{a}.sum()", "{a}.sum({dims}, keepdim={kd})", "torch.sum({a}, {dims}, keepdim={kd}, dtype={dt})",
               "{a}.sum(dtype={dt})", "{a}.mean({dims}, keepdim={kd})", "torch.mean({a}, dim={dims}, dtype={dt})",
               "{a}.mean()", "{a}.amax({dims}, keepdim={kd})", "{a}.amin({dims})", "{a}.prod({d}, keepdim={kd})",
               "torch.prod({a}, dtype={dt})", "{a}.prod({d}, dtype={dt})", "{a}.argmax({d}, keepdim={kd})",
               "{a}.argmin()", "{a}.max({d}).values", "{a}.min({d}, keepdim={kd})[0]", "{a}.any({d})",
               "{a}.all()", "torch.count_nonzero({a}, {d})", "{a}.max()", "{a}.sum({d})", "{a}.float().mean({d})",
               "{a}.cumsum({d})", "torch.logsumexp({a}, {d})"]
        tmpl = r.choice(ops)
        name = self.fresh()
        code = f"{name} = " + tmpl.format(a=a, dims=dims_s, kd=kd, dt=dt, d=d)
        return self.emit(code, name, kind="reduce", inputs=(a,), new=True)

    def g_matmul(self):
        r = self.rng
        dt = r.choices(FLOATS, [6, 2, 2, 2])[0]
        form = r.choice(["mm", "matmul", "@", "bmm", "matmul"])
        want = {"mm": (2,), "bmm": (3,)}.get(form, (1, 2, 3))
        a = self.pick(lambda t: t.dtype.is_floating_point and t.dim() in want)
        if a is None or r.random() < 0.25:
            nd = r.choice(want)
            sizes = [0, 1, 2, 3, 4, 5] if r.random() < 0.1 else [1, 2, 3, 4, 5]
            if r.random() < BIG:
                sizes = [1, 16, 33, 64]
            shape = tuple(r.choice(sizes) for _ in range(nd))
            a = self.new_input(shape, dt)
            if a is None:
                return False
        at = self.ns[a]
        k = at.shape[-1]
        bdt = at.dtype if r.random() < 0.92 else r.choice(FLOATS)
        m = r.randint(1, 5)
        if form == "mm":
            bshape = (k, m)
        elif form == "bmm":
            bshape = (at.shape[0], k, m)
        else:
            opts = [(k,), (k, m)]
            if at.dim() >= 2:
                opts.append((r.choice([1, 2]), k, m))
            if at.dim() == 3:
                opts.append((at.shape[0], k, m))
            bshape = r.choice(opts)
        if r.random() < 0.05:
            bshape = tuple(s + 1 for s in bshape)  # mismatched inner dimension
        transpose = r.random() < 0.3 and len(bshape) >= 2
        if transpose:
            bshape = bshape[:-2] + (bshape[-1], bshape[-2])
        b = self.new_input(bshape, bdt)
        if b is None:
            return False
        bexpr = f"{b}.mT" if transpose else b
        tmpl = {"mm": "torch.mm({a}, {b})", "bmm": "torch.bmm({a}, {b})", "@": "{a} @ {b}",
                "matmul": "torch.matmul({a}, {b})"}[form]
        name = self.fresh()
        return self.emit(f"{name} = " + tmpl.format(a=a, b=bexpr), name, kind="matmul", inputs=(a, b), new=True)

    def g_view(self):
        r = self.rng
        a = self.pick()
        if a is None:
            return False
        at = self.ns[a]
        shape = tuple(at.shape)
        nd = len(shape)
        d, d2 = self.rand_dim(nd), self.rand_dim(nd)
        x = r.random()
        if x < 0.12:
            e = f"{a}.view({self.reshape_shape(at.numel())})"
        elif x < 0.22:
            e = f"{a}.reshape({self.reshape_shape(at.numel())})"
        elif x < 0.32:
            e = f"{a}.transpose({d}, {d2})"
        elif x < 0.38:
            perm = list(range(nd))
            r.shuffle(perm)
            e = f"{a}.permute({tuple(perm)!r})"
        elif x < 0.52:
            e = f"{a}[{self.index_str(shape)}]"
        elif x < 0.57:
            i = r.randint(-shape[d], shape[d] - 1) if nd and shape[d] else 0
            e = f"{a}.select({d}, {i})"
        elif x < 0.64:
            new = [(-1 if r.random() < 0.5 else s) if s != 1 else r.choice([1, 2, 3, -1]) for s in shape]
            if r.random() < 0.4:
                new = [r.randint(1, 3)] + new
            e = f"{a}.expand({tuple(new)!r})"
        elif x < 0.68:
            s = shape[d] if nd else 0
            start = r.randint(0, max(0, s))
            e = f"{a}.narrow({d}, {start}, {r.randint(0, max(0, s - start))})"
        elif x < 0.73:
            e = f"{a}.unsqueeze({r.randint(-nd - 1, nd)})"
        elif x < 0.77:
            e = f"{a}.squeeze({d})" if r.random() < 0.6 else f"{a}.squeeze()"
        elif x < 0.81:
            e = r.choice([f"{a}.t()", f"{a}.mT", f"{a}.T"])
        elif x < 0.84:
            e = f"{a}.flatten({r.randint(0, max(0, nd - 1))})"
        elif x < 0.87:
            e = f"{a}.contiguous()"
        elif x < 0.9:
            e = f"{a}.diagonal()" if r.random() < 0.5 else f"{a}.diagonal({r.randint(-1, 1)}, {d}, {d2})"
        elif x < 0.93:
            e = r.choice([f"{a}.chunk({r.randint(1, 3)}, {d})[0]", f"{a}.split(2, {d})[-1]", f"{a}.unbind({d})[0]"])
        elif x < 0.96:
            e = r.choice([f"{a}.movedim({d}, {d2})", f"torch.flip({a}, ({d},))", f"{a}.repeat({(2,) + (1,) * nd})"])
        else:
            e = f"{a}.unflatten({d}, (1, -1))" if nd else f"{a}.reshape(1, 1)"
        name = self.fresh()
        return self.emit(f"{name} = {e}", name, inputs=(a,), new=True)

    def idx_tensor(self, size, n=None, unique=False, oob=0.04, dt="torch.int64"):
        r = self.rng
        n = r.randint(0, 4) if n is None else n
        if size == 0:
            vals = []
        elif unique:
            vals = r.sample(range(size), min(n, size))
        else:
            vals = [r.randint(-size if r.random() < 0.3 else 0, size - 1) for _ in range(n)]
        if vals and r.random() < oob:
            vals[r.randrange(len(vals))] = size + r.randint(0, 2)
        return vals, f"torch.tensor({vals!r}, dtype={dt}, device=DEV)"

    def g_index(self):
        r = self.rng
        a = self.pick(lambda t: t.dim() > 0)
        if a is None:
            return False
        at = self.ns[a]
        shape = tuple(at.shape)
        nd = len(shape)
        d = r.randrange(nd)
        x = r.random()
        inputs = [a]
        if x < 0.2:
            _, idx = self.idx_tensor(shape[d], dt=r.choice(["torch.int64", "torch.int64", "torch.int32"]))
            e = f"torch.index_select({a}, {d}, {idx})"
        elif x < 0.35:
            vals, _ = self.idx_tensor(shape[0])
            e = f"{a}[{vals!r}]"
        elif x < 0.5:
            _, idx = self.idx_tensor(shape[d])
            e = f"{a}[{', '.join([':'] * d + [idx])}]"
        elif x < 0.6 and nd >= 2:
            n = r.randint(1, 3)
            _, i1 = self.idx_tensor(shape[0], n)
            _, i2 = self.idx_tensor(shape[1], n if r.random() < 0.8 else 1)
            e = f"{a}[{i1}, {i2}]"
        elif x < 0.75:
            m = self.pick(lambda t: t.dtype == BOOL and 0 < t.dim() <= nd and tuple(t.shape) == shape[:t.dim()])
            if m is None:
                m = self.new_input(shape[: r.randint(1, nd)], BOOL)
                if m is None:
                    return False
            inputs.append(m)
            e = f"{a}[{m}]" if r.random() < 0.7 else f"{a}[{a} > 0]"
        elif x < 0.9:
            m = self.pick(lambda t: t.dtype == BOOL and _bcastable(t.shape, at.shape))
            if m is None:
                m = self.new_input(self.bcast_shape(shape), BOOL)
                if m is None:
                    return False
            inputs.append(m)
            v = self.rand_value(at.dtype) if r.random() < 0.7 else self.rand_scalar()
            if not float_into_int_ok(at.dtype, v):
                return False
            vexpr = self.fmt_scalar(v) if r.random() < 0.7 else f"torch.tensor({_lit(v)}, device=DEV)"
            e = f"{a}.masked_fill({m}, {vexpr})"
        else:
            ishape = list(shape)
            ishape[d] = r.randint(0, 3)
            size = shape[d]
            vals = [r.randint(0, size - 1) if size else 0 for _ in range(_numel(ishape))]
            if size == 0 and vals:
                return False
            idx = f"torch.tensor({_fmt_nested(_nest(vals, tuple(ishape)) if vals else [])}, dtype=torch.int64, device=DEV)"
            if not vals:
                idx = f"torch.zeros({tuple(ishape)!r}, dtype=torch.int64, device=DEV)"
            e = f"torch.gather({a}, {d}, {idx})"
        name = self.fresh()
        return self.emit(f"{name} = {e}", name, inputs=inputs, new=True)

    def g_inplace(self):
        r = self.rng
        t = self.pick()
        if t is None:
            return False
        tt = self.ns[t]
        shape = tuple(tt.shape)
        nd = len(shape)
        # the written-to expression: the variable, or a view of it written inline
        x = r.random()
        if x < 0.6 or nd == 0:
            dst = t
        elif x < 0.8:
            dst = f"{t}[{self.index_str(shape)}]"
        else:
            d, d2 = self.rand_dim(nd), self.rand_dim(nd)
            i = r.randint(0, shape[d] - 1) if shape[d] else 0
            dst = r.choice([f"{t}.select({d}, {i})", f"{t}.t()", f"{t}.diagonal()", f"{t}.transpose({d}, {d2})",
                            f"{t}.view(-1)", f"{t}.narrow({d}, 0, {min(1, shape[d])})"])
        try:
            dv = self.val(dst)
        except Exception:  # noqa: BLE001 - a bad view: let the op raise on both
            dv = tt
        dshape = tuple(dv.shape)
        ops = ["{d}.add_({b})", "{d}.add_({b}, alpha={al})", "{d}.sub_({b})", "{d}.mul_({b})", "{d}.div_({b})",
               "{d}.div_({b}, rounding_mode={rm})", "{d}.clamp_({lo}, {hi})", "{d}.clamp_(min={lo})",
               "{d}.zero_()", "{d}.fill_({s})", "{d}.copy_({src})", "{d}.relu_()", "{d}.neg_()", "{d}.abs_()",
               "{d}.exp_()", "{d}.pow_({e})", "{d}.masked_fill_({m}, {s})", "{d}[{idx}] = {v}", "{T} += {b}",
               "{T} *= {b}", "{d}.index_fill_({dim}, {ui}, {s})", "{d}.copy_({src}.t())"]
        tmpl = r.choice(ops)
        fill = {"d": dst, "T": t, "dim": self.rand_dim(len(dshape))}
        inputs = [t]
        srcvals = []
        if "{b}" in tmpl:
            b, b_in = self.operand(t, dv)
            fill["b"] = b
            inputs.append(b_in)
            srcvals.append(b)
        if "{al}" in tmpl:
            fill["al"] = self.fmt_scalar(r.choice([2, -1, 0.5]))
        if "{rm}" in tmpl:
            fill["rm"] = repr(r.choice(["trunc", "floor"]))
        if "{lo}" in tmpl:
            kind = "int" if not dv.dtype.is_floating_point else r.choice(["int", "float"])
            lo, hi = sorted([self.rand_scalar(kind), self.rand_scalar(kind)])
            fill.update(lo=self.fmt_scalar(lo), hi=self.fmt_scalar(hi))
        if "{s}" in tmpl:
            v = self.rand_value(dv.dtype) if r.random() < 0.8 else self.rand_scalar()
            if r.random() < 0.15:
                s = f"torch.tensor({_lit(v)}, device=DEV)"
            else:
                s = self.fmt_scalar(v)
            fill["s"] = s
            srcvals.append(s)
        if "{e}" in tmpl:
            fill["e"] = r.choice(["2", "0", "3", "0.5", "(-1)"])
            srcvals.append(fill["e"])
        if "{src}" in tmpl:
            want = dshape if "{src}.t()" not in tmpl else tuple(reversed(dshape))
            if "{src}.t()" in tmpl and len(want) > 2:
                want = want[1:]
            src = self.pick(lambda u: _bcastable(u.shape, want) and _bcast(u.shape, want) == want)
            if src is None or r.random() < 0.4:
                src = self.new_input(self.bcast_shape(want) if r.random() < 0.3 else want)
                if src is None:
                    return False
            fill["src"] = src
            inputs.append(src)
            srcvals.append(f"{src}.t()" if "{src}.t()" in tmpl else src)
        if "{m}" in tmpl:
            m = self.pick(lambda u: u.dtype == BOOL and _bcastable(u.shape, dshape))
            if m is None:
                m = self.new_input(self.bcast_shape(dshape), BOOL)
                if m is None:
                    return False
            fill["m"] = m
            inputs.append(m)
            srcvals.append(m)
        if "{ui}" in tmpl:
            dd = fill["dim"]
            size = dshape[dd] if dshape else 1
            _, fill["ui"] = self.idx_tensor(size, unique=True, oob=0.0)
        if "{idx}" in tmpl:
            y = r.random()
            if y < 0.5 or not dshape:
                fill["idx"] = self.index_str(dshape)
            elif y < 0.75:
                _, fill["idx"] = self.idx_tensor(dshape[0], unique=True, oob=0.0)
            else:
                m = self.pick(lambda u: u.dtype == BOOL and tuple(u.shape) == dshape)
                if m is None:
                    m = self.new_input(dshape, BOOL)
                    if m is None:
                        return False
                fill["idx"] = m
                inputs.append(m)
                srcvals.append(m)
            if r.random() < 0.6:
                v = self.fmt_scalar(self.rand_value(dv.dtype))
            else:
                v = self.pick(lambda u: u.dim() <= 1 and u.numel() <= 1) or self.fmt_scalar(self.rand_scalar())
                inputs.append(v if _is_var(v) else None)
            fill["v"] = v
            srcvals.append(v)
        code = tmpl.format(**fill)
        # writing floats into an integer tensor must stay in range
        for s in srcvals:
            try:
                sv = self.val(s)
            except Exception:  # noqa: BLE001
                continue
            if not float_into_int_ok(dv.dtype, sv if not isinstance(sv, torch.Tensor) else sv):
                return False
            if tmpl.startswith("{d}.div_({b}, rounding") and not dv.dtype.is_floating_point:
                svt = sv if isinstance(sv, torch.Tensor) else torch.tensor(sv)
                try:
                    ct = torch.result_type(dv, sv)
                except Exception:  # noqa: BLE001
                    continue
                if not ct.is_floating_point:
                    if (svt.to(ct) == 0).any():
                        return False
                    if (svt.to(ct) == -1).any() and (dv == _int_range(ct)[0]).any():
                        return False
        # Where the written tensor overlaps itself (expanded), or a source
        # overlaps it other than as the very same view, the CPU result
        # depends on its loop order, unless the CPU refuses: keep only those.
        fills = ("zero_", "fill_", "index_fill_", "masked_fill_")
        risky = _self_overlapping(dv) and not (any(f"{{d}}.{f}(" in tmpl for f in fills)
                                               or ("{v}" in tmpl and not _is_var(fill.get("v", ""))))
        for s in srcvals:
            try:
                sv = self.val(s)
            except Exception:  # noqa: BLE001
                continue
            risky = risky or _overlap_unsafe(dv, sv)
        kind = "rdiv" if "rounding_mode" in tmpl else "elem"
        return self.emit(code, t, kind=kind, inputs=inputs, must_raise=dv if risky else None)

    def g_convert(self):
        r = self.rng
        a = self.pick()
        if a is None:
            return False
        at = self.ns[a]
        dt = self.rand_dtype()
        x = r.random()
        if x < 0.5:
            e = r.choice([f"{a}.to({dname(dt)})", f"{a}.to(dtype={dname(dt)}, copy=True)", f"{a}.type({dname(dt)})",
                          f"{a}.to(DEV, {dname(dt)})"])
        elif x < 0.85:
            meth, dt = r.choice([("float", F32), ("half", F16), ("bfloat16", BF16), ("double", F64), ("int", I32),
                                 ("long", I64), ("bool", BOOL), ("byte", U8), ("char", I8), ("short", I16)])
            e = f"{a}.{meth}()"
        elif x < 0.93:
            e = f"{a}.cpu().to(DEV, copy=True)"
            dt = at.dtype
        else:
            if at.numel() != 1:
                a = self.pick(lambda t: t.numel() == 1)
                if a is None:
                    return False
                at = self.ns[a]
            e = r.choice([f"{a}.item()", f"{a}.sum().item()", f"{a}.reshape(-1)[0].item()"])
            dt = at.dtype
        if not float_into_int_ok(dt, at):
            lo, hi = (0, 200) if dt == U8 else (-100, 100)
            e = f"torch.nan_to_num({a}).clamp({lo}, {hi}).to({dname(dt)})"
        name = self.fresh()
        return self.emit(f"{name} = {e}", name, inputs=(a,), new=True)

    def g_cat(self):
        r = self.rng
        a = self.pick(lambda t: t.dim() > 0)
        if a is None:
            return False
        at = self.ns[a]
        shape = list(at.shape)
        d = r.randrange(len(shape))
        stack = r.random() < 0.3
        if not stack:
            shape[d] = r.randint(0, 3)
        b = self.new_input(tuple(shape), at.dtype if r.random() < 0.6 else None)
        if b is None:
            return False
        e = f"torch.stack([{a}, {b}], {d})" if stack else f"torch.cat([{a}, {b}], {d})"
        name = self.fresh()
        return self.emit(f"{name} = {e}", name, inputs=(a, b), new=True)

    def g_input(self):
        return self.new_input() is not None

    def g_zero_dim(self):
        name = self.fresh()
        return self.emit(f"{name} = {self.zero_dim_expr()}", name, new=True)

    FAMILIES = [("g_input", 4), ("g_zero_dim", 2), ("g_binary", 22), ("g_unary", 12), ("g_reduce", 11),
                ("g_matmul", 6), ("g_view", 14), ("g_index", 8), ("g_inplace", 16), ("g_convert", 8), ("g_cat", 3)]

    def generate(self) -> Program:
        r = self.rng
        for _ in range(r.randint(1, 3)):
            self.new_input()
        names, weights = zip(*self.FAMILIES)
        ops = 0
        attempts = 0
        while ops < self.n_ops and attempts < self.n_ops * 20:
            attempts += 1
            before = len(self.steps)
            if getattr(self, r.choices(names, weights)[0])():
                ops += 1
            elif len(self.steps) > before:
                ops += 1  # operands it created still count
        return Program(self.seed, self.steps)


def _offsets(t: torch.Tensor) -> torch.Tensor:
    """The storage elements a (CPU) tensor addresses, one per element."""
    n = t.untyped_storage().nbytes() // t.element_size()
    return torch.as_strided(torch.arange(n), t.shape, t.stride(), t.storage_offset()).reshape(-1)


def _self_overlapping(t: torch.Tensor) -> bool:
    if t.numel() <= 1:
        return False
    o = _offsets(t)
    return o.unique().numel() != o.numel()


def _overlap_unsafe(dst: torch.Tensor, src) -> bool:
    """Whether src is read from memory that dst writes, other than as the
    same view (element i reading what element i writes is safe)."""
    if not isinstance(src, torch.Tensor) or src.numel() == 0 or dst.numel() == 0:
        return False
    if src.untyped_storage().data_ptr() != dst.untyped_storage().data_ptr():
        return False
    if src.stride() == dst.stride() and src.storage_offset() == dst.storage_offset() and src.shape == dst.shape:
        return False
    a, b = _offsets(dst), _offsets(src)
    return bool(torch.isin(a, b).any())


def _bcast(a, b):
    return tuple(torch.broadcast_shapes(tuple(a), tuple(b)))


def _bcastable(a, b) -> bool:
    try:
        torch.broadcast_shapes(tuple(a), tuple(b))
        return True
    except RuntimeError:
        return False


def generate(seed: int, n_ops: int | None = None) -> Program:
    """The program for ``seed``: about ``n_ops`` ops (default: 8 to 16)."""
    if n_ops is None:
        n_ops = random.Random(seed ^ 0x5EED).randint(8, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _Gen(seed, n_ops).generate()


# ----------------------------------------------------------------------------
# differential runner

def _meta(v):
    if not isinstance(v, torch.Tensor):
        return None
    st = v.untyped_storage()
    key = st.data_ptr() if st.nbytes() > 0 else None
    return (tuple(v.shape), tuple(v.stride()), v.storage_offset(), v.dtype, key)


def _snapshot(v: torch.Tensor) -> torch.Tensor:
    n = v.untyped_storage().nbytes() // v.element_size()
    return torch.as_strided(v, (n,), (1,), 0).clone()


def _view(snap: torch.Tensor, meta) -> torch.Tensor:
    shape, stride, off, dt, key = meta
    if key is None:
        return torch.empty_strided(shape, stride, dtype=dt)
    return torch.as_strided(snap, shape, stride, off)


def _scale(kind: str, inputs: list) -> float:
    """What the absolute tolerance is relative to: for a reduction, the sum
    of its input's magnitudes (any order of summation stays within it); for
    a matrix product, a bound on sum_k |a_ik| |b_kj|; otherwise 1."""
    ts = [v for v in inputs if isinstance(v, torch.Tensor) and (v.dtype.is_floating_point)]
    if kind == "reduce" and ts:
        return max(1.0, max(_finite_sum(t) for t in ts))
    if kind == "matmul" and len(ts) >= 2:
        a, b = ts[0], ts[1]
        return max(1.0, min(_finite_sum(a) * _finite_max(b), _finite_sum(b) * _finite_max(a)))
    return 1.0


def _compare(exp, got, scale: float = 1.0) -> str | None:
    """None if ``got`` (tpu) matches ``exp`` (CPU), else why not."""
    if isinstance(exp, torch.Tensor) != isinstance(got, torch.Tensor):
        return f"type: CPU {type(exp).__name__}, tpu {type(got).__name__}"
    if not isinstance(exp, torch.Tensor):
        if type(exp) is not type(got):
            return f"scalar type: CPU {type(exp).__name__} {exp!r}, tpu {type(got).__name__} {got!r}"
        if isinstance(exp, float):
            if math.isnan(exp) and math.isnan(got):
                return None
            if not math.isclose(exp, got, rel_tol=1e-5, abs_tol=1e-5 * scale) and not (exp == got):
                return f"value: CPU {exp!r}, tpu {got!r}"
            return None
        return None if exp == got else f"value: CPU {exp!r}, tpu {got!r}"
    if exp.dtype != got.dtype:
        return f"dtype: CPU {exp.dtype}, tpu {got.dtype}"
    if exp.shape != got.shape:
        return f"shape: CPU {tuple(exp.shape)}, tpu {tuple(got.shape)}"
    if torch.equal(exp, got):
        return None
    if not exp.dtype.is_floating_point:
        return "values differ"
    tol = TOL[exp.dtype]
    atol = tol * scale
    try:
        torch.testing.assert_close(got, exp, rtol=tol, atol=atol, equal_nan=True)
    except AssertionError as e:
        return "values differ: " + " ".join(str(e).split("\n")[1:3]).strip()
    return None


def _short(v, limit=600) -> str:
    if isinstance(v, torch.Tensor):
        s = f"{v.tolist()!r}"
        s = f"tensor({s}, dtype={v.dtype})"
    else:
        s = repr(v)
    return s if len(s) <= limit else s[:limit] + " ..."


def _fmt_exc(e) -> str:
    if e is None:
        return "no error"
    msg = str(e).strip().split("\n")[0]
    return f"{type(e).__name__}: {msg[:300]}"


@dataclass
class Failure:
    program: Program
    mode: str
    step: int | None
    reason: str
    detail: str = ""

    @property
    def line(self) -> str:
        return self.program.steps[self.step].code if self.step is not None else "<end of program>"

    def signature(self):
        """What identifies this failure while shrinking the program."""
        return (self.line, self.reason.split(":")[0])

    def __str__(self):
        where = f"statement {self.step}: {self.line}" if self.step is not None else "at the final sync"
        return (f"tpu differs from CPU (seed {self.program.seed}, mode {self.mode}) at {where}\n"
                f"  {self.reason}\n{self.detail}\n"
                f"--- repro (set DEV = \"cpu\" for the reference) ---\n"
                f"{self.program.source(upto=self.step, mark=self.step)}\n")


@contextlib.contextmanager
def _settings(mode: str, device: str):
    prec = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        with warnings.catch_warnings(), (torch.tpu.mode(mode) if device == "tpu" else contextlib.nullcontext()):
            warnings.simplefilter("ignore")
            yield
    finally:
        torch.set_float32_matmul_precision(prec)


def _sync_error(device: str = "tpu"):
    if device != "tpu":
        return None
    try:
        torch.tpu.synchronize()
    except Exception as e:  # noqa: BLE001
        return e
    return None


@dataclass
class _Record:
    step: int
    target: str
    group_c: dict   # name -> meta, variables sharing the target's storage (CPU)
    group_t: dict
    snap_c: object  # CPU clone of the storage, or the scalar value
    snap_t: object  # tpu clone of the storage (later: its CPU copy), or the scalar value
    scale: float


def _cuda_device_rule(step, exc: BaseException) -> bool:
    """True when the device refused a statement that mixes in a CPU tensor
    with PyTorch's same-device error, as CUDA does (an accelerator accepts
    a 0-dim CPU tensor only as a TensorIterator scalar: logical_xor's
    composite, for one, puts its output on the CPU scalar's device). The
    CPU reference, where every tensor is on the CPU, cannot show this."""
    if not isinstance(exc, RuntimeError) or "Expected all tensors to be on the same device" not in str(exc):
        return False
    literals = [part.split(")", 1)[0] for part in step.code.split("torch.tensor(")[1:]]
    return any("device=DEV" not in literal for literal in literals)


def run(program: Program, mode: str = "strict", local_check: bool = True, device: str = "tpu") -> Failure | None:
    """Runs ``program`` on CPU and tpu in ``mode``; returns the first
    difference, or None. (``device="cpu"`` runs CPU against itself: a
    check of the fuzzer.)"""
    ns_c, ns_t = namespace("cpu"), namespace(device)
    meta_c: dict = {}
    meta_t: dict = {}
    born: dict = {}
    recs: list[_Record] = []

    def fail(k, reason, detail=""):
        return Failure(program, mode, k, reason, detail)

    with _settings(mode, device):
        for k, step in enumerate(program.steps):
            ec = _exec(step, ns_c)
            et = _exec(step, ns_t)
            if ec is not None and et is None:
                et = _sync_error(device)  # a kernel-side error surfaces at the next sync in strict mode
            if ec is None and et is not None and _cuda_device_rule(step, et):
                return None  # CUDA refuses this too; the CPU reference cannot say so: stop here
            if ec is None and et is not None and "more than one element of the written-to tensor" in str(et):
                return None  # an in-place op into an expanded tensor: deprecated on the CPU, refused on tpu
            if ec is not None and et is None and "refer to a single memory location" in str(ec):
                continue  # tpu copies one element onto itself, a no-op the CPU refuses: same state
            if (ec is None) != (et is None):
                return fail(k, f"errors differ: CPU {_fmt_exc(ec)}; tpu {_fmt_exc(et)}")
            if ec is not None:
                continue
            for name in [n for n in ns_c if _is_var(n) and n not in meta_c]:
                if name not in ns_t:
                    return fail(k, f"{name} not assigned on tpu")
                meta_c[name], meta_t[name], born[name] = _meta(ns_c[name]), _meta(ns_t[name]), k
            vc, vt = ns_c[step.target], ns_t[step.target]
            if not isinstance(vc, torch.Tensor):
                why = _compare(vc, vt) if not isinstance(vt, torch.Tensor) else "tpu gave a tensor"
                if why and (type(vc) is not type(vt)):
                    return fail(k, why)
                recs.append(_Record(k, step.target, {}, {}, vc, vt, 1.0))
                continue
            if not isinstance(vt, torch.Tensor):
                return fail(k, f"tpu gave {type(vt).__name__}, CPU a tensor")
            if vt.device.type != device:
                return fail(k, f"result on {vt.device}, expected {device}")
            if vc.dtype != vt.dtype or vc.shape != vt.shape:
                return fail(k, f"metadata: CPU {vc.dtype} {tuple(vc.shape)}, tpu {vt.dtype} {tuple(vt.shape)}")
            kc, kt = _meta(vc)[4], _meta(vt)[4]
            gc = {n: meta_c[n] for n in meta_c if kc is not None and meta_c[n] and meta_c[n][4] == kc}
            gt = {n: meta_t[n] for n in meta_t if kt is not None and meta_t[n] and meta_t[n][4] == kt}
            if set(gc) != set(gt) and vc.numel() > 0:
                return fail(k, f"aliasing differs: on CPU {step.target} shares storage with {sorted(gc)}, "
                               f"on tpu with {sorted(gt)}")
            scale = _scale(step.kind, [ns_c.get(i) for i in step.inputs])
            gc = gc or {step.target: _meta(vc)}
            gt = gt or {step.target: _meta(vt)}
            sc = _snapshot(vc) if kc is not None else None
            st = _snapshot(vt) if kt is not None else None
            recs.append(_Record(k, step.target, gc, gt, sc, st, scale))
        err = _sync_error(device)
        if err is not None:
            return fail(None, f"tpu raised at the final sync: {_fmt_exc(err)}")
        for rec in recs:
            if isinstance(rec.snap_t, torch.Tensor):
                try:
                    rec.snap_t = rec.snap_t.cpu()
                except Exception as e:  # noqa: BLE001
                    return fail(rec.step, f"copying the result to the host raised {_fmt_exc(e)}")
        for rec in recs:
            why = _check_record(rec)
            if why is None:
                continue
            name, reason, exp, got = why
            if local_check:
                ok, detail = _local_check(program, rec, recs, meta_t, born, ns_t)
                if ok:
                    continue
            else:
                detail = ""
            return fail(rec.step, f"{name}: {reason}",
                        f"  CPU: {_short(exp)}\n  tpu: {_short(got)}\n{detail}")
    return None


def _check_record(rec: _Record):
    if not rec.group_c:
        why = _compare(rec.snap_c, rec.snap_t)
        return None if why is None else (rec.target, why, rec.snap_c, rec.snap_t)
    for name in sorted(rec.group_c, key=lambda n: n != rec.target):
        exp = _view(rec.snap_c, rec.group_c[name])
        got = _view(rec.snap_t, rec.group_t[name])
        why = _compare(exp, got, rec.scale)
        if why is not None:
            return name, why, exp, got
    return None


_ZERO_DIM_LITERAL = re.compile(r"torch\.tensor\([^\[\]()]+\)")


def _local_check(program, rec, recs, meta_t, born, ns_t):
    """Re-runs statement rec.step on the CPU from the tpu's own values just
    before it (aliasing kept) and compares with what the tpu computed.

    Where float16/bfloat16 values are involved, a second reference is the
    statement computed in float32 and rounded once to the result dtype:
    the virtual TPU computes half types in f32 registers and rounds once on
    store, as PyTorch's vectorised CPU loops do, while its scalar CPU loops
    (short or strided tensors) round some intermediates (alpha * other,
    the quotient of a rounding division) to the half type first."""
    k = rec.step
    latest: dict = {}
    scalars: dict = {}
    for r in recs:
        if r.step >= k:
            break
        if r.group_t:
            key = next(iter(r.group_t.values()))[4]
            if key is not None:
                latest[key] = r.snap_t
        elif not isinstance(r.snap_t, torch.Tensor) and r.snap_t is not None:
            scalars[r.target] = r.snap_t
    step = program.steps[k]

    def attempt(upcast: bool):
        storages = {}
        for key, snap in latest.items():
            storages[key] = snap.float() if upcast and snap.dtype in (F16, BF16) else snap.clone()
        ns = namespace("cpu")
        for name, meta in meta_t.items():
            if born[name] >= k:
                continue
            if meta is None:
                if name in scalars:
                    ns[name] = scalars[name]
                continue
            if meta[4] is not None and meta[4] not in storages:
                continue
            if upcast and meta[3] in (F16, BF16):
                meta = meta[:3] + (F32,) + meta[4:]
            ns[name] = _view(storages.get(meta[4]), meta)
        scale = _scale(step.kind, [ns.get(i) for i in step.inputs])
        run_step = step
        result_dtype = (rec.group_t.get(rec.target) or (None,) * 4)[3] if rec.group_t else None
        if upcast and result_dtype in (F16, BF16):
            # a 0-dim tensor written in the statement is cast to the common
            # (half) dtype before the op, as TensorIterator does; Python
            # scalars are not (they enter the f32 computation as they are)
            code = _ZERO_DIM_LITERAL.sub(lambda m: f"{m.group(0)}.to({dname(result_dtype)}).float()", step.code)
            run_step = Step(code, step.target, step.kind, step.inputs)
        e = _exec(run_step, ns)
        if e is not None:
            return False, f"  CPU from the tpu's inputs raised {_fmt_exc(e)}\n"
        pairs = ([(rec.target, ns[rec.target], rec.snap_t)] if not rec.group_t else
                 [(name, ns.get(name), _view(rec.snap_t, meta)) for name, meta in rec.group_t.items()])
        for name, exp, got in pairs:
            if exp is None:
                continue
            if upcast and isinstance(exp, torch.Tensor) and isinstance(got, torch.Tensor):
                exp = exp.to(got.dtype)
            why = _compare(exp, got, scale)
            if why is not None:
                how = "in f32, rounded once" if upcast else ""
                return False, f"  CPU from the tpu's inputs{how and ' ' + how} ({name}): {_short(exp)}\n"
        return True, ""

    ok, detail = attempt(False)
    if ok or not any(m and m[3] in (F16, BF16) for m in list(rec.group_t.values()) + [meta_t.get(i) for i in step.inputs]):
        return ok, detail
    ok2, detail2 = attempt(True)
    return ok2, detail + detail2


# ----------------------------------------------------------------------------
# shrinking and the command line

def shrink(program: Program, mode: str, failure: Failure, device: str = "tpu") -> tuple[Program, Failure]:
    """Drops statements while the same failure stays; returns the smallest
    program found and its failure."""
    sig = failure.signature()
    steps = list(program.steps[: (failure.step + 1) if failure.step is not None else None])
    best = failure
    changed = True
    while changed:
        changed = False
        i = len(steps) - 2
        while i >= 0:
            trial = steps[:i] + steps[i + 1:]
            f = run(Program(program.seed, trial), mode, device=device)
            if f is not None and f.signature() == sig:
                steps, best, changed = trial, f, True
            i -= 1
    return Program(program.seed, steps), best


def modes_for(seed: int) -> list:
    """Every program runs in strict mode; some in debug and fused mode too."""
    modes = ["strict"]
    if seed % 4 == 0:
        modes.append("debug")
    if seed % 10 == 1:
        modes.append("fused")
    return modes


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--ops", type=int, default=None)
    p.add_argument("--modes", default=None, help="comma-separated; default: per seed (see modes_for)")
    p.add_argument("--shrink", action="store_true")
    p.add_argument("--device", default="tpu", help="cpu: run CPU against itself (checks the fuzzer)")
    p.add_argument("--show", type=int, default=None, help="print the program for this seed and exit")
    args = p.parse_args(argv)
    if args.show is not None:
        print(generate(args.show, args.ops).source())
        return 0
    if args.device == "tpu":
        import torch_tpu  # noqa: F401  (when autoload is off)
    t0 = time.time()
    n_fail = 0
    for seed in range(args.start, args.start + args.count):
        prog = generate(seed, args.ops)
        for mode in (args.modes.split(",") if args.modes else modes_for(seed)):
            f = run(prog, mode, device=args.device)
            if f is None:
                continue
            n_fail += 1
            if args.shrink:
                _, f = shrink(prog, mode, f, args.device)
            print(f"=== FAIL seed={seed} mode={mode}\n{f}", flush=True)
    print(f"ran {args.count} programs from seed {args.start} in {time.time() - t0:.1f}s: {n_fail} failures",
          flush=True)
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
