"""The native element-wise, softmax and bmm kernels against PyTorch's CPU
backend, with the CPU fallback turned into an error (so every op here must
run natively): each op in several dtypes, layouts (contiguous, transposed,
broadcast, in place, out=), with special values, and through autograd."""
import pytest
import torch
import torch.nn.functional as F

TOL = {torch.float32: (1.3e-6, 1e-5), torch.float64: (1e-12, 1e-12),
       torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (1e-3, 1e-3)}


# Every test here runs with the CPU fallback turned into an error (conftest).
pytestmark = pytest.mark.usefixtures("native_only")


def inputs(dtype, shape=(7, 37), seed=0, positive=False, specials=True):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=torch.float64) * 3
        if positive:
            x = x.abs() + 0.01
        values = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0] if specials else [0.0, -0.0]
        x.view(-1)[: len(values)] = torch.tensor(values, dtype=torch.float64)
        return x.to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    lo = 0 if dtype == torch.uint8 else -50
    return torch.randint(lo, 50, shape, generator=g).to(dtype)


def check(cpu_result, tpu_result, computed_in=None):
    """computed_in: the dtype the op computed in, when out's is wider."""
    assert tpu_result.device.type == "tpu"
    assert tpu_result.dtype == cpu_result.dtype
    assert tpu_result.shape == cpu_result.shape
    rtol, atol = TOL.get(computed_in or cpu_result.dtype, (0, 0))
    torch.testing.assert_close(tpu_result.cpu(), cpu_result, rtol=rtol, atol=atol, equal_nan=True)


# gelu(+inf) is inf on tpu (and CUDA); PyTorch's vectorised CPU gelu gives
# NaN there, so gelu is compared on finite inputs (and NaN, zeros).
FINITE_ONLY = {F.gelu}

UNARY_FLOAT = [torch.exp, torch.exp2, torch.expm1, torch.log, torch.log2, torch.log10, torch.log1p, torch.sqrt,
               torch.rsqrt, torch.sin, torch.cos, torch.tan, torch.asin, torch.acos, torch.atan, torch.sinh,
               torch.cosh, torch.tanh, torch.asinh, torch.acosh, torch.atanh, torch.erf, torch.erfc, torch.erfinv,
               torch.sigmoid, torch.reciprocal, torch.frac, F.gelu, lambda x: F.gelu(x, approximate="tanh"), F.silu,
               F.mish, F.softplus, lambda x: F.softplus(x, beta=2, threshold=3), F.leaky_relu, F.elu, F.hardswish,
               F.hardsigmoid, torch.nan_to_num, lambda x: torch.nan_to_num(x, nan=1.5, posinf=7, neginf=-7)]
UNARY_ANY = [torch.neg, torch.abs, torch.sign, torch.floor, torch.ceil, torch.round, torch.trunc, torch.relu,
             lambda x: torch.clamp(x, -1, 2), lambda x: torch.clamp(x, min=0), torch.isnan, torch.isinf,
             torch.logical_not]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("fn", UNARY_FLOAT + UNARY_ANY)
def test_unary_float(fn, dtype):
    x = inputs(dtype, specials=fn not in FINITE_ONLY)
    check(fn(x), fn(x.to("tpu")))
    # a transposed input gives a result laid out like it, as on CPU
    xt = x.t()
    r_cpu, r_tpu = fn(xt), fn(xt.to("tpu").contiguous().t().contiguous().t())
    check(r_cpu, r_tpu)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
@pytest.mark.parametrize("fn", UNARY_ANY + [torch.exp, torch.sigmoid, torch.bitwise_not])
def test_unary_integer(fn, dtype):
    x = inputs(dtype)
    try:
        expected = fn(x)
    except (RuntimeError, NotImplementedError) as e:  # the dtype has no CPU kernel: tpu refuses too
        with pytest.raises(type(e)):
            fn(x.to("tpu")).cpu()
        return
    check(expected, fn(x.to("tpu")))


BINARY = [torch.add, torch.sub, torch.mul, torch.div, lambda a, b: torch.div(a, b, rounding_mode="floor"),
          lambda a, b: torch.div(a, b, rounding_mode="trunc"), lambda a, b: torch.add(a, b, alpha=3),
          torch.maximum, torch.minimum, torch.fmax, torch.fmin, torch.remainder, torch.fmod, torch.eq, torch.ne,
          torch.lt, torch.le, torch.gt, torch.ge, torch.logical_and, torch.logical_or, torch.logical_xor]
