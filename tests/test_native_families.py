"""The native layer norm, reduction (prod, amax/amin, argmax/argmin, any/all,
max/min), tril/triu, gather (index_select, gather, embedding backward), NLL
loss and random_ kernels against PyTorch's CPU backend, with the CPU
fallback turned into an error so that every op here runs natively."""
import pytest
import torch
import torch.nn.functional as F

TOL = {torch.float32: (2e-6, 2e-5), torch.float64: (1e-12, 1e-12),
       torch.bfloat16: (1.6e-2, 2e-2), torch.float16: (2e-3, 2e-3)}
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


# Every test here runs with the CPU fallback turned into an error (conftest).
pytestmark = pytest.mark.usefixtures("native_only")


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def check(cpu, tpu, tol_dtype=None):
    assert tpu.device.type == "tpu"
    assert tpu.dtype == cpu.dtype and tpu.shape == cpu.shape
    rtol, atol = TOL.get(tol_dtype or cpu.dtype, (0, 0))
    torch.testing.assert_close(tpu.cpu(), cpu, rtol=rtol, atol=atol, equal_nan=True)


# ---------------------------------------------------------------- layer norm

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
@pytest.mark.parametrize("shape,normalized", [((4, 6, 8), (8,)), ((3, 5, 4), (5, 4)), ((7,), (7,)),
                                              ((0, 3), (3,)), ((2, 1), (1,))])
def test_layer_norm_forward_and_backward(dtype, affine, shape, normalized):
    """Against the CPU computing in float64 from the same (rounded) inputs:
    for float16/bfloat16 the CPU's own half-precision parameter gradients
    are further from that than the tpu's (it sums rows in reduced
    precision; the tpu sums in f64 and rounds once)."""
    x = randn(*shape, dtype=dtype)
    w = randn(*normalized, dtype=dtype, seed=1) if affine != "none" else None
    b = randn(*normalized, dtype=dtype, seed=2) if affine == "both" else None
    g = randn(*shape, dtype=dtype, seed=3)
    results = []
    for dev, dt in (("cpu", torch.float64), ("tpu", dtype)):
        leaves = [t.to(dev, dt, copy=True).requires_grad_() if t is not None else None for t in (x, w, b)]
        y = F.layer_norm(leaves[0], normalized, leaves[1], leaves[2], eps=1e-5)
        y.backward(g.to(dev, dt))
        results.append([y.detach()] + [t.grad for t in leaves if t is not None])
    for ref, got in zip(*results):
        check(ref.to(dtype), got, tol_dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_layer_norm_mixed_precision_statistics(dtype):
    """A half input with float32 parameters keeps float32 statistics (as CPU)."""
    x, w, b = randn(5, 16, dtype=dtype), randn(16, seed=1), randn(16, seed=2)
    cpu = torch.ops.aten.native_layer_norm(x, [16], w, b, 1e-6)
    tpu = torch.ops.aten.native_layer_norm(x.to("tpu"), [16], w.to("tpu"), b.to("tpu"), 1e-6)
    for c, t in zip(cpu, tpu):
        check(c, t, tol_dtype=dtype)


def test_layer_norm_non_contiguous_input_and_grad():
    x = randn(8, 6).t()  # [6, 8], transposed
    w, b = randn(8, seed=1), randn(8, seed=2)
    check(F.layer_norm(x, (8,), w, b), F.layer_norm(x.to("tpu"), (8,), w.to("tpu"), b.to("tpu")))
    g = randn(8, 6, seed=4).t()
    args = (randn(6, 8), [8], torch.zeros(6, 1), torch.ones(6, 1), w, b, [True, True, True])
    cpu = torch.ops.aten.native_layer_norm_backward(g, *args)
    tpu = torch.ops.aten.native_layer_norm_backward(g.to("tpu"), *[a.to("tpu") if torch.is_tensor(a) else a
                                                                    for a in args])
    for c, t in zip(cpu, tpu):
        check(c, t)


def test_layer_norm_bad_inputs():
    x = torch.randn(3, 4, device="tpu")
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.layer_norm(x, (5,))
    with pytest.raises(RuntimeError, match="weight"):
        F.layer_norm(x, (4,), torch.ones(3, device="tpu"))
    with pytest.raises(NotImplementedError, match="LayerNorm"):
        torch.ops.aten.native_layer_norm(torch.ones(3, 4, dtype=torch.long, device="tpu"), [4], None, None, 1e-5)


# ---------------------------------------------------------------- reductions

def reduce_input(dtype, shape=(5, 6, 7), seed=0):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=torch.Generator().manual_seed(seed)).bool()
    if not dtype.is_floating_point:
        return torch.randint(-4, 5, shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
    x = randn(*shape, seed=seed)
    x.view(-1)[3] = x.view(-1)[11]  # a tie
    return x.to(dtype)


REDUCTIONS = [
    lambda x: torch.amax(x, 1), lambda x: torch.amax(x, (0, 2), keepdim=True), lambda x: torch.amin(x, -1),
    lambda x: torch.amax(x, ()), lambda x: torch.argmax(x), lambda x: torch.argmax(x, 1),
    lambda x: torch.argmin(x, 0, keepdim=True), lambda x: torch.max(x, 2).values, lambda x: torch.max(x, 2).indices,
    lambda x: torch.min(x, 0, keepdim=True).indices, lambda x: torch.max(x), lambda x: torch.min(x),
    lambda x: torch.any(x), lambda x: torch.all(x, 1), lambda x: torch.any(x, (0, 2)), lambda x: torch.all(x != 0),
    lambda x: torch.prod(x, 1), lambda x: torch.prod(x),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.int32,
                                   torch.uint8, torch.bool])
