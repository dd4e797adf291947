"""scaled_dot_product_attention on the native ATTENTION kernel, forward and
backward, against PyTorch's CPU backend given the same inputs.

Tolerances: float32 and float64 are compared with PyTorch's CPU result
in the same dtype (float32: rtol = atol = 2e-5; the two sum in different
orders). For bfloat16 and float16 the CPU's own half-precision kernels
round intermediate probabilities, so the oracle is the CPU computing in
float64 from the same rounded inputs, and the tolerance is a few units of
the output dtype (bfloat16: rtol 2e-2, atol 1e-2; float16: rtol = atol =
2e-3); one test also compares with the CPU's bfloat16 result directly,
at twice that.

The CPU fallback is an error throughout, so everything here runs on
native kernels; test_reaches_native_kernel shows by the profiler that
SDPA's forward and backward take the ATTENTION kernel."""
import math
import os

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TOL = {torch.float32: (2e-5, 2e-5), torch.float64: (1e-10, 1e-10),
       torch.bfloat16: (2e-2, 1e-2), torch.float16: (2e-3, 2e-3)}
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
FUSED = "aten::_scaled_dot_product_fused_attention_overrideable"


# Every test here runs with the CPU fallback turned into an error (conftest).
pytestmark = pytest.mark.usefixtures("native_only")


def randn(*shape, dtype=torch.float32, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype)


def run_sdpa(device, dtype, q, k, v, grad, mask=None, grads=True, **kw):
    """SDPA on `device` in `dtype` from copies of the inputs: the output
    and the gradients of q, k and v for the incoming gradient `grad`."""
    leaves = [t.to(device, dtype, copy=True).requires_grad_(grads) for t in (q, k, v)]
    m = None
    if mask is not None:
        m = mask.to(device, copy=True) if mask.dtype == torch.bool else mask.to(device, copy=True)
    out = F.scaled_dot_product_attention(*leaves, attn_mask=m, **kw)
    if not grads:
        return [out.detach()]
    out.backward(grad.to(device, dtype))
    return [out.detach()] + [t.grad for t in leaves]


def compare(q, k, v, dtype, mask=None, oracle_dtype=None, tol_scale=1.0, **kw):
    """tpu in `dtype` against the CPU in `oracle_dtype` (dtype itself for
    f32/f64, f64 for the halves) from the same rounded inputs."""
    q, k, v = (t.to(dtype) for t in (q, k, v))
    if mask is not None and mask.is_floating_point() and mask.dtype != torch.float32:
        mask = mask.to(dtype)
    out_shape = q.shape[:-1] + (v.shape[-1],)
    grad = randn(*out_shape, dtype=dtype, seed=99)
    if oracle_dtype is None:
        oracle_dtype = dtype if dtype in (torch.float32, torch.float64) else torch.float64
    ref_mask = mask
    if mask is not None and mask.is_floating_point() and oracle_dtype == torch.float64:
        ref_mask = mask.double()
    ref = run_sdpa("cpu", oracle_dtype, q, k, v, grad, ref_mask, **kw)
    got = run_sdpa("tpu", dtype, q, k, v, grad, mask, **kw)
    rtol, atol = TOL[dtype]
    for name, r, g in zip(("out", "dq", "dk", "dv"), ref, got):
        assert g.device.type == "tpu" and g.dtype == dtype and g.shape == r.shape, name
        torch.testing.assert_close(g.cpu(), r.to(dtype), rtol=rtol * tol_scale, atol=atol * tol_scale,
                                   equal_nan=True, msg=lambda m, n=name: f"{n}: {m}")
    return got


def qkv(b, h, hk, l, s, e, ev, seed=0, strided=False):
    """q [B, H, L, E], k [B, Hk, S, E], v [B, Hk, S, Ev]; with `strided`,
    laid out [B, L, H, E] and transposed, as models produce them."""
    if strided:
        q = randn(b, l, h, e, seed=seed).transpose(1, 2)
        k = randn(b, s, hk, e, seed=seed + 1).transpose(1, 2)
        v = randn(b, s, hk, ev, seed=seed + 2).transpose(1, 2)
        return q, k, v
    return (randn(b, h, l, e, seed=seed), randn(b, hk, s, e, seed=seed + 1),
            randn(b, hk, s, ev, seed=seed + 2))


