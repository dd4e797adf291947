"""The special functions (lgamma, digamma, polygamma, the Bessel functions
i0/i1), the shrink and logit activations, hypot / heaviside / xlog1py, the
reducing scatters (scatter_reduce, index_add / index_copy / index_fill /
index_reduce, take / put_), cummax / cummin / logcumsumexp, average
pooling, and the composed glu, prelu, Huber loss, trace, count_nonzero,
aminmax and angle, against PyTorch's CPU backend with the CPU fallback
turned into an error, so that every op here runs natively."""
import pytest
import torch
import torch.nn.functional as F

TOL = {torch.float32: (2e-6, 2e-5), torch.float64: (1e-12, 1e-12),
       torch.bfloat16: (1.6e-2, 2e-2), torch.float16: (2e-3, 2e-3)}
FLOATS = [torch.float32, torch.float64, torch.bfloat16]


# Every test here runs with the CPU fallback turned into an error (conftest).
pytestmark = pytest.mark.usefixtures("native_only")


def randn(*shape, dtype=torch.float32, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def tpu(x):
    return x.to("tpu") if isinstance(x, torch.Tensor) else x


def check(cpu, got, rtol=None, atol=None):
    if isinstance(cpu, (tuple, list)):
        for c, g in zip(cpu, got):
            check(c, g, rtol, atol)
        return
    assert got.device.type == "tpu"
    assert got.dtype == cpu.dtype and got.shape == cpu.shape
    r, a = TOL.get(cpu.dtype, (0, 0))
    torch.testing.assert_close(got.cpu(), cpu, rtol=r if rtol is None else rtol, atol=a if atol is None else atol,
                               equal_nan=True)


def same(fn, *args, rtol=None, atol=None, **kwargs):
    check(fn(*args, **kwargs), fn(*[tpu(a) for a in args], **{k: tpu(v) for k, v in kwargs.items()}), rtol, atol)


SPECIAL_VALUES = torch.tensor([0.0, -0.0, 1.0, 2.0, -1.0, -2.5, 0.5, 1e-3, 30.0, -30.5, float("inf"),
                               float("-inf"), float("nan")], dtype=torch.float64)

UNARY = [torch.lgamma, torch.digamma, torch.i0, torch.special.i0e, torch.special.i1, torch.special.i1e,
         torch.sinc, torch.special.entr, torch.signbit]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("fn", UNARY, ids=lambda f: f.__name__)
def test_special_unary(fn, dtype):
    """Random values and the special ones (poles, zeros, +-inf, NaN, -0).
    The tpu computes in f64 and rounds once; the CPU computes float32 in
    float32, so the float32 tolerance is relative 1e-5."""
    x = torch.cat([randn(40, scale=4), SPECIAL_VALUES]).to(dtype)
    rtol = 1e-5 if dtype == torch.float32 else None
    same(fn, x, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_polygamma_and_mvlgamma(n):
    x = torch.cat([randn(30, scale=3), torch.tensor([0.25, 1.0, 7.5, 40.0], dtype=torch.float64)])
    same(torch.polygamma, n, x, rtol=1e-9, atol=1e-9)
    same(torch.polygamma, n, x.float(), rtol=1e-4, atol=1e-4)
    same(torch.mvlgamma, x.abs() + 3, p=n + 1, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("dtype", FLOATS)
def test_shrink_and_logit_with_backward(dtype):
    x = torch.cat([randn(50), torch.tensor([0.5, -0.5, 0.0, float("nan")], dtype=torch.float64)]).to(dtype)
    p = torch.rand(50, generator=torch.Generator().manual_seed(3), dtype=torch.float64).to(dtype)
    for fn, arg, kw in [(F.hardshrink, x, {"lambd": 0.5}), (F.softshrink, x, {"lambd": 0.5}),
                        (torch.logit, p, {}), (torch.logit, p, {"eps": 0.2})]:
        a, b = arg.clone().requires_grad_(), tpu(arg).requires_grad_()
        ya, yb = fn(a, **kw), fn(b, **kw)
        check(ya.detach(), yb.detach())
        g = randn(*arg.shape, seed=4).to(dtype)
        ya.backward(g)
        yb.backward(tpu(g))
        check(a.grad, b.grad)


@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_specials(dtype):
    a, b = randn(6, 7, dtype=dtype), randn(7, dtype=dtype, seed=1)
    same(torch.hypot, a, b)
    same(torch.special.xlog1py, a, b.abs())
    same(torch.heaviside, torch.tensor([-1.0, 0.0, 2.0, float("nan"), 0.0]).to(dtype),
         torch.tensor([5.0, 6.0, 7.0, 8.0, float("nan")]).to(dtype))


def test_heaviside_integers_and_bool():
    same(torch.heaviside, torch.tensor([-3, 0, 4]), torch.tensor([7, 8, 9]))
    same(torch.heaviside, torch.tensor([True, False]), torch.tensor([False, True]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_small_reductions(dtype):
    x = randn(5, 6, scale=3).to(dtype)
    same(torch.trace, x)
    same(torch.count_nonzero, (x > 0).to(dtype), dim=(0, 1))
    same(torch.count_nonzero, x, dim=1)
    same(torch.aminmax, x)
    same(torch.aminmax, x, dim=0, keepdim=True)
    same(torch.aminmax, x, dim=-1)
    with pytest.raises(RuntimeError, match="trace: expected a matrix"):
        torch.trace(tpu(x[0]))
    with pytest.raises(RuntimeError, match="aminmax"):
        torch.aminmax(torch.empty(0, device="tpu"))


def test_angle():
    same(torch.angle, torch.tensor([-1.5, 0.0, -0.0, 2.0, float("nan"), float("-inf")]))
    same(torch.angle, torch.tensor([-1.5, 2.0], dtype=torch.float64))
    same(torch.angle, torch.tensor([-3, 0, 5]))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_scatter_reduce(reduce, include_self, dtype):
    g = torch.Generator().manual_seed(7)
    x = randn(6, 5, scale=3).to(dtype)
    index = torch.randint(0, 6, (8, 5), generator=g)
    src = randn(8, 5, seed=2, scale=3).to(dtype)
    same(torch.scatter_reduce, x, 0, index, src, reduce, include_self=include_self)
    same(torch.scatter_reduce, x, 1, index[:6, :3] % 5, src, reduce, include_self=include_self)


def test_scatter_reduce_nan_wins_amax_and_bad_index():
    x = torch.zeros(3)
    src = torch.tensor([1.0, float("nan"), 5.0])
    same(torch.scatter_reduce, x, 0, torch.tensor([0, 0, 1]), src, "amax")
    same(torch.scatter_reduce, x, 0, torch.tensor([0, 0, 1]), src, "amin", include_self=False)
    with pytest.raises(IndexError):
        torch.scatter_reduce(tpu(x), 0, tpu(torch.tensor([0, 3, 1])), tpu(src), "prod")
        torch.tpu.synchronize()


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
def test_scatter_with_reduce_argument():
    x, index, src = randn(4, 3), torch.tensor([[0, 1, 3], [3, 3, 0]]), randn(2, 3, seed=1)
    same(lambda a, i, s: a.scatter(0, i, s, reduce="add"), x, index, src)
    same(lambda a, i, s: a.scatter(0, i, s, reduce="multiply"), x, index, src)
    same(lambda a, i: a.scatter(0, i, 2.5, reduce="multiply"), x, index)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.bool])
def test_index_add_copy_fill(dtype):
    x = randn(5, 4, scale=3).to(dtype)
    src = randn(3, 4, seed=1, scale=3).to(dtype)
    index = torch.tensor([4, 0, 4])
    if dtype != torch.bool:
        same(torch.index_add, x, 0, index, src)
        same(torch.index_add, x, 0, index, src, alpha=2)
        same(torch.index_add, x.t(), 1, index, src.t())
    same(torch.index_copy, x, 0, torch.tensor([4, 0, 2]), src)
    same(torch.index_fill, x, 1, torch.tensor([0, -1]), 1)
    same(torch.index_fill, x, 0, torch.tensor([2]), torch.tensor(1).to(dtype))


def test_index_ops_bad_inputs():
    x = tpu(torch.zeros(5, 4))
    with pytest.raises(RuntimeError, match="same scalar type"):
        x.index_add(0, tpu(torch.tensor([0])), tpu(torch.ones(1, 4, dtype=torch.float64)))
    with pytest.raises(RuntimeError, match="Number of indices"):
        x.index_add(0, tpu(torch.tensor([0, 1])), tpu(torch.ones(1, 4)))
    with pytest.raises(IndexError):
        x.index_add(0, tpu(torch.tensor([9])), tpu(torch.ones(1, 4)))
        torch.tpu.synchronize()


@pytest.mark.filterwarnings("ignore:index_reduce\\(\\) is in beta")
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(reduce, include_self):
    x, src = randn(5, 4), randn(3, 4, seed=1)
    same(torch.index_reduce, x, 0, torch.tensor([4, 0, 4]), src, reduce, include_self=include_self)
    same(torch.index_reduce, x, 1, torch.tensor([3, 3]), randn(5, 2, seed=2), reduce, include_self=include_self)


def test_take_and_put():
    x = randn(4, 5)
    index = torch.tensor([[0, -1], [7, 19]])
    same(torch.take, x, index)
    same(torch.take, x.t(), index)
    for accumulate in (False, True):
        same(lambda a, i, s: a.clone().put_(i, s, accumulate=accumulate), x, torch.tensor([0, 0, -2]),
             torch.tensor([1.0, 2.0, 3.0]))
        same(lambda a, i, s: a.t().clone(memory_format=torch.preserve_format).t().put_(i, s, accumulate=accumulate),
             x, torch.tensor([3, 1]), torch.tensor([1.0, 2.0]))
    with pytest.raises(IndexError):
        torch.take(tpu(x), tpu(torch.tensor([20])))
        torch.tpu.synchronize()


def test_masks_over_more_dims_than_a_record_indexes():
    # A 5-d or 6-d mask is one index tensor per dim in PyTorch's indexing,
    # more than a record takes: the glue merges the masked dims.
    x = randn(2, 1, 3, 1, 4)
    same(lambda a: a[a > 0], x)
    same(lambda a: torch.masked_select(a, a > 0), x)
    y = randn(2, 3, 2, 2, 2, 3).transpose(0, 2)
    same(lambda a: a[a > 0], y)
    z = randn(3, 2, 1, 3, 1, 4, 2)
    mask = randn(2, 1, 3, 1, 4) > 0
    same(lambda a, m: a[:, m], z, mask)
    with pytest.raises(IndexError, match="does not match"):
        tpu(randn(2, 3, 2, 2, 2))[tpu(torch.ones(2, 2, 2, 2, 2, dtype=torch.bool))]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool, torch.bfloat16])
@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin], ids=["cummax", "cummin"])
def test_cummax_cummin(fn, dtype):
    x = (randn(4, 9, scale=2).round()).to(dtype)  # rounded: ties, whose latest position wins
    same(fn, x, 1)
    same(fn, x, 0)
    same(fn, x.t(), 1)
    if dtype.is_floating_point:
        same(fn, torch.tensor([1.0, float("nan"), 3.0, float("nan"), 0.0]).to(dtype), 0)