BINARY_FLOAT = [torch.atan2, torch.copysign, torch.xlogy, torch.pow]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32])
@pytest.mark.parametrize("fn", BINARY + BINARY_FLOAT)
def test_binary(fn, dtype):
    a, b = inputs(dtype, seed=1), inputs(dtype, seed=2)
    if not dtype.is_floating_point:
        b = torch.where(b == 0, torch.ones_like(b), b)  # integer division by zero raises (tested elsewhere)
        if fn is torch.pow:
            b = b.abs() % 4
    check(fn(a, b), fn(a.to("tpu"), b.to("tpu")))
    # a broadcast row, and a Python scalar second operand where the op takes one
    row = b[0]
    check(fn(a, row), fn(a.to("tpu"), row.to("tpu")))
    try:
        expected = fn(a, 3)
    except TypeError:
        return
    check(expected, fn(a.to("tpu"), 3))


def test_mixed_dtypes_promote_as_on_cpu():
    a, b = inputs(torch.float16, seed=3), inputs(torch.float32, seed=4)
    i = inputs(torch.int32, seed=5)
    for x, y in [(a, b), (i, a), (i, 2.5), (a[0, 0], i), (i, torch.tensor(3.5))]:
        xt = x.to("tpu") if isinstance(x, torch.Tensor) and x.dim() > 0 else x
        yt = y.to("tpu") if isinstance(y, torch.Tensor) and y.dim() > 0 else y
        for fn in (torch.add, torch.mul, torch.maximum if isinstance(y, torch.Tensor) else torch.mul, torch.gt):
            check(fn(x, y), fn(xt, yt))


def test_in_place_and_out():
    a, b = inputs(torch.float32, seed=6), inputs(torch.float32, seed=7)
    at, bt = a.to("tpu"), b.to("tpu")
    a.mul_(b).exp_().clamp_(max=5.0)
    at.mul_(bt).exp_().clamp_(max=5.0)
    check(a, at)
    out = torch.empty(7, 37, dtype=torch.float64, device="tpu")
    torch.sin(bt, out=out)
    check(torch.sin(b, out=torch.empty(7, 37, dtype=torch.float64)), out, computed_in=torch.float32)
    with pytest.raises(RuntimeError):
        torch.sin(bt, out=torch.empty(7, 37, dtype=torch.int64, device="tpu"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_ternary(dtype):
    a, b, c = inputs(dtype, seed=8), inputs(dtype, seed=9), inputs(dtype, seed=10, positive=True)
    at, bt, ct = a.to("tpu"), b.to("tpu"), c.to("tpu")
    check(torch.addcmul(a, b, c, value=0.5), torch.addcmul(at, bt, ct, value=0.5))
    check(torch.addcdiv(a, b, c, value=-2), torch.addcdiv(at, bt, ct, value=-2))
    check(torch.lerp(a, b, 0.3), torch.lerp(at, bt, 0.3))
    check(torch.lerp(a, b, 0.8), torch.lerp(at, bt, 0.8))
    check(torch.lerp(a, b, c.clamp(max=1)), torch.lerp(at, bt, ct.clamp(max=1)))
    check(torch.where(a > 0, b, c), torch.where(at > 0, bt, ct))
    check(torch.where(a > 0, b, 1.5), torch.where(at > 0, bt, 1.5))
    check(a.masked_fill(b > 0, -7), at.masked_fill(bt > 0, -7))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape,dim", [((4, 33), -1), ((3, 5, 7), 1), ((6, 300), 0), ((), 0), ((2, 0, 3), 2)])
def test_softmax_forward_backward(shape, dim, dtype):
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(11)) * 4).to(dtype)
    for fn in (torch.softmax, torch.log_softmax):
        check(fn(x, dim), fn(x.to("tpu"), dim))
        xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
        g = torch.randn(shape, dtype=dtype)
        fn(xc, dim).backward(g)
        fn(xt, dim).backward(g.to("tpu"))
        check(xc.grad, xt.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dim", [-1, 1, 0])
def test_safe_softmax(dtype, dim):
    # _safe_softmax: softmax with 0 for a row that is all -inf (a NaN in a
    # row still makes it NaN), its dtype argument, and its gradient.
    x = (torch.randn(4, 5, 7, generator=torch.Generator().manual_seed(13)) * 3).to(dtype)
    x[1, 2, :] = x[:, 3, 4] = x[2, :, 0] = float("-inf")
    x[3, 1, :] = float("-inf")
    x[0, 0, 2] = float("nan")
    check(torch.ops.aten._safe_softmax(x, dim), torch.ops.aten._safe_softmax(x.to("tpu"), dim))
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    check(torch.ops.aten._safe_softmax(x, dim, wide), torch.ops.aten._safe_softmax(x.to("tpu"), dim, wide),
          computed_in=dtype)
    finite = x.nan_to_num(nan=0.0).requires_grad_()
    xt = finite.detach().to("tpu").requires_grad_()
    g = torch.randn(4, 5, 7, generator=torch.Generator().manual_seed(14)).to(dtype)
    torch.ops.aten._safe_softmax(finite, dim).backward(g)
    torch.ops.aten._safe_softmax(xt, dim).backward(g.to("tpu"))
    check(finite.grad, xt.grad)


def test_attention_math_path_fully_masked_rows():
    # The math path of scaled_dot_product_attention (a training step's, with
    # dropout) with a query whose keys are all masked out: as on the CPU.
    g = torch.Generator().manual_seed(15)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=g) for _ in range(3))
    mask = torch.rand(2, 1, 6, 6, generator=g) > 0.3
    mask[:, :, 2, :] = False
    want = torch.ops.aten._scaled_dot_product_attention_math(q, k, v, mask)[0]
    got = torch.ops.aten._scaled_dot_product_attention_math(q.to("tpu"), k.to("tpu"), v.to("tpu"),
                                                            mask.to("tpu"))[0]
    check(want, got)


