"""The first native kernels (add, sub, mul, div, sum, mean, mm, addmm),
compared with PyTorch's CPU backend in both modes, with fallbacks turned
into errors so that every call here is proven native."""
import pytest
import torch

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]


def rand(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    lo = 0 if dtype == torch.uint8 else -50
    return torch.randint(lo, 50, shape, generator=g).to(dtype)


def assert_same(tpu_result, cpu_result, exact=False):
    got = tpu_result.cpu()
    assert got.dtype == cpu_result.dtype, (got.dtype, cpu_result.dtype)
    assert got.shape == cpu_result.shape
    if exact or not cpu_result.dtype.is_floating_point:
        assert torch.equal(got, cpu_result)
    else:
        tol = {torch.float16: 1e-3, torch.bfloat16: 1e-2}.get(cpu_result.dtype, 1e-5)
        torch.testing.assert_close(got, cpu_result, rtol=tol, atol=tol)


BINARY = [torch.add, torch.sub, torch.mul, torch.div]


@pytest.mark.parametrize("op", BINARY, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_binary_same_dtype(op, dtype, mode, native_only):
    a, b = rand((5, 7), dtype, 1), rand((5, 7), dtype, 2)
    if op is torch.div:
        b = torch.where(b == 0, torch.ones_like(b), b)
    assert_same(op(a.to("tpu"), b.to("tpu")), op(a, b))


@pytest.mark.parametrize("op", BINARY, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    "sa,sb", [((4, 1, 3), (1, 5, 3)), ((3,), (2, 3)), ((), (4, 4)), ((2, 3, 4), (4,)), ((0, 3), (1, 3))]
)
def test_binary_broadcasting(op, sa, sb, mode, native_only):
    a, b = rand(sa, torch.float32, 3), rand(sb, torch.float32, 4)
    assert_same(op(a.to("tpu"), b.to("tpu")), op(a, b))


@pytest.mark.parametrize(
    "da,db", [(torch.int32, torch.float32), (torch.bfloat16, torch.float32), (torch.int64, torch.float16),
              (torch.uint8, torch.int8), (torch.bool, torch.int32), (torch.float16, torch.bfloat16)]
)
@pytest.mark.parametrize("op", BINARY, ids=lambda f: f.__name__)
def test_binary_type_promotion(op, da, db, native_only):
    a, b = rand((4, 6), da, 5), rand((4, 6), db, 6)
    if op is torch.sub and torch.bool in (da, db):
        with pytest.raises(RuntimeError, match="Subtraction"):
            op(a.to("tpu"), b.to("tpu"))
        return
    if op is torch.div:
        b = torch.where(b == 0, torch.ones_like(b), b)
    assert_same(op(a.to("tpu"), b.to("tpu")), op(a, b))


@pytest.mark.parametrize("scalar", [2, -3, 2.5, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bfloat16, torch.int64])
def test_python_scalars(scalar, dtype, native_only):
    a = rand((3, 4), dtype, 7)
    t = a.to("tpu")
    assert_same(t + scalar, a + scalar)
    assert_same(t * scalar, a * scalar)
    if isinstance(scalar, bool):
        with pytest.raises(RuntimeError, match="Subtraction"):
            t - scalar
    else:
        assert_same(t - scalar, a - scalar)
    assert_same(t / scalar, a / scalar)
    assert_same(torch.add(t, t, alpha=2), torch.add(a, a, alpha=2))


def test_alpha_and_reverse_scalars(native_only):
    a, b = rand((3, 3), torch.float32, 8), rand((3, 3), torch.float32, 9)
    assert_same(torch.sub(a.to("tpu"), b.to("tpu"), alpha=0.5), torch.sub(a, b, alpha=0.5))
    assert_same(torch.add(a.to("tpu"), 3, alpha=2), torch.add(a, 3, alpha=2))
    with pytest.raises(RuntimeError, match="alpha"):
        torch.add(torch.ones(2, dtype=torch.int32, device="tpu"), torch.ones(2, dtype=torch.int32, device="tpu"),
                  alpha=0.5)


@pytest.mark.parametrize("rounding", [None, "trunc", "floor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16])
def test_div_rounding_modes(rounding, dtype, mode, native_only):
    a = rand((6, 6), dtype, 10) * 3
    b = rand((6, 6), dtype, 11)
    b = torch.where(b == 0, torch.full_like(b, 7), b)
    # bf16 rounded division follows the CPU backend's kernels, which round
    # each step to bf16 (see docs/architecture.md): compare with them.
    ref = torch.div(a, b, rounding_mode=rounding)
    assert_same(torch.div(a.to("tpu"), b.to("tpu"), rounding_mode=rounding), ref)


def test_inplace_and_out_variants(mode, native_only):
    a, b = rand((4, 5), torch.float32, 12), rand((5,), torch.float32, 13)
    for name in ("add_", "sub_", "mul_", "div_"):
        x, xc = a.to("tpu"), a.clone()
        getattr(x, name)(b.to("tpu"))
        getattr(xc, name)(b)
        assert_same(x, xc)
    for op in BINARY:
        out = torch.empty(4, 5, device="tpu")
        op(a.to("tpu"), b.to("tpu"), out=out)
        assert_same(out, op(a, b))
    out64 = torch.empty(0, dtype=torch.float64, device="tpu")
    torch.add(a.to("tpu"), b.to("tpu"), out=out64)
    assert_same(out64, torch.add(a, b).double())
    i = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    with pytest.raises(RuntimeError, match="can't be cast"):
        i.to("tpu").add_(0.5)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch.ones(3, device="tpu").add_(torch.ones(2, 3, device="tpu"))


def test_inplace_on_views(native_only):
    a = torch.arange(12.0).reshape(3, 4)
    t = a.to("tpu")
    t[:, 1::2].mul_(10)
    t.t()[0].add_(100)
    a[:, 1::2].mul_(10)
    a.t()[0].add_(100)
    assert_same(t, a)


@pytest.mark.parametrize("rounding", ["trunc", "floor"])
def test_rounded_bool_division_is_not_implemented_like_cpu(rounding):
    a = torch.tensor([True, False])
    with pytest.raises(NotImplementedError):
        torch.div(a, a, rounding_mode=rounding)
    with pytest.raises(NotImplementedError, match="Bool"):
        torch.div(a.to("tpu"), a.to("tpu"), rounding_mode=rounding)


def test_bool_arithmetic(native_only):
    a, b = rand((8,), torch.bool, 14), rand((8,), torch.bool, 15)
    assert_same(a.to("tpu") + b.to("tpu"), a + b)
    assert_same(a.to("tpu") * b.to("tpu"), a * b)
    with pytest.raises(RuntimeError, match="Subtraction"):
        a.to("tpu") - b.to("tpu")


@pytest.mark.parametrize("dims", [None, 0, 1, -1, (0, 2), (1, 2), ()])
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int32, torch.bool])
def test_sum(dims, keepdim, dtype, mode, native_only):
    x = rand((3, 4, 5), dtype, 16)
    t = x.to("tpu")
    if dims is None:
        assert_same(t.sum(), x.sum())
    else:
        assert_same(t.sum(dims, keepdim=keepdim), x.sum(dims, keepdim=keepdim))


@pytest.mark.parametrize("dims", [None, 0, (1, 2), -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.float16])
def test_mean(dims, dtype, mode, native_only):
    x = rand((4, 6, 5), dtype, 17)
    t = x.to("tpu")
    if dims is None:
        assert_same(t.mean(), x.mean())
    else:
        assert_same(t.mean(dims, keepdim=True), x.mean(dims, keepdim=True))
        assert_same(t.mean(dims), x.mean(dims))


def test_reduction_dtypes_outs_and_errors(native_only):
    x = rand((5, 6), torch.int32, 18)
    t = x.to("tpu")
    assert_same(t.sum(1, dtype=torch.float64), x.sum(1, dtype=torch.float64))
    assert_same(t.mean(0, dtype=torch.float32), x.mean(0, dtype=torch.float32))
    out = torch.empty(0, dtype=torch.int64, device="tpu")
    torch.sum(t, 0, out=out)
    assert_same(out, x.sum(0))
    big = rand((300, 400), torch.float32, 19)
    assert_same(big.to("tpu").sum(0), big.sum(0))
    assert_same(big.to("tpu").t().mean(1), big.t().mean(1))
    assert_same(torch.empty(0, 3, device="tpu").sum(0), torch.empty(0, 3).sum(0))
    with pytest.raises(RuntimeError, match="mean"):
        t.mean()
    with pytest.raises(IndexError):
        t.sum(5)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 13, 5), (64, 64, 64), (130, 257, 67), (3, 0, 4)])