def test_cummax_backward_and_logcumsumexp():
    a = randn(3, 6).requires_grad_()
    b = tpu(a.detach()).requires_grad_()
    torch.cummax(a, 1)[0].sum().backward()
    torch.cummax(b, 1)[0].sum().backward()
    check(a.grad, b.grad)
    for dtype in FLOATS:
        x = randn(3, 7, scale=5).to(dtype)
        same(torch.logcumsumexp, x, 1)
        same(torch.logcumsumexp, x, 0)
    same(torch.logcumsumexp, torch.tensor([float("-inf"), 0.0, float("inf"), 1.0]), 0)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("args", [dict(kernel_size=3, stride=2, padding=1),
                                  dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
                                  dict(kernel_size=(2, 3), stride=(1, 2)),
                                  dict(kernel_size=2, divisor_override=3)])
def test_avg_pool2d_forward_backward(dtype, args):
    x = randn(2, 3, 9, 8, dtype=dtype)
    a, b = x.clone().requires_grad_(), tpu(x).requires_grad_()
    ya, yb = F.avg_pool2d(a, **args), F.avg_pool2d(b, **args)
    check(ya.detach(), yb.detach())
    g = randn(*ya.shape, seed=5, dtype=dtype)
    ya.backward(g)
    yb.backward(tpu(g))
    check(a.grad, b.grad)


