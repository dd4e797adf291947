"""Interpolation (F.interpolate's nearest, nearest-exact, linear, bilinear, bicubic and trilinear
modes, antialiased bilinear and bicubic) and adaptive max pooling, forward
and backward, against PyTorch's CPU backend, with the CPU fallback turned
into an error so that everything here runs natively.

Tolerances. float64 matches CPU to rounding. float32 matches to a few
ulps: the device sums each dim's taps in CPU's order, but CPU's small
outputs and channels-last images take a kernel that multiplies the weights
of every dim first, and its backward adds the products of all dims' weights
in one 2-d (3-d) loop, so sums are associated differently. bfloat16 and
float16 compute in float32 and round once, as CPU; CPU's channels-last
kernel keeps unrounded weights where its generic kernel rounds them to the
dtype, so results may differ by one unit in the last place."""
import pytest
import torch
import torch.nn.functional as F

TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-12, 1e-12),
       torch.bfloat16: (1.6e-2, 2e-2), torch.float16: (2e-3, 2e-3)}
GRAD_TOL = {torch.float32: (1e-5, 5e-5), torch.float64: (1e-12, 1e-12),
            torch.bfloat16: (2e-2, 8e-2), torch.float16: (4e-3, 8e-3)}
FLOATS = [torch.float32, torch.float64, torch.bfloat16]


# Every test here runs with the CPU fallback turned into an error (conftest).
pytestmark = pytest.mark.usefixtures("native_only")


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def check(cpu, got, tol=TOL):
    assert got.device.type == "tpu"
    assert got.dtype == cpu.dtype and got.shape == cpu.shape
    r, a = tol[cpu.dtype]
    torch.testing.assert_close(got.cpu(), cpu, rtol=r, atol=a, equal_nan=True)


def interp_both(x, grad=False, seed=1, tol=TOL, **kw):
    """F.interpolate on CPU and on the tpu (same layout); with grad, also
    the input gradient of a random output gradient."""
    xc = x.detach().clone().requires_grad_(grad)
    xt = x.detach().to("tpu").requires_grad_(grad)
    if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        xt = x.detach().to("tpu").contiguous(memory_format=torch.channels_last).requires_grad_(grad)
    yc = F.interpolate(xc, **kw)
    yt = F.interpolate(xt, **kw)
    check(yc.detach(), yt.detach(), tol)
    if grad:
        g = randn(*yc.shape, dtype=yc.dtype, seed=seed)
        yc.backward(g)
        yt.backward(g.to("tpu"))
        check(xc.grad, xt.grad, GRAD_TOL)


SHAPES = {"linear": (2, 3, 7), "bilinear": (2, 3, 7, 5), "bicubic": (2, 3, 7, 5), "trilinear": (1, 2, 4, 5, 3)}
SIZES = {"linear": [(11,), (3,), (7,), (1,)], "bilinear": [(11, 8), (3, 2), (7, 9), (1, 1)],
         "bicubic": [(11, 8), (3, 2), (7, 9), (1, 1)], "trilinear": [(6, 9, 4), (2, 3, 2), (4, 5, 7)]}
SCALES = {"linear": [1.7, 0.6, 2.0], "bilinear": [(1.7, 2.3), (0.6, 0.45), 2.0],
          "bicubic": [(1.7, 2.3), (0.6, 0.45), 2.0], "trilinear": [(1.5, 0.7, 2.0), 0.5]}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("mode", list(SHAPES))
def test_sizes(mode, align_corners, dtype):
    """Up- and down-sampling to explicit sizes (odd ones, an unchanged
    one, a single pixel), forward and backward."""
    x = randn(*SHAPES[mode], dtype=dtype)
    for size in SIZES[mode]:
        interp_both(x, grad=True, size=size, mode=mode, align_corners=align_corners)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("recompute", [None, True])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("mode", list(SHAPES))