@pytest.mark.parametrize("fn", REDUCTIONS)
def test_reductions_match_cpu(fn, dtype):
    x = reduce_input(dtype)
    try:
        expected = fn(x)
    except (RuntimeError, NotImplementedError) as e:  # e.g. argmax of bool: no CPU kernel
        with pytest.raises(type(e)):
            fn(x.to("tpu"))
        return
    check(expected, fn(x.to("tpu")))
    check(fn(x.transpose(0, 2)), fn(x.to("tpu").transpose(0, 2)))


VARIANCES = [
    lambda x: torch.var(x), lambda x: torch.std(x, 1), lambda x: torch.var(x, (0, 2), correction=0, keepdim=True),
    lambda x: torch.std(x, -1, correction=2.5), lambda x: torch.var(x, 1, correction=40),
    lambda x: torch.var(x, 1, unbiased=False), lambda x: torch.var_mean(x, -1)[0], lambda x: torch.var_mean(x, -1)[1],
    lambda x: torch.std_mean(x, (1, 2), keepdim=True)[0], lambda x: torch.std_mean(x)[1],
    lambda x: torch.var(x.transpose(0, 2), 1), lambda x: torch.std(x[:, ::2], 2),
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("fn", VARIANCES)
def test_var_std_match_cpu(fn, dtype):
    """var/std and their _mean forms: one native record each (two passes in
    f64), against the CPU's Welford loops."""
    x = randn(4, 6, 40, dtype=dtype) * 3 + 1
    check(fn(x), fn(x.to("tpu")))


def test_var_std_long_rows_and_special_values():
    # Values near 1000 with small spread (a one-pass sum of squares would
    # cancel), long contiguous rows (the 16 lanes and their tail), NaN and
    # infinities, an empty reduction, one element with Bessel's correction.
    x = (1000 + randn(3, 10007, dtype=torch.float64) / 64).float()
    t = x.to("tpu")
    for fn in (lambda v: v.var(1), lambda v: v.std(), lambda v: v.var(0), lambda v: v.std(1, correction=0)):
        torch.testing.assert_close(fn(t).cpu(), fn(x.double()).float(), rtol=1e-6, atol=0)
    y = randn(5, 7)
    y[1, 3] = float("nan")
    y[2, 0] = float("inf")
    y[3, 2], y[3, 5] = float("inf"), float("-inf")
    check(y.var(1), y.to("tpu").var(1))
    check(y.std(0), y.to("tpu").std(0))
    e = torch.empty(3, 0)
    one = randn(4, 1)
    for v in (e, one):  # no degrees of freedom: NaN, with the CPU's warning
        with pytest.warns(UserWarning, match="degrees of freedom"):
            check(v.var(1), v.to("tpu").var(1))


def test_var_std_out_and_errors():
    x = randn(4, 5)
    out = torch.empty(0, device="tpu")
    torch.var(x.to("tpu"), 1, out=out)
    check(torch.var(x, 1), out)
    out = torch.empty(0, device="tpu")
    torch.std(x.to("tpu"), 0, correction=0, keepdim=True, out=out)
    check(torch.std(x, 0, correction=0, keepdim=True), out)
    with pytest.raises(RuntimeError, match="floating"):
        torch.var(torch.arange(6, device="tpu"))
    # out= of another dtype: computed in a wider float's precision, refused
    # for an integer one, as on the CPU.
    h = randn(3, 40, dtype=torch.bfloat16) * 3
    wide = torch.empty(0, dtype=torch.float64, device="tpu")
    torch.var(h.to("tpu"), 1, out=wide)
    check(torch.var(h, 1, out=torch.empty(0, dtype=torch.float64)), wide)
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.std(x.to("tpu"), 1, out=torch.empty(4, dtype=torch.int64, device="tpu"))
    # A NaN correction divides by max(N - NaN, 0) = 0, as the CPU's does.
    check(torch.var(x, 1, correction=float("nan")), torch.var(x.to("tpu"), 1, correction=float("nan")))
    with pytest.raises(IndexError):
        torch.std(x.to("tpu"), 2)
    g = randn(3, 8).requires_grad_()
    gt = g.detach().to("tpu").requires_grad_()
    g.std(1).sum().backward()
    gt.std(1).sum().backward()
    check(g.grad, gt.grad)


def test_reductions_nan_and_first_index():
    x = torch.tensor([[1.0, float("nan"), 3.0, float("nan")], [2.0, 5.0, 5.0, -1.0]])
    t = x.to("tpu")
    for fn in (lambda v: v.amax(1), lambda v: v.argmax(1), lambda v: v.argmin(1), lambda v: v.max(1).indices,
               lambda v: v.min(1).values):
        check(fn(x), fn(t))


def test_reduction_out_variants_and_errors():
    x = randn(4, 5)
    out = torch.empty(0, device="tpu")
    torch.amax(x.to("tpu"), 1, out=out)
    check(torch.amax(x, 1), out)
    vals, idx = torch.empty(0, device="tpu"), torch.empty(0, dtype=torch.long, device="tpu")
    torch.max(x.to("tpu"), 0, out=(vals, idx))
    check(torch.max(x, 0).values, vals)
    check(torch.max(x, 0).indices, idx)
    with pytest.raises(RuntimeError, match="numel"):
        torch.max(torch.empty(0, device="tpu"))
    with pytest.raises(IndexError):
        torch.amax(x.to("tpu"), 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.int32,
                                   torch.uint8, torch.bool])