def test_avg_pool_unbatched_1d_and_channels_last():
    same(F.avg_pool2d, randn(3, 7, 7), 2)
    same(F.avg_pool1d, randn(2, 3, 10), 3, 2, 1)
    same(F.avg_pool2d, randn(2, 3, 6, 6).to(memory_format=torch.channels_last), 2)


@pytest.mark.parametrize("dtype", FLOATS)
def test_glu_prelu_huber_with_backward(dtype):
    x, t = randn(4, 6, dtype=dtype), randn(4, 6, dtype=dtype, seed=1)
    w = torch.rand(6, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(dtype)
    for fn, args in [(lambda v: F.glu(v, 1), [x]), (lambda v: F.glu(v, 0), [x]),
                     (lambda v, ww: F.prelu(v, ww), [x, w]),
                     (lambda v: F.huber_loss(v, tpu(t) if v.device.type == "tpu" else t, delta=0.7), [x]),
                     (lambda v: F.huber_loss(v, tpu(t) if v.device.type == "tpu" else t, reduction="none"), [x])]:
        cpu = [a.clone().requires_grad_() for a in args]
        dev = [tpu(a).requires_grad_() for a in args]
        ya, yb = fn(*cpu), fn(*dev)
        check(ya.detach(), yb.detach())
        g = randn(*ya.shape, seed=6, dtype=dtype)
        ya.backward(g)
        yb.backward(tpu(g))
        for a, b in zip(cpu, dev):
            check(a.grad, b.grad)
    with pytest.raises(RuntimeError, match="Halving dimension must be even"):
        F.glu(tpu(randn(3, 5)), 1)


# ------------------------------------------------------------ random

def test_randperm_is_a_permutation_and_seeded():
    for n, dtype in [(0, torch.int64), (1, torch.int64), (1000, torch.int64), (37, torch.int32), (50, torch.float32)]:
        torch.tpu.manual_seed(5)
        a = torch.randperm(n, device="tpu", dtype=dtype)
        torch.tpu.manual_seed(5)
        b = torch.randperm(n, device="tpu", dtype=dtype)
        assert a.dtype == dtype and a.device.type == "tpu"
        assert torch.equal(a.cpu(), b.cpu())
        assert torch.equal(a.cpu().sort().values, torch.arange(n, dtype=dtype))
    with pytest.raises(RuntimeError, match="n is too large"):
        torch.randperm(300, device="tpu", dtype=torch.int8)


def test_multinomial_distribution_and_seed():
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.25, 0.25, 0.25, 0.25]])
    torch.tpu.manual_seed(1)
    draws = torch.multinomial(tpu(probs), 20000, replacement=True)
    assert draws.dtype == torch.int64 and draws.shape == (2, 20000)
    freq = torch.stack([torch.bincount(r, minlength=4) for r in draws.cpu()]).double() / 20000
    torch.testing.assert_close(freq, probs.double(), atol=0.015, rtol=0)  # 4 sigma at n = 20000
    assert (draws[0].cpu() != 1).all()  # a zero-probability category is never drawn
    torch.tpu.manual_seed(1)
    again = torch.multinomial(tpu(probs), 20000, replacement=True)
    assert torch.equal(draws.cpu(), again.cpu())