def test_mm_f32(m, k, n, mode, native_only):
    a, b = rand((m, k), torch.float32, 20), rand((k, n), torch.float32, 21)
    assert_same(a.to("tpu") @ b.to("tpu"), a @ b)
    assert_same(torch.mm(a.t().contiguous().to("tpu").t(), b.to("tpu")), a @ b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_mm_other_dtypes(dtype, native_only):
    a, b = rand((33, 40), dtype, 22), rand((40, 17), dtype, 23)
    ref = (a @ b) if dtype == torch.float64 else (a.float() @ b.float()).to(dtype)
    got = (a.to("tpu") @ b.to("tpu")).cpu()
    tol = 1e-12 if dtype == torch.float64 else 2e-2
    torch.testing.assert_close(got, ref, rtol=tol, atol=tol)


def test_addmm_forms(mode, native_only):
    a, b = rand((6, 8), torch.float32, 24), rand((8, 5), torch.float32, 25)
    c = rand((5,), torch.float32, 26)
    assert_same(torch.addmm(c.to("tpu"), a.to("tpu"), b.to("tpu")), torch.addmm(c, a, b))
    assert_same(torch.addmm(c.to("tpu"), a.to("tpu"), b.to("tpu"), beta=0.5, alpha=2),
                torch.addmm(c, a, b, beta=0.5, alpha=2))
    nan_bias = torch.full((6, 5), float("nan"))
    assert_same(torch.addmm(nan_bias.to("tpu"), a.to("tpu"), b.to("tpu"), beta=0), torch.addmm(nan_bias, a, b, beta=0))
    out = torch.empty(6, 5, device="tpu")
    torch.addmm(c.to("tpu"), a.to("tpu"), b.to("tpu"), out=out)
    assert_same(out, torch.addmm(c, a, b))
    s = rand((6, 5), torch.float32, 27)
    st = s.to("tpu")
    st.addmm_(a.to("tpu"), b.to("tpu"))
    assert_same(st, s.addmm(a, b))
    lin = torch.nn.Linear(8, 5)
    assert_same(lin.to("tpu")(a.to("tpu")), lin.to("cpu")(a))


def test_matmul_precision_uses_bf16_passes(native_only):
    a, b = rand((64, 64), torch.float32, 28), rand((64, 64), torch.float32, 29)
    exact = (a.double() @ b.double()).float()
    previous = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        highest = (a.to("tpu") @ b.to("tpu")).cpu()
        torch.set_float32_matmul_precision("high")
        high = (a.to("tpu") @ b.to("tpu")).cpu()
        torch.set_float32_matmul_precision("medium")
        medium = (a.to("tpu") @ b.to("tpu")).cpu()
    finally:
        torch.set_float32_matmul_precision(previous)
    one_pass = (a.bfloat16().float() @ b.bfloat16().float())
    err = lambda x: (x - exact).abs().max().item()  # noqa: E731
    assert err(highest) < 1e-4
    assert err(high) < 1e-2
    assert err(medium) > err(high)
    torch.testing.assert_close(medium, one_pass, rtol=1e-4, atol=1e-4)


def test_addmm_scalars_become_floats_as_on_cpu(mode, native_only):
    # alpha and beta are converted to float for a float32 product: one that
    # rounds to 0 leaves the NaN it multiplies unread, one that overflows
    # is an error, as on the CPU.
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    nan_bias = torch.full((4,), float("nan"))
    assert_same(torch.addmm(nan_bias.to("tpu"), a.to("tpu"), b.to("tpu"), beta=1e-50),
                torch.addmm(nan_bias, a, b, beta=1e-50))
    inf_a = a.clone()
    inf_a[0, 0] = float("inf")
    ones = torch.ones(4)
    assert_same(torch.addmm(ones.to("tpu"), inf_a.to("tpu"), b.to("tpu"), alpha=1e-50),
                torch.addmm(ones, inf_a, b, alpha=1e-50))
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.addmm(ones, a, b, alpha=1e39)  # the CPU's own refusal, for reference
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.addmm(ones.to("tpu"), a.to("tpu"), b.to("tpu"), alpha=1e39).cpu()


@pytest.mark.parametrize("precision", ["highest", "high", "medium"])
def test_matmul_precision_keeps_infinities(precision, native_only):
    # The three-pass split of "high" must not multiply an infinity by a
    # zero low part (NaN), nor round a finite value past bf16's range.
    a = torch.tensor([[float("inf"), 1.0], [-float("inf"), 2.0], [3.0e38, 0.0], [1.0, 2.0]])
    b = torch.tensor([[2.0, 0.5], [3.0, -1.0]])
    previous = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision(precision)
        got = (a.to("tpu") @ b.to("tpu")).cpu()
    finally:
        torch.set_float32_matmul_precision(previous)
    want = (a.double() @ b.double()).float()
    torch.testing.assert_close(got, want, rtol=1e-2, atol=0)


def test_mm_errors():
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.ones(2, 3, device="tpu") @ torch.ones(4, 2, device="tpu")
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.mm(torch.ones(2, 2, device="tpu"), torch.ones(2, 2, dtype=torch.float64, device="tpu"))
    with pytest.raises(RuntimeError, match="same device"):
        torch.mm(torch.ones(2, 2, device="tpu:0"), torch.ones(2, 2, device="tpu:1"))


def test_integer_mm_goes_to_fallback():
    a = torch.arange(6).reshape(2, 3)
    torch.tpu.reset_fallback_stats()
    assert_same(a.to("tpu") @ a.t().to("tpu"), a @ a.t())
    assert torch.tpu.fallback_stats().get("aten::mm", 0) == 1


def test_ops_on_more_dims_than_a_record_holds(mode):
    # Element-wise ops split unmergeable ranks into slices; reductions over
    # more than TPU_MAX_DIMS dims take the (counted) CPU fallback.
    x = torch.randn([2] * 14, generator=torch.Generator().manual_seed(2))
    rev = list(reversed(range(14)))
    t = x.to("tpu")
    assert torch.equal((t.permute(rev) + t).cpu(), x.permute(rev) + x)
    assert torch.equal((t.permute(rev) * 3).cpu(), x.permute(rev) * 3)
    out = torch.empty([2] * 14, device="tpu").permute(rev)
    torch.sub(t, 1, out=out)
    assert torch.equal(out.cpu(), x - 1)
    torch.tpu.reset_fallback_stats()
    assert torch.allclose(t.permute(rev).sum().cpu(), x.sum())
    assert torch.allclose(t.sum((1, 3, 5)).cpu(), x.sum((1, 3, 5)))
    assert torch.allclose(t.mean(0, keepdim=True).cpu(), x.mean(0, keepdim=True))
    assert torch.tpu.fallback_stats().get("aten::sum.dim_IntList", 0) >= 1
    g = t.clone().requires_grad_()
    (g.permute(rev) * 2).sum().backward()
    assert torch.equal(g.grad.cpu(), torch.full([2] * 14, 2.0))


@pytest.mark.parametrize("dtype,alpha", [(torch.int8, 1000), (torch.uint8, 300), (torch.int32, 2**40),
                                         (torch.float16, 1e5), (torch.float32, 1e39)])
def test_alpha_overflow_raises_like_cpu(dtype, alpha):
    for device in ("cpu", "tpu"):
        a = torch.ones(2, dtype=dtype, device=device)
        with pytest.raises(RuntimeError, match="cannot be converted to type .* without overflow"):
            torch.add(a, a, alpha=alpha)
        with pytest.raises(RuntimeError, match="cannot be converted to type .* without overflow"):
            torch.sub(a, 1, alpha=alpha)


def test_reduction_out_aliasing_its_input(mode, native_only):
    # The result is that of the input before the call (the CPU backend
    # itself gives aliasing-dependent values here, so compare to a fresh sum).
    x = torch.arange(6.0).view(2, 3)
    t = x.to("tpu")
    torch.sum(t, 0, out=t[0])
    assert torch.equal(t.cpu(), torch.stack([x.sum(0), x[1]]))
    t = x.to("tpu")
    torch.mean(t, 1, out=t[:, 0])
    assert torch.equal(t.cpu()[:, 0], x.mean(1))
    v = torch.tensor([0.0, 1.0, 2.0]).to("tpu")
    torch.sum(v, 0, out=v)  # out is resized to 0-dim: the sum is of the old v
    assert v.item() == 3.0
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        torch.sum(torch.ones(2, 3, device="tpu"), 0, out=torch.zeros(1, device="tpu").expand(3))


def test_cpu_scalars_written_into_a_tpu_out(native_only):
    # One host scalar operand is fine; two are refused by PyTorch's own
    # TensorIterator, as for CUDA (the device's ops run on it).
    out = torch.empty((), device="tpu")
    torch.add(torch.ones((), device="tpu"), torch.tensor(2), out=out)
    assert out.item() == 3.0
    with pytest.raises(RuntimeError, match="too many CPU scalars"):
        torch.add(torch.tensor(1.0), torch.tensor(2), out=out)
    with pytest.raises(RuntimeError, match="same device"):
        torch.add(torch.ones(2), torch.tensor(2.0), out=torch.empty(2, device="tpu"))


def test_split_reductions_do_not_depend_on_the_thread_count():
    """A full sum (and a sum into a few outputs) of long runs is split into
    fixed chunks across threads and combined in a fixed order: the bits are
    the same for any TORCH_TPU_NUM_THREADS, and match the CPU closely."""
    from conftest import run_python

    code = """
        import torch
        x = torch.randn(600_000, generator=torch.Generator().manual_seed(3)).to('tpu')
        print(repr(x.sum().item()), repr(x.mean().item()), x.view(3, -1).sum(1).cpu().tolist())
    """
    outs = []
    for threads in ("1", "2", "3"):
        r = run_python(code, {"TORCH_TPU_NUM_THREADS": threads})
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(r.stdout)
    assert outs[0] == outs[1] == outs[2]
    x = torch.randn(600_000, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(x.to("tpu").sum().cpu(), x.double().sum().float(), rtol=1e-6, atol=1e-3)


def test_every_isa_level_gives_the_same_bits():
    """TORCH_TPU_ISA caps the fast kernels' instruction set (chosen by cpuid
    at run time); every level the machine has gives the same bytes, and a
    malformed value is a clear error."""
    from conftest import run_python

    code = """
        import hashlib, torch
        g = torch.Generator().manual_seed(5)
        a, b = torch.randn(300, 200, generator=g), torch.randn(200, 70, generator=g)
        outs = []
        for dt in (torch.float32, torch.bfloat16, torch.float16):
            x, y = a.to(dt).to('tpu'), b.to(dt).to('tpu')
            outs += [x @ y, (x * 3 + x.t().contiguous().t()).float(), x.sum(0), x.float().sum()[None],
                     torch.div(x, y[:, :1].t().expand(300, 200) + 7, rounding_mode='floor')]
        torch.manual_seed(0)
        outs.append(torch.randn(1000, device='tpu'))
        h = hashlib.sha256()
        for t in outs:
            h.update(t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        print(h.hexdigest())
    """
    digests = {}
    for isa in ("portable", "avx2", "avx512"):
        r = run_python(code, {"TORCH_TPU_ISA": isa})
        assert r.returncode == 0, r.stderr[-2000:]
        digests[isa] = r.stdout
    assert len(set(digests.values())) == 1, digests
    r = run_python("import torch; torch.ones(1, device='tpu')", {"TORCH_TPU_ISA": "sse9"})
    assert r.returncode != 0 and "TORCH_TPU_ISA='sse9' is not valid" in r.stderr


def test_foreach_mul_with_host_scalars_matches_cpu():
    """_foreach_mul_ (Scalar and ScalarList: PyTorch's in-place product
    with the host scalar as the first factor) against CPU's, dtype rules
    and errors included."""
    cpu = [torch.randn(5, 3), torch.randn(7), torch.randn(()).to(torch.bfloat16), torch.randn(4).double()]
    tpu = [t.to("tpu") for t in cpu]
    for args in [(0.5,), ([0.5, 2.0, -3.0, 2],)]:
        torch._foreach_mul_(cpu, *args)
        torch._foreach_mul_(tpu, *args)
        for c, t in zip(cpu, tpu):
            assert t.dtype == c.dtype and torch.equal(t.cpu(), c)
    ints_cpu, ints_tpu = [torch.arange(4), torch.arange(3)], [torch.arange(4, device="tpu"), torch.arange(3, device="tpu")]
    torch._foreach_mul_(ints_cpu, [3, -2])
    torch._foreach_mul_(ints_tpu, [3, -2])
    assert all(torch.equal(t.cpu(), c) for c, t in zip(ints_cpu, ints_tpu))
    with pytest.raises(RuntimeError, match="same number of elements as scalar list"):
        torch._foreach_mul_(tpu, [1.0])
    with pytest.raises(RuntimeError) as cpu_err:
        torch._foreach_mul_([torch.arange(3)], 0.5)  # an integer tensor cannot take a float product in place
    with pytest.raises(RuntimeError) as tpu_err:
        torch._foreach_mul_([torch.arange(3, device="tpu")], 0.5)
    assert type(cpu_err.value) is type(tpu_err.value)