def test_softmax_half_to_float_and_special_rows():
    x = torch.randn(3, 9).half().to("tpu")
    assert torch._softmax(x, -1, True).dtype == torch.float32
    rows = torch.tensor([[1.0, float("nan"), 2.0], [float("-inf")] * 3, [1e30, 1e30, -1e30]])
    check(torch.softmax(rows, -1), torch.softmax(rows.to("tpu"), -1))


@pytest.mark.parametrize("fn,args", [(F.gelu, ()), (F.silu, ()), (torch.tanh, ()), (torch.sigmoid, ()),
                                     (F.leaky_relu, (0.2,)), (F.softplus, ()), (F.hardswish, ()),
                                     (F.hardsigmoid, ()), (F.mish, ()), (torch.relu, ()), (F.hardtanh, ()),
                                     (lambda x: F.gelu(x, approximate="tanh"), ())])
def test_activation_gradients(fn, args):
    x = torch.randn(5, 11, generator=torch.Generator().manual_seed(12)) * 3
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    g = torch.randn(5, 11)
    fn(xc, *args).backward(g)
    fn(xt, *args).backward(g.to("tpu"))
    check(xc.grad, xt.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bmm(dtype):
    a, b = torch.randn(5, 7, 9).to(dtype), torch.randn(5, 9, 3).to(dtype)
    check(torch.bmm(a, b), torch.bmm(a.to("tpu"), b.to("tpu")))
    check(a @ b, a.to("tpu").transpose(1, 2).contiguous().transpose(1, 2) @ b.to("tpu"))


def test_errors_match_cpu():
    t = torch.ones(3, device="tpu")
    with pytest.raises(RuntimeError, match="Boolean inputs not supported for relu"):
        torch.relu(t.bool())
    with pytest.raises(NotImplementedError, match="bitwise_and"):
        torch.bitwise_and(t, t)
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool tensor"):
        torch.sub(t.bool(), t)
    with pytest.raises(RuntimeError, match="masked_fill_ only supports boolean masks"):
        t.masked_fill_(t, 0)


def test_adversarial_findings():
    """Cases an adversarial pass found, each against the CPU backend."""
    u8 = torch.tensor([0, 1, 5], dtype=torch.uint8)
    for fn in (lambda x: torch.clamp(x, -5, 300), lambda x: torch.pow(x.int(), 2**40)):
        with pytest.raises(RuntimeError, match="without overflow"):
            fn(u8)
        with pytest.raises(RuntimeError, match="without overflow"):
            fn(u8.to("tpu"))
    # hardsigmoid keeps NaN
    check(F.hardsigmoid(torch.tensor([float("nan"), 1.0])), F.hardsigmoid(torch.tensor([float("nan"), 1.0], device="tpu")))
    # lerp's scalar weight is not rounded to half first
    a, b = torch.tensor([-1.1258], dtype=torch.half), torch.tensor([-0.2], dtype=torch.half)
    check(torch.lerp(a, b, 0.7), torch.lerp(a.to("tpu"), b.to("tpu"), 0.7))
    # softmax into its own input, and its dtype errors
    x = torch.randn(4, 5)
    xt = x.to("tpu")
    torch._softmax(xt, 1, False, out=xt)
    check(torch.softmax(x, 1), xt)
    with pytest.raises(NotImplementedError):
        torch.softmax(torch.ones(3, dtype=torch.int64, device="tpu"), 0)
    with pytest.raises(RuntimeError, match="conversion is supported for Half type only"):
        torch._softmax(torch.ones(3, device="tpu"), 0, True)


def test_cat():
    a, b = torch.randn(2, 3), torch.randn(4, 3).double()
    empty = torch.empty(0)
    check(torch.cat([a, b, empty]), torch.cat([a.to("tpu"), b.to("tpu"), empty.to("tpu")]))
    check(torch.cat([a, a.t().contiguous().t()], 1), torch.cat([a.to("tpu"), a.to("tpu").t().contiguous().t()], 1))
    out = torch.empty(0, device="tpu")
    torch.cat([a.to("tpu"), a.to("tpu")], -1, out=out)
    check(torch.cat([a, a], -1), out)
    with pytest.raises(RuntimeError):
        torch.cat([a.to("tpu"), torch.randn(2, 4, device="tpu")])
    with pytest.raises(RuntimeError, match="same device"):
        torch.cat([a.to("tpu"), a])


def test_dropout_and_bernoulli():
    torch.manual_seed(0)
    x = torch.ones(200_000, device="tpu")
    torch.tpu.manual_seed(5)
    y1 = torch.nn.functional.dropout(x, 0.25)
    torch.tpu.manual_seed(5)
    y2 = torch.nn.functional.dropout(x, 0.25)
    assert torch.equal(y1.cpu(), y2.cpu())  # same seed, same mask
    kept = (y1 != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.01
    kept_values = torch.where(y1 != 0, y1, 1 / 0.75).cpu()  # kept elements are scaled by 1 / (1 - p)
    assert torch.allclose(kept_values, torch.full_like(kept_values, 1 / 0.75))
    xr = x.clone().requires_grad_()
    torch.tpu.manual_seed(5)
    torch.nn.functional.dropout(xr, 0.25).sum().backward()
    assert torch.equal(xr.grad.cpu(), y1.cpu())  # the gradient is the mask times the scale
    assert torch.equal(torch.nn.functional.dropout(x, 0.25, training=False).cpu(), x.cpu())
    assert torch.equal(torch.nn.functional.dropout(x, 1.0).cpu(), torch.zeros(200_000))
    b = torch.empty(100_000, dtype=torch.bool, device="tpu").bernoulli_(0.4)
    assert abs(b.float().mean().item() - 0.4) < 0.01
    with pytest.raises(RuntimeError):
        torch.empty(3, device="tpu").bernoulli_(1.5)


@pytest.mark.parametrize("args,dtype", [((10,), None), ((-3, 7, 2), None), ((0, 1, 0.1), None),
                                        ((-2.5, 3.5, 0.25), torch.float64), ((5, 0, -1), torch.int32),
                                        ((0, 100), torch.bfloat16), ((1, 1), None)])
def test_arange(args, dtype):
    check(torch.arange(*args, dtype=dtype), torch.arange(*args, dtype=dtype, device="tpu"))
    with pytest.raises(RuntimeError):
        torch.arange(0, 10, 0, device="tpu")


# Operands of other dtypes than the compute's, and layouts without a flat
# run (row and column broadcasts, transposed operands): the kernels stage
# and gather them; the results are the CPU's.
MIXED = [
    ("f32 * bool mask", lambda d: d["f"] * d["b"]),
    ("bf16 * bool mask", lambda d: d["h"] * d["b"]),
    ("f32 + i64", lambda d: d["f"] + d["i"]),
    ("f32 > i32", lambda d: d["f"] > d["i32"]),
    ("i64 * f32 scalar", lambda d: d["i"] * 0.5),
    ("i64 + i64", lambda d: d["i"] + d["i"]),
    ("i32 * 3", lambda d: d["i32"] * 3),
    ("i32 - i64, alpha", lambda d: torch.sub(d["i32"], d["i"], alpha=2)),
    ("u8 + u8 wraps", lambda d: d["u8"] + d["u8"] * 4),
    ("i64 // 3", lambda d: d["i"] // 3),
    ("i64 max i32", lambda d: torch.maximum(d["i"], d["i32"])),
    ("u8 != 0", lambda d: d["u8"] != 0),
    ("i64 == i32", lambda d: d["i"] == d["i32"]),
    ("bool & bool", lambda d: d["b"] & d["b2"]),
    ("bool == 2 (int64 compute)", lambda d: d["b"] == 2),
    ("bool != 2", lambda d: d["b"] != 2),
    ("bool < True", lambda d: d["b"] < True),
    ("bool == bool.T", lambda d: d["b"] == d["sqb"].t()),
    ("bool | bool", lambda d: d["b"] | d["b2"]),
    ("bool ^ bool", lambda d: d["b"] ^ d["b2"]),
    ("bool + bool", lambda d: d["b"] + d["b2"]),
    ("bool * bool", lambda d: d["b"] * d["b2"]),
    ("i8 & i8", lambda d: d["i8"] & (d["i8"] + 3)),
    ("~bool", lambda d: ~d["b"]),
    ("~i32", lambda d: ~d["i32"]),
    ("-i64", lambda d: -d["i"]),
    ("abs i8", lambda d: d["i8"].abs()),
    ("logical_not bool", lambda d: d["b"].logical_not()),
    ("logical_not i64", lambda d: d["i"].logical_not()),
    ("logical_not f32", lambda d: d["f"].logical_not()),
    ("isneginf f32", lambda d: torch.isneginf(d["f"])),
    ("isposinf bf16", lambda d: torch.isposinf(d["h"])),
    ("isnan f16", lambda d: torch.isnan(d["f16"])),
    ("isinf i64", lambda d: torch.isinf(d["i"])),
    ("signbit f32", lambda d: torch.signbit(d["f"])),
    ("bool.float()", lambda d: d["b"].float()),
    ("i64.float()", lambda d: d["i"].float()),
    ("f32.long()", lambda d: d["f"].nan_to_num(0.0, 1e3, -1e3).long()),
    ("f32.int() of bf16", lambda d: d["h"].nan_to_num(0.0, 1e3, -1e3).int()),
    ("i64.to(u8)", lambda d: d["i"].to(torch.uint8)),
    ("i32.bool()", lambda d: d["i32"].bool()),
    ("f32.bool()", lambda d: d["f"].bool()),
    ("u8.to(bf16)", lambda d: d["u8"].to(torch.bfloat16)),
    ("bool.to(i64)", lambda d: d["b"].long()),
    ("f32 + f32.T", lambda d: d["f"] + d["sq"].t()),
    ("f32.T * bool", lambda d: d["sq"].t() * d["b"]),
    ("f32 + row", lambda d: d["f"] + d["row"]),
    ("f32 + col", lambda d: d["f"] + d["col"]),
    ("i64 + f32.T", lambda d: d["i"] + d["sq"].t()),
    ("where(row mask, f32, 0)", lambda d: torch.where(d["rowb"], d["f"], 0.0)),
    ("where(mask.T, f32, f32)", lambda d: torch.where(d["sqb"].t(), d["f"], d["sq"])),
    ("where(mask, row, f32.T)", lambda d: torch.where(d["b"], d["row"], d["sq"].t())),
    ("addcmul col", lambda d: torch.addcmul(d["f"], d["col"], d["sq"].t(), value=0.5)),
    ("lerp f32.T", lambda d: torch.lerp(d["f"], d["sq"].t(), 0.3)),
]


def mixed_inputs():
    g = torch.Generator().manual_seed(16)
    n = 37
    f = torch.randn(n, n, generator=g) * 4
    f.view(-1)[:5] = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0, -0.0])
    return {
        "f": f, "h": (torch.randn(n, n, generator=g) * 4).bfloat16(), "f16": (torch.randn(n, n, generator=g)).half(),
        "b": torch.rand(n, n, generator=g) < 0.5, "b2": torch.rand(n, n, generator=g) < 0.5,
        "i": torch.randint(-1000, 1000, (n, n), generator=g), "i32": torch.randint(-50, 50, (n, n), generator=g,
                                                                                   dtype=torch.int32),
        "i8": torch.randint(-128, 128, (n, n), generator=g, dtype=torch.int8),
        "u8": torch.randint(0, 256, (n, n), generator=g, dtype=torch.uint8),
        "sq": torch.randn(n, n, generator=g), "sqb": torch.rand(n, n, generator=g) < 0.5,
        "row": torch.randn(n, 1, generator=g), "col": torch.randn(n, generator=g),
        "rowb": torch.rand(n, 1, generator=g) < 0.5,
    }


@pytest.mark.parametrize("name,fn", MIXED, ids=[m[0] for m in MIXED])
def test_mixed_dtypes_and_layouts(name, fn):
    d = mixed_inputs()
    want = fn(d)
    got = fn({k: v.to("tpu") for k, v in d.items()})
    check(want, got)


# add, sub, mul and div of two contiguous tensors of one floating dtype and
# shape skip the TensorIterator (elementwise.cpp's lean path); these cases
# sit on both sides of its conditions, each against the CPU.
LEAN_OPS = [torch.add, torch.sub, torch.mul, torch.div, lambda a, b: torch.add(a, b, alpha=2.5),
            lambda a, b: torch.sub(a, b, alpha=-3)]
LEAN_INPLACE = [lambda a, b: a.add_(b), lambda a, b: a.sub_(b, alpha=2), lambda a, b: a.mul_(b),
                lambda a, b: a.div_(b)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("shape", [(7, 37), (), (1,), (3, 1, 1, 5), (2,) * 12, (1,) * 13])
def test_lean_binary_same_shape(dtype, shape):
    if torch.Size(shape).numel() < 5:  # too few elements for inputs()' special values
        a, b = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)
    else:
        a, b = inputs(dtype, shape, seed=11), inputs(dtype, shape, seed=12)
    at, bt = a.to("tpu"), b.to("tpu")
    for fn in LEAN_OPS:
        expected, got = fn(a, b), fn(at, bt)
        check(expected, got)
        assert got.stride() == expected.stride()
    for fn in LEAN_INPLACE:
        x, xt = a.clone(), at.clone()
        assert fn(xt, bt) is xt
        check(fn(x, b), xt)
        x, xt = a.clone(), at.clone()
        check(fn(x, x), fn(xt, xt))  # the operand is self: a full overlap


def test_lean_binary_edges():
    # contiguous with odd strides on size-1 dims: the result's strides as the CPU's
    a = torch.randn(6).as_strided((2, 1, 3), (3, 100, 1))
    at = torch.randn(6, device="tpu").copy_(torch.randn(6)).as_strided((2, 1, 3), (3, 100, 1))
    at.copy_(a)
    for fn in LEAN_OPS:
        assert fn(at, at).stride() == fn(a, a).stride()
        check(fn(a, a), fn(at, at))
    # a one-element bf16 factor, read in the compute type as the CPU reads it
    x, y = torch.tensor([1.1], dtype=torch.bfloat16), torch.tensor([3.3], dtype=torch.bfloat16)
    for fn in (torch.mul, torch.div):
        check(fn(x, y), fn(x.to("tpu"), y.to("tpu")))
    # an in-place operand that partly overlaps self: the CPU's error
    base, base_t = torch.arange(10.0), torch.arange(10.0, device="tpu")
    with pytest.raises(RuntimeError, match="single memory location"):
        base[:8].add_(base[1:9])
    with pytest.raises(RuntimeError, match="single memory location"):
        base_t[:8].add_(base_t[1:9])
    # views of one storage that do not overlap take the lean path
    lo, hi = base[:5], base[5:]
    lo_t, hi_t = base_t[:5], base_t[5:]
    lo.mul_(hi)
    lo_t.mul_(hi_t)
    check(base, base_t)
    # alphas the meta refuses, and one that overflows the dtype
    t = torch.ones(3, device="tpu")
    with pytest.raises(RuntimeError, match="Boolean alpha only supported"):
        torch.add(t, t, alpha=True)
    with pytest.raises(RuntimeError):
        torch.add(t, t, alpha=1j)
    with pytest.raises(RuntimeError, match="overflow"):
        torch.add(t.half(), t.half(), alpha=1e6)
    with pytest.raises(RuntimeError, match="overflow"):
        t.half().sub_(t.half(), alpha=-1e6)
    # integers and mixed dtypes stay on the structured path, with its promotion
    i = torch.tensor([7, -7, 3])
    for fn in (torch.div, torch.add, torch.mul):
        check(fn(i, i), fn(i.to("tpu"), i.to("tpu")))
        check(fn(i.float(), i.double()), fn(i.float().to("tpu"), i.double().to("tpu")))