def test_cumsum_cumprod(dtype):
    x = reduce_input(dtype, shape=(4, 6, 5))
    t = x.to("tpu")
    for dim in (0, 1, -1):
        check(torch.cumsum(x, dim), torch.cumsum(t, dim), tol_dtype=torch.float32 if dtype.is_floating_point else None)
        check(torch.cumprod(x, dim), torch.cumprod(t, dim), tol_dtype=torch.float32 if dtype.is_floating_point else None)
    check(torch.cumsum(x.transpose(0, 2), 1, dtype=torch.float16), torch.cumsum(t.transpose(0, 2), 1,
                                                                                dtype=torch.float16))
    check(torch.cumsum(torch.tensor(3), 0), torch.cumsum(torch.tensor(3, device="tpu"), 0))
    if dtype.is_floating_point:
        check(x.clone().cumsum_(1), t.clone().cumsum_(1), tol_dtype=torch.float32)
        x.requires_grad_()
        gc, = torch.autograd.grad(torch.cumsum(x, 1).sum(), x)
        tr = x.detach().to("tpu").requires_grad_()
        gt, = torch.autograd.grad(torch.cumsum(tr, 1).sum(), tr)
        check(gc, gt, tol_dtype=torch.float32)


@pytest.mark.parametrize("invert", [False, True])
def test_isin(invert):
    e = torch.tensor([[1, 5, 7], [2, 2, 9]])
    test = torch.tensor([2, 7, 11])
    check(torch.isin(e, test, invert=invert), torch.isin(e.to("tpu"), test.to("tpu"), invert=invert))
    check(torch.isin(e, 7, invert=invert), torch.isin(e.to("tpu"), 7, invert=invert))
    ef = torch.tensor([1.5, float("nan"), 2.0])
    check(torch.isin(ef, torch.tensor([2, 3])), torch.isin(ef.to("tpu"), torch.tensor([2, 3], device="tpu")))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_and_argsort(dtype, descending):
    x = reduce_input(dtype, shape=(3, 17, 4))
    if dtype.is_floating_point:
        x[0, 3, 0] = float("nan")
        x[1, 5, 2] = float("-inf")
    t = x.to("tpu")
    for dim in (1, 0, -1):
        a = torch.sort(x, dim=dim, descending=descending, stable=True)
        b = torch.sort(t, dim=dim, descending=descending, stable=True)
        check(a.values, b.values)
        check(a.indices, b.indices)
    check(torch.argsort(x, dim=1, descending=descending, stable=True),
          torch.argsort(t, dim=1, descending=descending, stable=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("largest", [True, False])
def test_topk(dtype, largest):
    x = reduce_input(dtype, shape=(6, 20))
    t = x.to("tpu")
    for k, dim in ((3, 1), (1, 0), (20, 1), (0, 1)):
        a = torch.topk(x, k, dim, largest=largest)
        b = torch.topk(t, k, dim, largest=largest)
        check(a.values, b.values)
        # ties may be listed in another order: the indices must pick the values
        check(a.values, torch.gather(t, dim, b.indices))
    with pytest.raises(RuntimeError, match="k"):
        torch.topk(t, 21, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64])
def test_histc(dtype):
    x = (randn(1000) * 4).to(dtype)
    t = x.to("tpu")
    if dtype.is_floating_point:
        for args in ((10, -3, 3), (7, 0, 0), (5, -1, 1.5)):
            check(torch.histc(x, *args), torch.histc(t, *args))
    else:
        # PyTorch's CPU histc has no integer kernel (CUDA's has, and MoE
        # routing needs it): compare against the float histogram.
        expected = torch.histc(x.double(), 8, -4, 4).to(dtype)
        check(expected, torch.histc(t, 8, -4, 4))


def test_floor_divide():
    a = torch.tensor([7, -7, 9, -9], dtype=torch.int64)
    b = torch.tensor([2, 2, -4, -4], dtype=torch.int64)
    check(torch.floor_divide(a, b), torch.floor_divide(a.to("tpu"), b.to("tpu")))
    check(a // 2, a.to("tpu") // 2)
    f = randn(10) * 5
    check(torch.floor_divide(f, 1.5), torch.floor_divide(f.to("tpu"), 1.5))


# ---------------------------------------------------------------- tril / triu

@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16])
@pytest.mark.parametrize("k", [-3, -1, 0, 2, 6])
def test_tril_triu(dtype, k):
    x = reduce_input(dtype, shape=(2, 4, 5))
    t = x.to("tpu")
    check(torch.tril(x, k), torch.tril(t, k))
    check(torch.triu(x, k), torch.triu(t, k))
    check(torch.triu(x.transpose(1, 2), k), torch.triu(t.transpose(1, 2), k))
    check(x.clone().tril_(k), t.clone().tril_(k))
    out = torch.empty(0, dtype=dtype, device="tpu")
    torch.triu(t, k, out=out)
    check(torch.triu(x, k), out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16])
