"""The global CPU fallback: correct for functional, in-place and out=
variants and for views; warns once per op; counted; can be an error."""
import warnings

import pytest
import torch


def test_functional_inplace_out_and_views():
    x = torch.randn(4, 6)
    t = x.to("tpu")
    assert torch.allclose(torch.exp(t).cpu(), torch.exp(x))
    u = t.clone()
    u.exp_()
    assert torch.allclose(u.cpu(), torch.exp(x))
    out = torch.empty(0, device="tpu")
    torch.exp(t, out=out)
    assert torch.allclose(out.cpu(), torch.exp(x))
    base = x.clone().to("tpu")
    base[:, ::2].exp_()
    ref = x.clone()
    ref[:, ::2].exp_()
    assert torch.allclose(base.cpu(), ref)
    v = t.t()
    assert torch.allclose(torch.sigmoid(v).cpu(), torch.sigmoid(x.t()))
    vals, idx = torch.max(t, dim=1)
    rv, ri = torch.max(x, dim=1)
    assert torch.equal(vals.cpu(), rv) and torch.equal(idx.cpu(), ri)
    assert idx.device.type == "tpu"


def test_counted_and_warns_once():
    torch.tpu.reset_fallback_stats()
    t = torch.randn(5, device="tpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.special.bessel_j0(t)
        torch.special.bessel_j0(t)
        torch.special.bessel_j0(t)
    # the functional op reaches the device as its out= form
    assert torch.tpu.fallback_stats()["aten::special_bessel_j0.out"] == 3
    assert sum("aten::special_bessel_j0" in str(w.message) for w in caught) <= 1


def test_error_mode():
    t = torch.randn(5, device="tpu")
    torch.tpu.set_fallback_error(True)
    try:
        with pytest.raises(NotImplementedError, match="aten::special_bessel_j0"):
            torch.special.bessel_j0(t)
    finally:
        torch.tpu.set_fallback_error(False)
    assert torch.allclose(torch.special.bessel_j0(t).cpu(), torch.special.bessel_j0(t.cpu()))


def test_error_mode_from_environment():
    from conftest import run_python

    r = run_python(
        """
        import torch
        t = torch.ones(3, device="tpu")
        print((t + t).sum().item())
        try:
            torch.special.bessel_j1(t)
        except NotImplementedError as e:
            print("refused", "aten::special_bessel_j1" in str(e))
        """,
        {"TORCH_TPU_FALLBACK": "error"},
    )
    assert r.stdout.split() == ["6.0", "refused", "True"], r.stderr


def test_model_forward_backward_with_fallbacks():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    x = torch.randn(4, 8)
    ref = model(x).sum()
    ref.backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.tpu()
    y = model(x.tpu()).sum()
    y.backward()
    assert torch.allclose(y.cpu(), ref, atol=1e-5)
    for p, g in zip(model.parameters(), ref_grads):
        assert p.grad.device.type == "tpu"
        assert torch.allclose(p.grad.cpu(), g, atol=1e-5)


@pytest.mark.parametrize(
    "make",
    [lambda: torch.nn.Conv2d(3, 8, 3, padding=1, stride=2), lambda: torch.nn.Conv1d(4, 6, 5, groups=2),
     lambda: torch.nn.ConvTranspose2d(3, 5, 3, stride=2), lambda: torch.nn.Conv3d(2, 4, 3, bias=False)],
)
def test_convolutions_forward_backward(make):
    # PyTorch sends convolutions on unknown backends to ops with no CPU
    # kernel. 1-d and 2-d ones are native; transposed and 3-d ones must
    # still run (through the counted fallback) and match.
    torch.manual_seed(0)
    mod = make()
    nd = mod.weight.dim() - 2
    x = torch.randn(2, mod.in_channels, *([7] * nd), requires_grad=True)
    mod(x).square().sum().backward()
    ref = [x.grad] + [p.grad for p in mod.parameters()]
    mod.zero_grad()
    torch.tpu.reset_fallback_stats()
    xt = x.detach().to("tpu").requires_grad_()
    mod.to("tpu")
    y = mod(xt)
    y.square().sum().backward()
    got = [xt.grad] + [p.grad for p in mod.parameters()]
    for g, r in zip(got, ref):
        assert g.device.type == "tpu"
        torch.testing.assert_close(g.cpu(), r, rtol=1e-4, atol=1e-4)
    native = not mod.transposed and nd <= 2
    assert torch.tpu.fallback_stats().get("aten::convolution", 0) == (0 if native else 1)


def test_batch_norm_updates_running_statistics():
    # native_batch_norm writes its running statistics without saying so in
    # its schema; the tpu must still update them like the CPU backend.
    torch.manual_seed(0)
    x = torch.randn(6, 4, 5, 5)
    ref = torch.nn.BatchNorm2d(4)
    bn = torch.nn.BatchNorm2d(4).to("tpu")
    for _ in range(2):
        torch.testing.assert_close(bn(x.to("tpu")).cpu(), ref(x), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(bn.running_mean.cpu(), ref.running_mean)
    torch.testing.assert_close(bn.running_var.cpu(), ref.running_var)
    assert bn.num_batches_tracked.item() == 2
    bn.eval(), ref.eval()
    torch.testing.assert_close(bn(x.to("tpu")).cpu(), ref(x), rtol=1e-4, atol=1e-5)
    free = torch.nn.BatchNorm1d(4, track_running_stats=False)
    torch.testing.assert_close(free.to("tpu")(x[:, :, 0, 0].to("tpu")).cpu(), free.cpu()(x[:, :, 0, 0]),
                               rtol=1e-4, atol=1e-5)


def test_reductions_past_the_record_rank_fall_back():
    # Records describe at most 12 dims: sum, mean, var, std and their
    # _mean and out= forms of a 13-dim tensor run on the CPU fallback.
    x = torch.randn([2] * 13, dtype=torch.float64)
    t = x.to("tpu")
    for fn in (lambda v: v.sum(0), lambda v: v.mean((1, 2)), lambda v: v.var(0), lambda v: v.std(3),
               lambda v: torch.var_mean(v, 1)[0], lambda v: torch.std_mean(v, 2)[1]):
        torch.testing.assert_close(fn(t).cpu(), fn(x))
    out = torch.empty(0, dtype=torch.float64, device="tpu")
    torch.var(t, 4, out=out)
    torch.testing.assert_close(out.cpu(), torch.var(x, 4))