def test_multinomial_without_replacement():
    probs = torch.tensor([0.5, 0.0, 0.2, 0.3])
    counts = torch.zeros(4)
    for seed in range(300):
        torch.tpu.manual_seed(seed)
        s = torch.multinomial(tpu(probs), 3).cpu()
        assert sorted(s.tolist()) == [0, 2, 3]  # distinct, and never the zero-probability one
        counts[s[0]] += 1
    # The first pick follows the probabilities.
    torch.testing.assert_close(counts / 300, probs, atol=0.1, rtol=0)
    with pytest.raises(RuntimeError, match="without replacement"):
        torch.multinomial(tpu(probs), 5)
    with pytest.raises(RuntimeError, match="probability tensor contains"):
        torch.multinomial(tpu(torch.tensor([0.5, -0.1])), 1)


# --------------------------------------------------------- optimizers

@pytest.mark.parametrize("opt", ["Adam", "AdamW"])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_adam_matches_cpu(opt, amsgrad, dtype):
    """torch.optim's fused=True path (_fused_adam(w)_) against the CPU's
    own fused kernel, over a few steps with weight decay."""
    g = torch.Generator().manual_seed(0)
    shapes = [(4, 3), (5,), (2, 2, 2)]
    params = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    grads = [[torch.randn(s, generator=g).to(dtype) for s in shapes] for _ in range(3)]
    results = []
    for dev in ("cpu", "tpu"):
        ps = [torch.nn.Parameter(p.clone().to(dev)) for p in params]
        o = getattr(torch.optim, opt)(ps, lr=0.01, weight_decay=0.1, amsgrad=amsgrad, fused=True)
        for step_grads in grads:
            for p, gr in zip(ps, step_grads):
                p.grad = gr.to(dev)
            o.step()
        results.append([p.detach().cpu() for p in ps] + [o.state[p]["exp_avg_sq"].cpu() for p in ps])
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-2)
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, **tol)