def test_flip(dtype):
    x = reduce_input(dtype, shape=(3, 4, 5))
    t = x.to("tpu")
    for dims in [(0,), (-1,), (0, 2), (0, 1, 2), ()]:
        check(torch.flip(x, dims), torch.flip(t, dims))
    check(torch.flip(x.transpose(0, 2)[1:], (0, 1)), torch.flip(t.transpose(0, 2)[1:], (0, 1)))
    with pytest.raises(RuntimeError, match="multiple times"):
        torch.flip(t, (0, 0))


def test_causal_mask_as_models_build_it():
    mask = torch.full((6, 6), float("-inf")).triu(1)
    check(mask, torch.full((6, 6), float("-inf"), device="tpu").triu(1))


# ---------------------------------------------------------------- gathers

@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_index_select(dtype, index_dtype):
    x = reduce_input(dtype, shape=(4, 5, 3))
    for dim in range(3):
        idx = torch.tensor([0, 2, 2, 1], dtype=index_dtype) % x.shape[dim]
        check(x.index_select(dim, idx), x.to("tpu").index_select(dim, idx.to("tpu")))
    check(x[:, 1].index_select(0, idx), x.to("tpu")[:, 1].index_select(0, idx.to("tpu")))
    s = torch.tensor(3.5).to(dtype)
    check(s.index_select(0, torch.tensor([0])), s.to("tpu").index_select(0, torch.tensor([0], device="tpu")))


@pytest.mark.parametrize("bad", [5, -1])
def test_index_select_out_of_range_raises_index_error(bad):
    x = torch.randn(3, 5, device="tpu")
    with pytest.raises(IndexError, match=f"index {bad} is out of bounds"):
        x.index_select(1, torch.tensor([0, bad], device="tpu"))
        torch.tpu.synchronize()
    torch.tpu.synchronize()  # the error is reported once; the device works on
    assert x.index_select(1, torch.tensor([4], device="tpu")).shape == (3, 1)


def test_gather():
    x = randn(4, 6)
    idx = torch.tensor([[0, 5, 5], [1, 1, 0], [3, 2, 4], [0, 0, 0]])
    check(torch.gather(x, 1, idx), torch.gather(x.to("tpu"), 1, idx.to("tpu")))
    idx0 = torch.tensor([[3, 2, 1, 0, 0, 1]])
    check(torch.gather(x, 0, idx0), torch.gather(x.to("tpu"), 0, idx0.to("tpu")))
    with pytest.raises(IndexError):
        torch.gather(x.to("tpu"), 1, torch.tensor([[6]], device="tpu"))
        torch.tpu.synchronize()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("padding_idx,scale", [(None, False), (2, False), (None, True), (0, True)])
def test_embedding_backward(dtype, padding_idx, scale):
    weight = randn(10, 4, dtype=dtype)
    ids = torch.tensor([[1, 2, 2, 9], [0, 2, 1, 1]])
    grads = []
    for dev in ("cpu", "tpu"):
        w = weight.to(dev, copy=True).requires_grad_()
        out = F.embedding(ids.to(dev), w, padding_idx=padding_idx, scale_grad_by_freq=scale)
        (out * torch.arange(out.numel(), dtype=dtype).reshape(out.shape).to(dev)).sum().backward()
        grads.append(w.grad)
    check(grads[0], grads[1])