def test_scale_factors(mode, align_corners, recompute, dtype):
    """Scale factors, given to the kernel (recompute_scale_factor None:
    the factor, not the sizes, sets the source positions) or turned into
    sizes."""
    x = randn(*SHAPES[mode], dtype=dtype)
    for sf in SCALES[mode]:
        interp_both(x, grad=True, scale_factor=sf, mode=mode, align_corners=align_corners,
                    recompute_scale_factor=recompute)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_layouts(mode):
    """Non-contiguous input (a transposed and a sliced view) and
    channels-last images, with more than 3 channels (CPU's channels-last
    kernel) and with 3."""
    base = randn(2, 5, 9, 8)
    for x in [base.transpose(2, 3), base[:, ::2, 1:, ::2], base.to(memory_format=torch.channels_last),
              base[:, :3].contiguous().to(memory_format=torch.channels_last)]:
        for kw in [dict(size=(13, 6)), dict(scale_factor=0.5)]:
            interp_both(x, grad=True, mode=mode, align_corners=False, **kw)
    x = randn(2, 4, 3, 5, 6).to(memory_format=torch.channels_last_3d)
    interp_both(x, grad=True, mode="trilinear", size=(5, 4, 9))


def test_channels_last_kept():
    x = randn(1, 4, 6, 6).to(memory_format=torch.channels_last).to("tpu")
    y = F.interpolate(x, size=(9, 9), mode="bilinear")
    assert y.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_large(dtype):
    """An image big enough to split across threads and blocks of lines."""
    x = randn(2, 3, 64, 96, dtype=dtype)
    interp_both(x, grad=True, size=(128, 80), mode="bilinear")
    interp_both(x, grad=True, size=(45, 200), mode="bicubic", align_corners=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_antialias(mode, align_corners, dtype):
    """antialias=True: down-sampling widens the filter; up-sampling, an
    unchanged dim, and scale factors."""
    x = randn(2, 3, 17, 12, dtype=dtype)
    for kw in [dict(size=(5, 4)), dict(size=(6, 12)), dict(size=(30, 7)), dict(size=(17, 12)),
               dict(scale_factor=0.3), dict(scale_factor=(0.5, 1.5))]:
        interp_both(x, grad=True, mode=mode, align_corners=align_corners, antialias=True, **kw)
    interp_both(x.to(memory_format=torch.channels_last), grad=True, mode=mode, antialias=True, size=(7, 5))


def test_float16():
    x = randn(2, 3, 7, 5, dtype=torch.float16)
    for mode in ["bilinear", "bicubic"]:
        interp_both(x, grad=True, size=(11, 4), mode=mode)


def test_special_values():
    """NaN and infinities as CPU propagates them: a plain-mode dim whose
    size does not change still multiplies by a weight of 0, so an infinity
    becomes NaN there (on CPU too)."""
    x = randn(1, 2, 6, 5)
    x[0, 0, 2, 3] = float("nan")
    x[0, 1, 4, 1] = float("inf")
    x[0, 1, 0, 0] = float("-inf")
    for mode, size in [("bilinear", (6, 9)), ("bilinear", (11, 5)), ("bicubic", (9, 7)), ("bilinear", (3, 2))]:
        interp_both(x, size=size, mode=mode)
    interp_both(x[:, :, 0], size=(9,), mode="linear")


def test_out_variants():
    x = randn(2, 3, 7, 5)
    out = torch.empty(0, device="tpu")
    torch.ops.aten.upsample_bilinear2d.out(x.to("tpu"), [9, 4], False, None, None, out=out)
    check(torch.ops.aten.upsample_bilinear2d(x, [9, 4], False, None, None), out)
    out = torch.empty(2, 3, 9, 4, device="tpu").transpose(0, 1).contiguous().transpose(0, 1)
    torch.ops.aten.upsample_bicubic2d.out(x.to("tpu"), [9, 4], True, None, None, out=out)
    check(torch.ops.aten.upsample_bicubic2d(x, [9, 4], True, None, None), out)
    g = randn(2, 3, 9, 4)
    gi = torch.empty(0, device="tpu")
    torch.ops.aten.upsample_bilinear2d_backward.grad_input(g.to("tpu"), [9, 4], [2, 3, 7, 5], False, None, None,
                                                           grad_input=gi)
    check(torch.ops.aten.upsample_bilinear2d_backward(g, [9, 4], [2, 3, 7, 5], False, None, None), gi, GRAD_TOL)


def test_empty_batch():
    for mode, shape, size in [("bilinear", (0, 3, 4, 5), (7, 2)), ("linear", (0, 2, 5), (3,)),
                              ("trilinear", (0, 1, 2, 3, 4), (3, 3, 3))]:
        interp_both(randn(*shape), grad=True, size=size, mode=mode)


def same_error(fn, *args):
    """fn raises the same exception type on the tpu as on CPU; returns the
    tpu's message."""
    with pytest.raises(Exception) as cpu:
        fn(*args)
    with pytest.raises(cpu.type) as tpu:
        fn(*[a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args])
    msg = str(tpu.value)
    del cpu, tpu  # their tracebacks hold this frame (a cycle) and, through it, device tensors
    return msg


def test_bad_arguments():
    """Wrong ranks, zero and negative sizes, integer dtypes: CPU's
    exception types, with the op named where CPU names it."""
    x = randn(2, 3, 4, 5)
    same_error(torch.ops.aten.upsample_bilinear2d, x[0], [4, 4], False, None, None)
    same_error(torch.ops.aten.upsample_bilinear2d, x, [4], False, None, None)
    same_error(torch.ops.aten.upsample_bilinear2d, x, [0, 4], False, None, None)
    same_error(torch.ops.aten.upsample_bicubic2d, x, [-1, 4], False, None, None)
    same_error(torch.ops.aten.upsample_linear1d, x, [4], False, None)
    same_error(torch.ops.aten.upsample_trilinear3d, x, [4, 4, 4], False, None, None, None)
    same_error(torch.ops.aten.upsample_bilinear2d, randn(2, 3, 0, 5), [4, 4], False, None, None)
    same_error(F.interpolate, x, None, None, "bilinear")  # neither size nor scale
    for op, args in [(torch.ops.aten.upsample_bilinear2d, ([4, 4], False, None, None)),
                     (torch.ops.aten.upsample_bicubic2d, ([4, 4], False, None, None)),
                     (torch.ops.aten._upsample_bilinear2d_aa, ([4, 4], False, None, None))]:
        msg = same_error(op, x.long(), *args)
        assert "not implemented for 'Long'" in msg and op.__name__.split(".")[0] in msg
    msg = same_error(torch.ops.aten.upsample_linear1d, x[0].long(), [4], False, None)
    assert "upsample_linear1d" in msg
    msg = same_error(torch.ops.aten._upsample_bicubic2d_aa, x.bfloat16(), [3, 3], False, None, None)
    assert "_upsample_bicubic2d_aa" in msg
    g = randn(2, 3, 6, 6)
    same_error(torch.ops.aten.upsample_bilinear2d_backward, g, [5, 6], [2, 3, 4, 5], False, None, None)
    same_error(torch.ops.aten.upsample_bilinear2d_backward, g, [6, 6], [2, 3, 0, 5], False, None, None)


def test_uint8_runs_on_cpu():
    """uint8 images (resized by CPU's own fixed-point arithmetic) take the
    CPU fallback, counted, with CPU's exact result."""
    torch.tpu.set_fallback_error(False)
    torch.tpu.reset_fallback_stats()
    x = torch.randint(0, 256, (1, 3, 9, 7), dtype=torch.uint8)
    for kw in [dict(mode="bilinear"), dict(mode="bicubic"), dict(mode="bilinear", antialias=True)]:
        got = F.interpolate(x.to("tpu"), size=(5, 11), **kw)
        assert torch.equal(got.cpu(), F.interpolate(x, size=(5, 11), **kw))
    assert sum(torch.tpu.fallback_stats().values()) == 3


# ---- adaptive max pooling.

def pool_both(fn, x, out_size, grad=True, seed=2):
    xc = x.detach().clone().requires_grad_(grad)
    xt = x.detach().to("tpu")
    if x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        xt = xt.contiguous(memory_format=torch.channels_last)
    xt.requires_grad_(grad)
    vc, ic = fn(xc, out_size, return_indices=True)
    vt, it = fn(xt, out_size, return_indices=True)
    check(vc.detach(), vt.detach(), {vc.dtype: (0, 0)})
    assert it.dtype == torch.int64 and torch.equal(it.cpu(), ic)
    if grad:
        g = randn(*vc.shape, dtype=vc.dtype, seed=seed)
        vc.backward(g)
        vt.backward(g.to("tpu"))
        check(xc.grad, xt.grad, GRAD_TOL)


POOLS = [(F.adaptive_max_pool1d, [(2, 3, 7), (3, 7), (4, 5)], [3, 8, 1, 7]),
         (F.adaptive_max_pool2d, [(2, 3, 7, 5), (3, 7, 5), (1, 2, 9, 1)], [(3, 8), (1, 1), (7, 5), (4, None)]),
         (F.adaptive_max_pool3d, [(2, 2, 5, 7, 4), (2, 5, 7, 4)], [(3, 8, 2), (1, 1, 1), (5, 7, 4), (None, 2, 3)])]


@pytest.mark.parametrize("dtype", FLOATS + [torch.float16], ids=str)
@pytest.mark.parametrize("fn,shapes,sizes", POOLS, ids=["1d", "2d", "3d"])
def test_adaptive_max_pool(fn, shapes, sizes, dtype):
    """Odd bin counts (7 -> 3, 5 -> 8: overlapping and repeated bins),
    unbatched inputs, values and indices exactly as CPU's, and the
    gradient."""
    for shape in shapes:
        for size in sizes:
            x = randn(*shape, dtype=dtype)
            pool_both(fn, x, size)


@pytest.mark.parametrize("fn,shape,size", [(F.adaptive_max_pool1d, (2, 3, 9), 4),
                                           (F.adaptive_max_pool2d, (2, 3, 7, 6), (3, 4)),
                                           (F.adaptive_max_pool3d, (1, 2, 5, 4, 6), (2, 3, 4))], ids=["1d", "2d", "3d"])
def test_adaptive_max_pool_nan_and_ties(fn, shape, size):
    """NaN wins (the last NaN of a bin), ties keep the first maximum,
    -inf bins report their first position."""
    g = torch.Generator().manual_seed(3)
    x = torch.randint(-2, 3, shape, generator=g).float()
    flat = x.view(-1)
    flat[torch.randperm(flat.numel(), generator=g)[:flat.numel() // 7]] = float("nan")
    flat[:3] = float("-inf")
    pool_both(fn, x, size)
    pool_both(fn, torch.full(shape, float("-inf")), size, grad=False)


def test_adaptive_max_pool_layouts():
    base = randn(2, 5, 9, 8)
    for x in [base.to(memory_format=torch.channels_last), base.transpose(2, 3), base[:, ::2, 1:]]:
        pool_both(F.adaptive_max_pool2d, x, (4, 3))
    pool_both(F.adaptive_max_pool3d, randn(2, 3, 4, 5, 6).to(memory_format=torch.channels_last_3d), (3, 2, 4))
    x = randn(1, 4, 6, 6).to(memory_format=torch.channels_last).to("tpu")
    v, i = F.adaptive_max_pool2d(x, 3, return_indices=True)
    assert v.is_contiguous(memory_format=torch.channels_last)


def test_adaptive_max_pool_large():
    pool_both(F.adaptive_max_pool2d, randn(4, 16, 64, 48), (7, 5))


def test_adaptive_max_pool_bad_arguments():
    x = randn(2, 3, 4, 5)
    same_error(torch.ops.aten.adaptive_max_pool2d, x, [2])
    same_error(torch.ops.aten.adaptive_max_pool2d, x[0, 0], [2, 2])
    same_error(torch.ops.aten.adaptive_max_pool2d, randn(2, 3, 0, 5), [2, 2])
    same_error(torch.ops.aten.adaptive_max_pool3d, x, [2, 2])
    same_error(torch.ops.aten.adaptive_max_pool2d, x, [-1, 2])
    msg = same_error(torch.ops.aten.adaptive_max_pool2d, x.long(), [2, 2])
    assert "adaptive_max_pool2d" in msg and "'Long'" in msg
    msg = same_error(torch.ops.aten.adaptive_max_pool3d, x[None].int(), [2, 2, 2])
    assert "adaptive_max_pool3d" in msg


def test_adaptive_max_pool_backward_bad_indices():
    """Indices outside the plane are an error at the next sync, never a
    write outside the gradient."""
    x = randn(1, 2, 4, 4).to("tpu")
    g = torch.ones(1, 2, 2, 2, device="tpu")
    bad = torch.full((1, 2, 2, 2), 16, dtype=torch.int64, device="tpu")
    with pytest.raises((IndexError, RuntimeError)):
        torch.ops.aten.adaptive_max_pool2d_backward(g, x, bad).cpu()
    ok = torch.zeros(1, 2, 2, 2, dtype=torch.int64, device="tpu")
    r = torch.ops.aten.adaptive_max_pool2d_backward(g, x, ok)
    assert r.cpu()[0, 0, 0, 0] == 4


# Nearest and nearest-exact: gathers, and a backward that adds in CPU's
# order (f32 sums for f16/bf16), so the bits are CPU's, forward and back.
@pytest.mark.parametrize("dtype", FLOATS + [torch.float16], ids=str)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("spatial", [(5,), (5, 7), (5, 7, 4)], ids=["1d", "2d", "3d"])
@pytest.mark.parametrize("resize", [dict(scale_factor=2), dict(scale_factor=0.6), dict(scale_factor=1.7),
                                    "size"], ids=["x2", "x0.6", "x1.7", "size"])
def test_nearest_bit_exact(spatial, mode, dtype, resize):
    kw = resize if isinstance(resize, dict) else dict(size=(9, 3, 6)[:len(spatial)])
    x = randn(2, 3, *spatial, dtype=dtype)
    layouts = [x] + ([x.contiguous(memory_format=torch.channels_last)] if len(spatial) == 2 else [])
    for src in layouts:
        xc, xt = src.clone().requires_grad_(), src.to("tpu").requires_grad_()
        yc, yt = F.interpolate(xc, mode=mode, **kw), F.interpolate(xt, mode=mode, **kw)
        assert torch.equal(yt.cpu(), yc) and yt.stride() == yc.stride()
        g = randn(*yc.shape, dtype=dtype, seed=1)
        yc.backward(g)
        yt.backward(g.to("tpu"))
        assert torch.equal(xt.grad.cpu(), xc.grad)


def test_nearest_uint8_and_errors_as_cpu():
    x = torch.randint(0, 256, (1, 3, 5, 5), dtype=torch.uint8)
    assert torch.equal(F.interpolate(x.to("tpu"), scale_factor=2.3).cpu(), F.interpolate(x, scale_factor=2.3))
    up = torch.ops.aten.upsample_nearest2d_backward
    calls = [
        (lambda d: up(torch.ones(1, 1, 5, 6, device=d), [6, 6], [1, 1, 3, 3]), RuntimeError, "same shape"),
        (lambda d: torch.ops.aten.upsample_nearest2d(torch.ones(1, 1, 0, 3, device=d), [6, 6]), RuntimeError,
         "greater than 0"),
        (lambda d: F.interpolate(torch.ones(1, 1, 3, 3, dtype=torch.int32, device=d), scale_factor=2),
         NotImplementedError, "not implemented for 'Int'"),
        (lambda d: up(torch.ones(1, 1, 6, 6, dtype=torch.uint8, device=d), [6, 6], [1, 1, 3, 3]),
         NotImplementedError, "not implemented for 'Byte'"),
    ]
    for call, error, text in calls:
        for device in ("cpu", "tpu"):
            with pytest.raises(error, match=text):
                call(device)