def test_fused_adamw_with_grad_scaler_skips_inf_steps():
    model_cpu = torch.nn.Linear(4, 2)
    model_tpu = torch.nn.Linear(4, 2).to("tpu")
    model_tpu.load_state_dict(model_cpu.state_dict())
    x = torch.randn(8, 4)
    for model, dev in ((model_cpu, "cpu"), (model_tpu, "tpu")):
        o = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
        scaler = torch.amp.GradScaler(dev, init_scale=2.0 ** 10)
        for step in range(3):
            o.zero_grad()
            loss = model(x.to(dev)).sum() * (float("inf") if step == 1 else 1.0)
            scaler.scale(loss).backward()
            scaler.step(o)
            scaler.update()
    for a, b in zip(model_cpu.parameters(), model_tpu.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)


# --------------------------------------------------- unique, bincount

@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16])
def test_unique_and_unique_consecutive(dtype):
    x = torch.tensor([[3, 1, 2, 3], [1, 1, 0, 2]]).to(dtype)
    for kw in [{}, {"return_inverse": True}, {"return_counts": True}, {"return_inverse": True, "return_counts": True}]:
        same(torch.unique, x, **kw)
        same(torch.unique, x, sorted=False, **kw)
        same(torch.unique_consecutive, x, **kw)
        same(torch.unique, x[:0], **kw)
    same(torch.unique, torch.tensor([1.0, float("nan"), 1.0, float("nan")]), return_counts=True)


def test_bincount():
    x = torch.tensor([4, 1, 1, 0, 4, 4])
    same(torch.bincount, x)
    same(torch.bincount, x, minlength=8)
    same(torch.bincount, x[:0], minlength=3)
    same(torch.bincount, x, torch.tensor([0.5, 1, 2, 3, 4, 5]))
    same(torch.bincount, x, torch.tensor([0.5, 1, 2, 3, 4, 5], dtype=torch.float64))
    same(torch.bincount, x.to(torch.uint8), torch.tensor([1, 2, 3, 4, 5, 6]))
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(tpu(torch.tensor([1, -1])))


# ------------------------------------------------ searchsorted, bucketize

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.bfloat16])
def test_searchsorted_and_bucketize(dtype):
    g = torch.Generator().manual_seed(3)
    bd = torch.randint(-10, 10, (3, 7), generator=g).sort(-1).values.to(dtype)
    vals = torch.randint(-12, 12, (3, 5), generator=g).to(dtype)
    for kw in [{}, {"right": True}, {"side": "right"}, {"out_int32": True}]:
        same(torch.searchsorted, bd, vals, **kw)
        same(torch.searchsorted, bd[0], vals, **kw)       # 1-d boundaries for every row
        same(torch.searchsorted, bd[0], vals[0, 0].item(), **kw)  # a scalar value
        same(torch.bucketize, vals, bd[0], **{k: v for k, v in kw.items() if k != "side"})
    perm = torch.randperm(7, generator=g)
    same(torch.searchsorted, bd[0][perm], vals, sorter=perm.argsort())
    if dtype.is_floating_point:
        same(torch.searchsorted, bd[0], torch.tensor([float("nan"), float("inf"), -float("inf")]).to(dtype))
    with pytest.raises(RuntimeError, match="boundaries tensor should be 1 dimension"):
        torch.searchsorted(tpu(bd[:2]), tpu(vals))


# ------------------------------------------------ adversarial regressions