INDEXINGS = [
    lambda x, d: x[torch.tensor([0, 3, -1], device=d)],
    lambda x, d: x[:, torch.tensor([[1], [2]], device=d)],
    lambda x, d: x[torch.tensor([[0], [4]], device=d), torch.tensor([5, 0, 1], device=d)],
    lambda x, d: x[torch.tensor([1, 2], device=d), :, torch.tensor([6, 0], device=d)],
    lambda x, d: x[..., torch.tensor([2, 2], device=d)],
    lambda x, d: x[x > 0.5],
    lambda x, d: x[(x > 0).any(-1)],
    lambda x, d: x[torch.tensor([0, 1], device="cpu")],  # CPU indices, as CUDA allows
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16])
@pytest.mark.parametrize("fn", INDEXINGS)
def test_advanced_indexing(fn, dtype):
    x = reduce_input(dtype, shape=(5, 6, 7))
    check(fn(x, "cpu"), fn(x.to("tpu"), "tpu"))
    with pytest.raises(IndexError, match="out of bounds"):
        x.to("tpu")[torch.tensor([5], device="tpu")].cpu()


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(accumulate):
    x = randn(5, 6)
    for idx, value in [((torch.tensor([0, 0, 2]),), randn(3, 6, seed=1)),
                       ((torch.tensor([1, 4]), torch.tensor([5, -1])), torch.tensor([1.5, 2.5])),
                       ((torch.tensor([3]),), torch.tensor(7.0))]:
        a, b = x.clone(), x.to("tpu")
        a.index_put_(idx, value, accumulate=accumulate)
        b.index_put_(tuple(i.to("tpu") for i in idx), value.to("tpu"), accumulate=accumulate)
        check(a, b)
    a, b = x.clone(), x.to("tpu")
    a[a > 0] = -1.0
    b[b > 0] = -1.0
    check(a, b)
    a[:, 2:][a[:, 2:] < 0] = 3.0
    b[:, 2:][b[:, 2:] < 0] = 3.0
    check(a, b)


def test_nonzero_and_scatter():
    x = reduce_input(torch.float32, shape=(4, 5, 3)) > 0.3
    check(torch.nonzero(x), torch.nonzero(x.to("tpu")))
    check(torch.nonzero(torch.tensor(3.0)), torch.nonzero(torch.tensor(3.0, device="tpu")))
    check(torch.nonzero(torch.zeros(0, 3)), torch.nonzero(torch.zeros(0, 3, device="tpu")))
    idx = torch.randint(0, 6, (5, 3), generator=torch.Generator().manual_seed(1))
    src = randn(5, 3)
    for dim_idx, base in ((idx, torch.zeros(5, 6)), (idx.t()[:, :2] % 5, torch.zeros(5, 6))):
        dim = 1 if dim_idx is idx else 0
        s = src[: dim_idx.shape[0], : dim_idx.shape[1]]
        check(base.scatter(dim, dim_idx, s), base.to("tpu").scatter(dim, dim_idx.to("tpu"), s.to("tpu")))
        check(base.scatter_add(dim, dim_idx, s), base.to("tpu").scatter_add(dim, dim_idx.to("tpu"), s.to("tpu")))
        check(base.clone().scatter_(dim, dim_idx, 2.5), base.to("tpu").scatter_(dim, dim_idx.to("tpu"), 2.5))
    with pytest.raises(IndexError):
        torch.zeros(2, 3, device="tpu").scatter_(1, torch.tensor([[3]], device="tpu"), 1.0)
        torch.tpu.synchronize()


# ---------------------------------------------------------------- losses

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_and_cross_entropy(dtype, reduction, weighted):
    logits = randn(6, 5, dtype=dtype)
    target = torch.tensor([0, 4, 2, -100, 1, 1])
    weight = randn(5, seed=3).abs().to(dtype) if weighted else None
    results = []
    for dev in ("cpu", "tpu"):
        x = logits.to(dev, copy=True).requires_grad_()
        w = weight.to(dev) if weighted else None
        loss = F.cross_entropy(x, target.to(dev), weight=w, reduction=reduction)
        loss.sum().backward()
        results.append((loss.detach(), x.grad))
    for c, t in zip(*results):
        check(c, t, tol_dtype=dtype)


def test_nll_loss_edge_cases():
    x = randn(5).log_softmax(0)
    check(F.nll_loss(x, torch.tensor(3)), F.nll_loss(x.to("tpu"), torch.tensor(3, device="tpu")))
    x2 = randn(3, 4)
    all_ignored = torch.full((3,), -100)
    check(F.nll_loss(x2, all_ignored), F.nll_loss(x2.to("tpu"), all_ignored.to("tpu")))  # NaN, as on CPU
    check(F.cross_entropy(x2, torch.tensor([1, 0, 3]), label_smoothing=0.1),
          F.cross_entropy(x2.to("tpu"), torch.tensor([1, 0, 3], device="tpu"), label_smoothing=0.1))
    with pytest.raises(IndexError, match="target 7 is out of bounds"):
        F.nll_loss(x2.to("tpu"), torch.tensor([1, 7, 0], device="tpu")).item()