SHAPES = [(2, 3, 37, 45, 16, 16), (1, 2, 64, 64, 64, 64), (1, 2, 17, 40, 80, 80), (1, 1, 1, 1, 8, 8),
          (1, 2, 70, 33, 24, 24)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_cpu(dtype, causal, shape):
    b, h, l, s, e, ev = shape
    q, k, v = qkv(b, h, h, l, s, e, ev, strided=shape[2] == 37)
    compare(q, k, v, dtype, is_causal=causal)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_value_head_size_differs(dtype):
    """E != Ev (the CPU takes it on its math path)."""
    q, k, v = qkv(2, 2, 2, 19, 23, 16, 40)
    compare(q, k, v, dtype)
    compare(q, k, v, dtype, is_causal=True)


def test_bfloat16_against_cpu_bfloat16():
    """Directly against the CPU's own bfloat16 kernel, at twice the
    bfloat16 tolerance."""
    q, k, v = qkv(2, 4, 4, 50, 50, 64, 64)
    compare(q, k, v, torch.bfloat16, oracle_dtype=torch.bfloat16, tol_scale=2, is_causal=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kind", ["bool_LS", "bool_B11S", "add_BHLS", "add_LS_f32", "add_1H1S"])
def test_masks(dtype, kind):
    b, h, l, s, e = 2, 3, 21, 34, 16
    q, k, v = qkv(b, h, h, l, s, e, e)
    g = torch.Generator().manual_seed(5)
    if kind == "bool_LS":
        mask = torch.rand(l, s, generator=g) > 0.3
    elif kind == "bool_B11S":
        mask = torch.rand(b, 1, 1, s, generator=g) > 0.3
    elif kind == "add_BHLS":
        mask = torch.randn(b, h, l, s, generator=g).to(dtype)
    elif kind == "add_LS_f32":
        mask = torch.randn(l, s, generator=g)  # a float32 mask with any query dtype, as CPU allows
    else:
        mask = torch.randn(1, h, 1, s, generator=g).to(dtype)
    compare(q, k, v, dtype, mask=mask)


def test_mask_with_causal():
    """attn_mask together with is_causal: the CPU backend's fused kernel
    applies both (its math path refuses the pair); so does the tpu."""
    q, k, v = qkv(1, 2, 2, 30, 30, 16, 16)
    mask = torch.rand(30, 30, generator=torch.Generator().manual_seed(1)) > 0.4
    compare(q, k, v, torch.float32, mask=mask, is_causal=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gqa(dtype):
    q, k, v = qkv(2, 8, 2, 33, 41, 16, 16)
    compare(q, k, v, dtype, enable_gqa=True)
    compare(q, k, v, dtype, enable_gqa=True, is_causal=True)


@pytest.mark.parametrize("scale", [0.3, -0.5, 2.0])
def test_scale(scale):
    q, k, v = qkv(1, 2, 2, 20, 25, 16, 16)
    compare(q, k, v, torch.float32, scale=scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_three_d_inputs(dtype):
    q, k, v = (randn(3, 20, 16, seed=1), randn(3, 24, 16, seed=2), randn(3, 24, 16, seed=3))
    compare(q, k, v, dtype)
    compare(q, k, v, dtype, is_causal=True)
    compare(q, k, v, dtype, mask=torch.rand(20, 24, generator=torch.Generator().manual_seed(0)) > 0.5)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_fully_masked_rows(dtype, kind):
    """Rows whose keys are all masked give 0 and no gradient, as the CPU."""
    l, s = 9, 12
    q, k, v = qkv(2, 2, 2, l, s, 8, 8)
    keep = torch.rand(l, s, generator=torch.Generator().manual_seed(3)) > 0.3
    keep[[1, 4, 8]] = False
    mask = keep if kind == "bool" else torch.zeros(l, s).masked_fill(~keep, -math.inf).to(dtype)
    out, dq, dk, dv = compare(q, k, v, dtype, mask=mask)
    dead = [1, 4, 8]
    assert torch.equal(out.cpu()[:, :, dead], torch.zeros(2, 2, 3, 8, dtype=dtype))
    assert torch.equal(dq.cpu()[:, :, dead], torch.zeros(2, 2, 3, 8, dtype=dtype))
    for t in (out, dq, dk, dv):
        assert torch.isfinite(t.cpu()).all()


# Finite "minus infinity" masks, as padding masks built from
# torch.finfo(dtype).min give. A row they hide is not dead: its scores
# round to (nearly) the mask value, and SDPA is the softmax of those,
# uniform over the keys where q . k rounds away. The oracle is the CPU's
# math backend (the CPU's default takes its flash kernel when E == Ev,
# whose backward does not normalise P for such rows: its logsumexp
# m + log l rounds back to m). For bfloat16 it computes in float32, the
# kernel's compute type, from the same rounded inputs: a -1e10 mask
# leaves no trace of q . k in a float32 score, and float64 would keep it.
# Under TORCH_TPU_REFERENCE=1 the kernel computes every dtype in float64,
# and so does the oracle.
HUGE_FILLS = ["finfo.min", -1e30, -1e10]
REFERENCE = os.environ.get("TORCH_TPU_REFERENCE") == "1"


def huge_fill(fill, dtype):
    return torch.finfo(dtype).min if fill == "finfo.min" else fill


def compare_math(q, k, v, grad, mask, dtype, tol_scale=1.0):
    """tpu in `dtype` against the CPU's math backend in the kernel's
    compute type (float64 for float64 or the reference path, else
    float32) from the same rounded inputs, mask included."""
    q, k, v, grad = (t.to(dtype) for t in (q, k, v, grad))
    oracle = torch.float64 if dtype == torch.float64 or REFERENCE else torch.float32
    with sdpa_kernel(SDPBackend.MATH):
        ref = run_sdpa("cpu", oracle, q, k, v, grad, mask.to(oracle))
    got = run_sdpa("tpu", dtype, q, k, v, grad, mask)
    rtol, atol = TOL[dtype]
    for name, r, g in zip(("out", "dq", "dk", "dv"), ref, got):
        assert g.device.type == "tpu" and g.dtype == dtype and g.shape == r.shape, name
        torch.testing.assert_close(g.cpu(), r.to(dtype), rtol=rtol * tol_scale, atol=atol * tol_scale,
                                   msg=lambda m, n=name: f"{n}: {m}")
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("fill", HUGE_FILLS)
@pytest.mark.parametrize("e", [8, 4])
def test_huge_finite_mask_row_reproducer(dtype, fill, e):
    """A query row hidden by a finite mask value: the forward was right,
    but dq, dk and dv came out as if P summed to the number of keys
    (dv 3x too large here) whenever the CPU did not happen to make the
    same mistake."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 1, 2, e), torch.randn(1, 1, 3, e), torch.randn(1, 1, 3, 4)
    m = torch.zeros(2, 3, dtype=dtype)
    m[1] = huge_fill(fill, dtype)
    go = torch.randn(1, 1, 2, 4)
    out, dq, dk, dv = compare_math(q, k, v, go, m, dtype)
    if fill != -1e10 or not (dtype == torch.float64 or REFERENCE):
        # q . k rounds away next to the mask: a uniform row, whose value
        # gradient is a third of g's row 1 for every key.
        vr, gr = v.to(dtype).double(), go.to(dtype).double()
        tol = dict(rtol=TOL[dtype][0], atol=TOL[dtype][1])
        torch.testing.assert_close(out.cpu()[0, 0, 1].double(), vr[0, 0].mean(0), **tol)
        p0 = torch.softmax((q.to(dtype).double()[0, 0, 0] @ k.to(dtype).double()[0, 0].T) / math.sqrt(e), 0)
        want_dv = p0[:, None] * gr[0, 0, 0] + gr[0, 0, 1] / 3
        torch.testing.assert_close(dv.cpu()[0, 0].double(), want_dv, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("fill", HUGE_FILLS)
@pytest.mark.parametrize("shape", [(2, 3, 37, 45, 16, 16), (1, 2, 70, 33, 8, 4), (1, 2, 9, 12, 64, 64)])
def test_huge_finite_mask_rows(dtype, fill, shape):
    """Fully and partially masked rows with a finite huge mask, across
    several key and query blocks: rows fully hidden by the value, rows
    with some keys hidden by it, a few keys at -inf, the rest 0."""
    b, h, l, s, e, ev = shape
    q, k, v = qkv(b, h, h, l, s, e, ev)
    g = torch.Generator().manual_seed(8)
    r = torch.rand(b, 1, l, s, generator=g)
    mask = torch.zeros(b, 1, l, s, dtype=dtype)
    value = huge_fill(fill, dtype)
    mask[r < 0.3] = value
    mask[r > 0.95] = -math.inf
    mask[:, :, 1::4] = value  # every key of these rows
    mask[-1, :, 2, :3] = -math.inf  # a row of huge and -inf keys
    mask[-1, :, 2, 3:] = value
    grad = randn(b, h, l, ev, seed=99)
    compare_math(q, k, v, grad, mask, dtype)


@pytest.mark.parametrize("shape", [(0, 2, 5, 5, 8, 8), (2, 2, 0, 5, 8, 8), (2, 2, 5, 0, 8, 8)])
def test_zero_sizes(shape):
    b, h, l, s, e, ev = shape
    q, k, v = qkv(b, h, h, l, s, e, ev)
    compare(q, k, v, torch.float32)


def test_modes(mode):
    """The same bytes in strict and debug mode (the kernel is deterministic)."""
    q, k, v = qkv(1, 4, 4, 40, 40, 32, 32)
    got = [t.cpu() for t in run_sdpa("tpu", torch.float32, q, k, v, randn(1, 4, 40, 32, seed=7), is_causal=True)]
    again = [t.cpu() for t in run_sdpa("tpu", torch.float32, q, k, v, randn(1, 4, 40, 32, seed=7), is_causal=True)]
    for a, b in zip(got, again):
        assert torch.equal(a, b)


def profiled_names(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
        torch.tpu.synchronize()
    return {e.name for e in prof.events()}


def test_reaches_native_kernel():
    """Forward and backward go through the overrideable ops (the ATTENTION
    kernel), with the CPU fallback an error."""
    q, k, v = (t.to("tpu").requires_grad_() for t in qkv(1, 2, 2, 16, 16, 8, 8))
    assert torch._fused_sdp_choice(q, k, v) == int(SDPBackend.OVERRIDEABLE)
    names = profiled_names(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward())
    assert FUSED in names and FUSED + "_backward" in names
    assert "aten::_safe_softmax" not in names and "aten::_softmax" not in names


def test_math_backend_when_chosen():
    """sdpa_kernel(MATH) keeps PyTorch's decomposition (native ops too)."""
    q, k, v = qkv(1, 2, 2, 16, 16, 8, 8)
    with sdpa_kernel(SDPBackend.MATH):
        qt = q.to("tpu")
        assert torch._fused_sdp_choice(qt, qt, qt) == int(SDPBackend.MATH)
        names = profiled_names(lambda: compare(q, k, v, torch.float32))
    assert FUSED not in names


def test_flash_backend_flag_takes_the_kernel():
    """Code that picks FLASH_ATTENTION (for CUDA or CPU) runs the kernel."""
    q, k, v = qkv(1, 2, 2, 16, 16, 8, 8)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        names = profiled_names(lambda: compare(q, k, v, torch.float32))
    assert FUSED in names


def test_mask_requiring_grad_takes_math():
    """The kernel computes no mask gradient: such a mask goes to math, whose
    gradient for it matches the CPU's."""
    q, k, v = qkv(1, 2, 2, 10, 12, 8, 8)
    mask = randn(1, 2, 10, 12, seed=4)
    results = []
    for dev in ("cpu", "tpu"):
        m = mask.to(dev, copy=True).requires_grad_()
        leaves = [t.to(dev, copy=True).requires_grad_() for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*leaves, attn_mask=m)
        out.sum().backward()
        results.append([out.detach().cpu(), m.grad.cpu()] + [t.grad.cpu() for t in leaves])
    for r, g in zip(*results):
        torch.testing.assert_close(g, r, rtol=2e-5, atol=2e-5)
    qt = q.to("tpu")
    assert torch._fused_sdp_choice(qt, qt, qt, mask.to("tpu").requires_grad_()) == int(SDPBackend.MATH)


def test_dropout_runs_and_is_deterministic_under_a_seed():
    q, k, v = qkv(2, 2, 2, 24, 24, 16, 16)
    qt, kt, vt = (t.to("tpu") for t in (q, k, v))
    assert torch._fused_sdp_choice(qt, kt, vt, dropout_p=0.3) == int(SDPBackend.MATH)

    def run(seed):
        torch.manual_seed(seed)
        leaves = [t.clone().requires_grad_() for t in (qt, kt, vt)]
        out = F.scaled_dot_product_attention(*leaves, dropout_p=0.3)
        out.sum().backward()
        return [out.detach().cpu()] + [t.grad.cpu() for t in leaves]

    a, b, c = run(11), run(11), run(12)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    assert not torch.equal(a[0], c[0])
    plain = F.scaled_dot_product_attention(qt, kt, vt).cpu()
    assert not torch.equal(a[0], plain)
    assert all(torch.isfinite(t).all() for t in a)


def test_gqa_needs_the_flag():
    """Different head counts without enable_gqa fail as on CPU."""
    q, k, v = qkv(1, 4, 2, 8, 8, 8, 8)
    for dev in ("cpu", "tpu"):
        with pytest.raises(RuntimeError):
            F.scaled_dot_product_attention(q.to(dev), k.to(dev), v.to(dev))


@pytest.mark.parametrize("case", ["dtype_mix", "gqa_indivisible", "int_mask", "head_size", "int_inputs",
                                  "mask_shape"])
def test_bad_inputs_raise_like_cpu(case):
    q, k, v = qkv(1, 4, 4, 8, 8, 8, 8)
    kw = {}
    if case == "dtype_mix":
        k = k.double()
    elif case == "gqa_indivisible":
        k, v = k[:, :3], v[:, :3]
        kw["enable_gqa"] = True
    elif case == "int_mask":
        kw["attn_mask"] = torch.ones(8, 8, dtype=torch.int64)
    elif case == "head_size":
        k = k[..., :6]
    elif case == "int_inputs":
        q, k, v = (t.to(torch.int32) for t in (q, k, v))
    else:
        kw["attn_mask"] = torch.ones(5, 8, dtype=torch.bool)
    with pytest.raises(Exception) as cpu_error:
        F.scaled_dot_product_attention(q, k, v, **kw)
    tkw = {n: (t.to("tpu") if isinstance(t, torch.Tensor) else t) for n, t in kw.items()}
    with pytest.raises(type(cpu_error.value)) as tpu_error:
        F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), **tkw)
        torch.tpu.synchronize()
    assert str(tpu_error.value)


def test_direct_call_checks():
    """The overrideable ops called directly refuse what the kernel cannot
    do, with errors that name the op."""
    q, k, v = (t.to("tpu") for t in qkv(1, 4, 4, 8, 8, 8, 8))
    op = torch.ops.aten._scaled_dot_product_fused_attention_overrideable
    with pytest.raises(RuntimeError, match="dropout_p"):
        op(q, k, v, dropout_p=0.5)
    with pytest.raises(RuntimeError, match="multiple"):
        op(q, k[:, :3], v[:, :3])
    with pytest.raises(RuntimeError, match="3-d or all 4-d"):
        op(q[0, 0], k[0, 0], v[0, 0])
    with pytest.raises(RuntimeError, match="attn_mask"):
        op(q, k, v, attn_bias=torch.ones(3, 8, device="tpu"))
    out = op(q, k, v, scale=0.25)
    ref = F.scaled_dot_product_attention(q.cpu(), k.cpu(), v.cpu(), scale=0.25)
    torch.testing.assert_close(out[0].cpu(), ref, rtol=2e-5, atol=2e-5)
    assert out[1].shape == (1, 4, 8) and out[1].dtype == torch.float32