def test_take_and_put_wrap_negative_indices_once():
    x = torch.zeros(5, device="tpu")
    with pytest.raises(IndexError, match="-7"):
        x.put_(tpu(torch.tensor([-7])), tpu(torch.tensor([9.0])))
        torch.tpu.synchronize()
    with pytest.raises(IndexError, match="-13"):
        torch.take(tpu(torch.zeros(3, 4)), tpu(torch.tensor([-13])))
        torch.tpu.synchronize()


def test_multinomial_edge_cases_as_cpu():
    with pytest.raises(RuntimeError, match="invalid multinomial distribution"):
        torch.multinomial(torch.zeros(2, 0, device="tpu"), 3, True)
    torch.tpu.manual_seed(0)
    s = torch.multinomial(tpu(torch.tensor([0.5, 0.0, 0.5, 0.0])), 4).cpu()
    assert sorted(s.tolist()) == [0, 1, 2, 3] and sorted(s[:2].tolist()) == [0, 2]
    assert torch.randperm(2049, device="tpu", dtype=torch.bfloat16).shape == (2049,)


def test_empty_group_norm_bool_index_add_and_signbit():
    same(lambda v: F.group_norm(v, 3), torch.randn(0, 6, 3))
    x, src = torch.tensor([True, False, False]), torch.tensor([True, True])
    same(torch.index_add, x, 0, torch.tensor([1, 2]), src, alpha=2)
    same(torch.signbit, torch.tensor([True, False]))
    same(lambda v: torch.mvlgamma(v, 2, out=torch.empty_like(v)), torch.tensor([3.0, 4.5]))


def test_addr_alpha_zero_keeps_nan_and_fused_adamw_keeps_inf():
    same(torch.addr, torch.zeros(2, 2), torch.tensor([float("nan"), 1.0]), torch.ones(2), alpha=0)
    for dev in ("cpu", "tpu"):
        p = torch.nn.Parameter(torch.tensor([float("inf"), 1.0], device=dev))
        p.grad = torch.ones(2, device=dev)
        torch.optim.AdamW([p], lr=0.1, weight_decay=0.01, fused=True).step()
        if dev == "cpu":
            want = p.detach().clone()
        else:
            torch.testing.assert_close(p.detach().cpu(), want)


def test_dtypes_the_cpu_refuses_are_refused():
    """Integer glu / prelu / Huber, int32 average pooling, bool trace and
    bool index_reduce: the CPU kernels have no loop for them, nor does tpu."""
    i64 = torch.ones(2, 4, dtype=torch.long, device="tpu")
    for call in [lambda: F.glu(i64), lambda: F.prelu(i64, i64[0, :1]), lambda: F.huber_loss(i64, i64),
                 lambda: F.avg_pool2d(torch.ones(1, 1, 4, 4, dtype=torch.int, device="tpu"), 2),
                 lambda: torch.trace(torch.ones(2, 2, dtype=torch.bool, device="tpu")),
                 lambda: torch.ones(3, dtype=torch.bool, device="tpu").index_reduce(
                     0, tpu(torch.tensor([0])), torch.ones(1, dtype=torch.bool, device="tpu"), "amax")]:
        with pytest.raises(NotImplementedError, match="not implemented for"):
            call()
    same(F.avg_pool2d, torch.arange(16).view(1, 1, 4, 4), 2)  # int64 is taken, as on CPU


# ------------------------------------------------------------- padding

@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_reflect_and_replicate_padding_with_backward(mode, dtype):
    for shape, pad in [((2, 3, 7), (2, 3)), ((3, 7), (1, 0)), ((2, 3, 5, 6), (1, 2, 3, 0)), ((3, 5, 6), (2, 2, 1, 1)),
                       ((1, 2, 3, 4, 5), (1, 1, 2, 0, 1, 2)), ((2, 3, 8), (-2, 1)), ((2, 3, 5, 6), (0, -1, -2, 2))]:
        x = randn(*shape, dtype=dtype)
        a, b = x.clone().requires_grad_(), tpu(x).requires_grad_()
        ya, yb = F.pad(a, pad, mode=mode), F.pad(b, pad, mode=mode)
        check(ya.detach(), yb.detach())
        g = randn(*ya.shape, seed=9, dtype=dtype)
        ya.backward(g)
        yb.backward(tpu(g))
        check(a.grad, b.grad, atol=5e-2 if dtype == torch.bfloat16 else None)
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        F.pad(tpu(randn(2, 3, 4)), (4, 0), mode="reflect")