# ---------------------------------------------------------------- random_

@pytest.mark.parametrize("dtype,args,lo,hi", [
    (torch.int64, (3, 9), 3, 8), (torch.int32, (-5, 5), -5, 4), (torch.uint8, (), 0, 255),
    (torch.float32, (10,), 0, 9), (torch.int64, (-2**40, 2**40), -2**40, 2**40 - 1),
    (torch.bool, (), 0, 1), (torch.int8, (), 0, 127)])
def test_random_range_and_determinism(dtype, args, lo, hi):
    torch.tpu.manual_seed(7)
    a = torch.empty(20000, dtype=dtype, device="tpu").random_(*args)
    torch.tpu.manual_seed(7)
    b = torch.empty(20000, dtype=dtype, device="tpu").random_(*args)
    assert torch.equal(a.cpu(), b.cpu())
    v = a.cpu().double()
    assert v.min().item() >= lo and v.max().item() <= hi
    # uniform on [lo, hi]: the mean within 5 standard errors
    mean, sd = (lo + hi) / 2, (hi - lo + 1) / 12 ** 0.5
    assert abs(v.mean().item() - mean) < 5 * sd / len(v) ** 0.5 + 1e-9


def test_random_bad_range():
    x = torch.empty(3, dtype=torch.int64, device="tpu")
    with pytest.raises(RuntimeError, match="from"):
        x.random_(5, 5)
    with pytest.raises(RuntimeError, match="range"):
        torch.empty(3, dtype=torch.uint8, device="tpu").random_(0, 300)


# ---------------------------------------------------------------- convolution, pooling, batch norm

def grads_match(fn, *tensors, seed=5):
    """fn(*tensors) and every input's gradient, CPU (float64) against tpu
    (the tensors' own dtype), with a fixed non-uniform output gradient."""
    results = []
    for dev in ("cpu", "tpu"):
        leaves = [t.to(dev, copy=True).requires_grad_() if t is not None else None for t in tensors]
        y = fn(*leaves)
        g = torch.arange(y.numel(), dtype=y.dtype, device=dev).reshape(y.shape).sin()
        y.backward(g)
        results.append([y.detach()] + [t.grad for t in leaves if t is not None])
    for ref, got in zip(*results):
        check(ref, got, tol_dtype=torch.float32)


@pytest.mark.parametrize("case", [
    ((2, 3, 9, 8), (4, 3, 3, 3), dict(stride=1, padding=1)),
    ((2, 4, 9, 8), (6, 2, 3, 2), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)),
    ((1, 4, 6, 6), (4, 1, 3, 3), dict(groups=4, padding=1)),  # depthwise
    ((2, 3, 17), (5, 3, 4), dict(stride=2, padding=3)),  # conv1d
    ((2, 3, 5, 5), (2, 3, 5, 5), dict()),  # one output pixel
])
@pytest.mark.parametrize("bias", [True, False])
def test_convolution(case, bias):
    xs, ws, kw = case
    conv = F.conv1d if len(xs) == 3 else F.conv2d
    x, w = randn(*xs), randn(*ws, seed=1)
    b = randn(ws[0], seed=2) if bias else None
    grads_match(lambda x, w, b=None: conv(x, w, b, **kw), x, w, b)


def test_convolution_channels_last_and_bf16():
    x, w = randn(2, 3, 8, 8), randn(5, 3, 3, 3, seed=1)
    xc = x.to(memory_format=torch.channels_last)
    check(F.conv2d(xc, w, padding=1), F.conv2d(xc.to("tpu"), w.to("tpu"), padding=1))
    xb, wb = x.bfloat16(), w.bfloat16()
    check(F.conv2d(xb.float(), wb.float(), padding=1).bfloat16(), F.conv2d(xb.to("tpu"), wb.to("tpu"), padding=1))


@pytest.mark.parametrize("kw", [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=(2, 3), stride=(1, 2),
                                ceil_mode=True), dict(kernel_size=2, dilation=2), dict(kernel_size=2)])
def test_max_pool2d(kw):
    x = randn(2, 3, 9, 8)
    x.view(-1)[::7] = 0.5  # ties
    grads_match(lambda v: F.max_pool2d(v, **kw), x)
    a, ia = F.max_pool2d(x, return_indices=True, **kw)
    b, ib = F.max_pool2d(x.to("tpu"), return_indices=True, **kw)
    check(a, b)
    check(ia, ib)
    check(F.max_pool2d(x[0], **kw), F.max_pool2d(x[0].to("tpu"), **kw))  # no batch dim


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (8, 3), (2, 3, 7)])
def test_batch_norm(training, shape):
    x, w, b = randn(*shape), randn(3, seed=1), randn(3, seed=2)
    results = []
    for dev in ("cpu", "tpu"):
        rm, rv = torch.full((3,), 0.1, device=dev), torch.full((3,), 1.5, device=dev)
        leaves = [t.to(dev, copy=True).requires_grad_() for t in (x, w, b)]
        y = F.batch_norm(leaves[0], rm, rv, leaves[1], leaves[2], training=training, momentum=0.3)
        y.backward(torch.arange(y.numel(), dtype=y.dtype, device=dev).reshape(y.shape).sin())
        results.append([y.detach(), rm, rv] + [t.grad for t in leaves])
    for c, t in zip(*results):
        check(c, t)


# ---------------------------------------------------------------- found by the adversarial pass

def test_histc_edges_are_in_the_input_dtype():
    x = torch.tensor([0.0, 0.05, 0.1, 0.3])
    for args in ((4, 0, 0.1), (3, 0.1, 0.3)):
        check(torch.histc(x, *args), torch.histc(x.to("tpu"), *args))
    h = torch.tensor([0.1, 0.3]).half()
    check(torch.histc(h.float(), 2, float(h[0]), float(h[1])).half(), torch.histc(h.to("tpu"), 2, 0.1, 0.3))


def test_max_pool_nan_takes_the_last_nan_as_cpu():
    x = torch.tensor([[[[float("nan"), 0.0], [0.0, float("nan")]]]])
    grads_match(lambda v: F.max_pool2d(v, 2), x)
    check(F.max_pool2d(x, 2, return_indices=True)[1], F.max_pool2d(x.to("tpu"), 2, return_indices=True)[1])


def test_isin_large_sets_sort_instead_of_comparing_all_pairs():
    g = torch.Generator().manual_seed(3)
    e, t = torch.randint(0, 50000, (200000,), generator=g), torch.randint(0, 50000, (30000,), generator=g)
    for invert in (False, True):
        check(torch.isin(e, t, invert=invert), torch.isin(e.to("tpu"), t.to("tpu"), invert=invert))
    ef, tf = torch.tensor([1.5, float("nan"), 2.0] * 20000), torch.tensor([2.0, float("nan")] * 500)
    check(torch.isin(ef, tf), torch.isin(ef.to("tpu"), tf.to("tpu")))


def test_any_all_over_an_empty_dim_list_reduce_nothing():
    x = reduce_input(torch.float32, shape=(3, 5))
    check(torch.any(x, dim=()), torch.any(x.to("tpu"), dim=()))
    check(torch.all(x, dim=()), torch.all(x.to("tpu"), dim=()))


@pytest.mark.parametrize("call", [
    lambda d: torch.gather(torch.randn(2, 3, device="tpu"), 1, torch.zeros(2, 1, dtype=torch.long, device=d)),
    lambda d: torch.zeros(2, 3, device="tpu").scatter_(1, torch.zeros(2, 1, dtype=torch.long, device=d), 1.0),
    lambda d: F.layer_norm(torch.randn(2, 3, device="tpu"), (3,), torch.ones(3, device=d)),
    lambda d: F.cross_entropy(torch.randn(2, 3, device="tpu"), torch.tensor([0, 1], device="tpu"),
                              weight=torch.ones(3, device=d)),
])
def test_operands_on_the_cpu_give_pytorchs_device_error(call):
    call("tpu")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        call("cpu")


def test_quadratic_paths_are_gone_and_dtypes_widened():
    g = torch.randn(20000, 8, generator=torch.Generator().manual_seed(0))
    i = torch.randint(0, 300, (20000,), generator=torch.Generator().manual_seed(1))
    check(torch.ops.aten.embedding_dense_backward(g, i, 300, -1, True),
          torch.ops.aten.embedding_dense_backward(g.to("tpu"), i.to("tpu"), 300, -1, True))
    x = torch.randn(3, 4).log_softmax(1)
    t = torch.tensor([1, 0, 3], dtype=torch.uint8)
    check(F.nll_loss(x, t), F.nll_loss(x.to("tpu"), t.to("tpu")))
    b, idx, src = torch.zeros(2, 3, dtype=torch.bool), torch.tensor([[0, 0]]), torch.ones(1, 2, dtype=torch.bool)
    check(b.clone().scatter_add_(1, idx, src), b.to("tpu").scatter_add_(1, idx.to("tpu"), src.to("tpu")))
    r = torch.empty(2000, device="tpu").random_(0, 2**30).cpu()  # floats take any range, as on CPU
    assert r.min() >= 0 and r.max() < 2**30


def test_convolution_keeps_channels_last():
    x = randn(2, 3, 8, 8).to(memory_format=torch.channels_last)
    w = randn(4, 3, 3, 3, seed=1)
    a, b = F.conv2d(x, w), F.conv2d(x.to("tpu"), w.to("tpu"))
    assert a.stride() == b.stride()
    check(a, b)


# ---------------------------------------------------------------- composed ops

COMPOSED = [
    lambda x: torch.var(x, 1), lambda x: torch.std(x, (0, 2), correction=0, keepdim=True),
    lambda x: torch.var_mean(x, -1)[0], lambda x: torch.std_mean(x)[1], lambda x: torch.roll(x, (2, -1), (1, 2)),
    lambda x: torch.roll(x, 5), lambda x: torch.round(x, decimals=2), lambda x: torch.round(x * 100, decimals=-1),
    lambda x: torch.logaddexp(x, x.flip(0)), lambda x: torch.logaddexp2(x, x * 2), lambda x: F.logsigmoid(x),
    lambda x: torch.nansum(torch.where(x > 1, float("nan"), x), 1), lambda x: torch.masked_select(x, x > 0),
    lambda x: torch.rsub(x, 2.5), lambda x: torch.rsub(x, x.t() if x.dim() == 2 else x, alpha=3),
    lambda x: torch.clamp(x, min=x.flip(0)), lambda x: torch.clamp(x, max=x.mean(0)),
    lambda x: F.adaptive_avg_pool2d(x.unsqueeze(0), (2, 3)), lambda x: F.adaptive_avg_pool2d(x, 1),
]


@pytest.mark.parametrize("fn", COMPOSED)
def test_composed_ops(fn):
    x = randn(4, 6, 7)
    check(fn(x), fn(x.to("tpu")))


def test_composed_factories_and_2d_losses():
    for start, end, steps in ((0, 1, 5), (-3.5, 10, 7), (2, 2, 1), (0, 1, 0)):
        check(torch.linspace(start, end, steps), torch.linspace(start, end, steps, device="tpu"))
        check(torch.logspace(start, end, steps, base=2), torch.logspace(start, end, steps, base=2, device="tpu"))
    check(torch.eye(3, 5), torch.eye(3, 5, device="tpu"))
    assert torch.equal(torch.ones(3, device="tpu"), torch.ones(3, device="tpu"))
    assert not torch.equal(torch.ones(3, device="tpu"), torch.zeros(3, device="tpu"))
    scores = randn(2, 4, 5, 6).log_softmax(1)
    target = torch.randint(0, 4, (2, 5, 6), generator=torch.Generator().manual_seed(0))
    target[0, 0, 0] = -100
    for reduction in ("mean", "sum", "none"):
        grads_match(lambda s: F.nll_loss(s, target.to(s.device), reduction=reduction), scores)
    x = randn(2, 3, 8, 8)
    y, idx = F.max_pool2d(x, 2, return_indices=True)
    check(F.max_unpool2d(y, idx, 2), F.max_unpool2d(y.to("tpu"), idx.to("tpu"), 2))
    grads_match(lambda v: F.adaptive_avg_pool2d(v, (3, 5)), x)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_regression_losses_and_bce(reduction):
    x, y = randn(4, 5), randn(4, 5, seed=1)
    grads_match(lambda a: F.mse_loss(a, y.to(a.device), reduction=reduction), x)
    grads_match(lambda a: F.smooth_l1_loss(a, y.to(a.device), reduction=reduction, beta=0.7), x)
    grads_match(lambda a: F.smooth_l1_loss(a, y.to(a.device), reduction=reduction, beta=0.0), x)
    p = torch.rand(4, 5, generator=torch.Generator().manual_seed(2)) * 0.98 + 0.01
    t = torch.rand(4, 5, generator=torch.Generator().manual_seed(3))
    w = torch.rand(5, generator=torch.Generator().manual_seed(4))
    grads_match(lambda a: F.binary_cross_entropy(a, t.to(a.device), reduction=reduction), p)
    grads_match(lambda a: F.binary_cross_entropy(a, t.to(a.device), weight=w.to(a.device), reduction=reduction), p)
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(torch.full((2,), 1.5, device="tpu"), torch.zeros(2, device="tpu"))


@pytest.mark.parametrize("poison", [None, float("inf"), float("nan")])
def test_grad_scaler_ops_match_cpu(poison):
    results = []
    for dev in ("cpu", "tpu"):
        grads = [randn(3, 4).to(dev), randn(5, seed=1).to(dev)]
        if poison is not None:
            grads[1][2] = poison
        found, inv = torch.zeros(1, device=dev), torch.full((1,), 0.25, device=dev)
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
        scale, tracker = torch.full((1,), 1024.0, device=dev), torch.full((1,), 1, dtype=torch.int32, device=dev)
        torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 2)
        results.append(grads + [found, scale, tracker])
    for c, t in zip(*results):
        check(c, t)
