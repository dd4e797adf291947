"""Creation, copies in every direction, views, and tensor plumbing,
compared with PyTorch's CPU backend."""
import pytest
import torch

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.uint8, torch.bool]


def sample(dtype, shape=(3, 5)):
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 10).to(dtype)
    return torch.randint(0, 100, shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_roundtrip_every_dtype(dtype, mode):
    x = sample(dtype)
    y = x.to("tpu")
    assert y.dtype == dtype and y.device.type == "tpu"
    assert torch.equal(y.cpu(), x)


@pytest.mark.parametrize("src", DTYPES)
@pytest.mark.parametrize("dst", [torch.float32, torch.bfloat16, torch.int32, torch.bool, torch.float16])
def test_dtype_conversion_matches_cpu(src, dst, native_only):
    x = sample(src)
    assert torch.equal(x.to("tpu").to(dst).cpu(), x.to(dst))
    assert torch.equal(x.to("tpu", dtype=dst).cpu(), x.to(dst))


def test_non_contiguous_both_sides(mode):
    x = torch.randn(6, 8)
    src = x.t()[::2]
    y = src.to("tpu")
    assert torch.equal(y.cpu(), src)
    dst = torch.zeros(8, 6, device="tpu").t()
    dst.copy_(x)
    assert torch.equal(dst.cpu(), x)
    host = torch.zeros(8, 6).t()
    host.copy_(dst)
    assert torch.equal(host, x)
    z = torch.zeros(3, 8, device="tpu")
    z[:, ::2].copy_(torch.ones(3, 4))
    assert torch.equal(z.cpu()[:, ::2], torch.ones(3, 4))
    assert torch.equal(z.cpu()[:, 1::2], torch.zeros(3, 4))


def test_broadcasting_copy(native_only):
    dst = torch.empty(4, 3, device="tpu")
    dst.copy_(torch.tensor([1.0, 2.0, 3.0]))
    assert torch.equal(dst.cpu(), torch.tensor([1.0, 2.0, 3.0]).expand(4, 3))


def test_between_chips(mode):
    x = torch.randn(100, 7)
    a = x.to("tpu:0")
    b = a.to("tpu:1")
    assert b.device == torch.device("tpu:1")
    assert torch.equal(b.cpu(), x)
    c = torch.empty(7, 100, device="tpu:0").t()
    c.copy_(b)
    assert torch.equal(c.cpu(), x)
    with pytest.raises(RuntimeError, match="same device"):
        a + b


def test_creation_functions_match_cpu():
    assert torch.equal(torch.zeros(2, 3, device="tpu").cpu(), torch.zeros(2, 3))
    assert torch.equal(torch.ones(2, 3, dtype=torch.int64, device="tpu").cpu(), torch.ones(2, 3, dtype=torch.int64))
    assert torch.equal(torch.full((2, 2), 7.5, device="tpu").cpu(), torch.full((2, 2), 7.5))
    assert torch.equal(torch.arange(10, device="tpu").cpu(), torch.arange(10))
    assert torch.equal(torch.arange(0, 1, 0.25, device="tpu").cpu(), torch.arange(0, 1, 0.25))
    assert torch.allclose(torch.linspace(0, 1, 7, device="tpu").cpu(), torch.linspace(0, 1, 7))
    assert torch.equal(torch.eye(3, device="tpu").cpu(), torch.eye(3))
    assert torch.equal(torch.tensor([[1, 2], [3, 4]], device="tpu").cpu(), torch.tensor([[1, 2], [3, 4]]))
    x = torch.randn(3, 4, device="tpu")
    for like in (torch.zeros_like, torch.ones_like, torch.empty_like):
        y = like(x)
        assert y.shape == x.shape and y.device == x.device and y.dtype == x.dtype
    assert torch.equal(torch.full_like(x, 2).cpu(), torch.full((3, 4), 2.0))
    e = torch.empty_strided((2, 3), (1, 2), device="tpu")
    assert e.stride() == (1, 2)


def test_views_share_memory_and_match_cpu(native_only):
    base_cpu = torch.arange(24.0).reshape(2, 3, 4)
    base = base_cpu.to("tpu")
    views = [
        lambda t: t.view(6, 4),
        lambda t: t.reshape(4, 6),
        lambda t: t.transpose(0, 2),
        lambda t: t.permute(2, 0, 1),
        lambda t: t.narrow(2, 1, 2),
        lambda t: t[:, ::2, 1::2],
        lambda t: t.select(1, 2),
        lambda t: t[0].unsqueeze(0).expand(5, 3, 4),
        lambda t: t.as_strided((3, 2), (1, 4), 2),
        lambda t: t.unsqueeze(1).squeeze(1),
        lambda t: t.reshape(24).unfold(0, 5, 3),
        lambda t: t[1].diagonal(),
        lambda t: t.flatten(),
        lambda t: t.unbind(0)[1],
        lambda t: t.split(2, dim=2)[1],
        lambda t: t.chunk(3, dim=1)[2],
        lambda t: t.movedim(0, -1),
        lambda t: t.view(torch.int32),
    ]
    for make in views:
        v = make(base)
        assert v.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
        assert torch.equal(v.cpu(), make(base_cpu))
    v = base[:, 1]
    v.fill_(-1)
    assert (base.cpu()[:, 1] == -1).all()
    base_cpu[:, 1] = -1
    assert torch.equal(base.cpu(), base_cpu)


def test_fill_zero_clone_contiguous(mode, native_only):
    x = torch.empty(4, 5, device="tpu")
    x.fill_(3)
    assert torch.equal(x.cpu(), torch.full((4, 5), 3.0))
    x.zero_()
    assert torch.equal(x.cpu(), torch.zeros(4, 5))
    y = torch.randn(4, 5).to("tpu")
    t = y.t()
    assert not t.is_contiguous()
    c = t.contiguous()
    assert c.is_contiguous() and torch.equal(c.cpu(), y.cpu().t())
    k = y.clone()
    assert k.data_ptr() != y.data_ptr() and torch.equal(k.cpu(), y.cpu())
    b = torch.zeros(3, dtype=torch.bool, device="tpu").fill_(True)
    assert b.cpu().tolist() == [True, True, True]


def test_resize_and_set(native_only):
    x = torch.arange(6.0).to("tpu")
    x.resize_(2, 3)
    assert x.shape == (2, 3) and torch.equal(x.cpu(), torch.arange(6.0).reshape(2, 3))
    x.resize_(4, 4)
    assert x.shape == (4, 4)
    assert torch.equal(x.cpu().flatten()[:6], torch.arange(6.0))
    y = torch.empty(0, device="tpu")
    y.set_(x)
    assert y.data_ptr() == x.data_ptr() and y.shape == x.shape
    z = torch.empty(0, device="tpu")
    z.set_(x.untyped_storage(), 2, (2, 2), (1, 2))
    assert torch.equal(z.cpu(), x.cpu().flatten().as_strided((2, 2), (1, 2), 2))


def test_item_tolist_and_printing():
    x = torch.tensor([1.5, -2.0, 3.25], device="tpu")
    assert x[1].item() == -2.0
    assert x.tolist() == [1.5, -2.0, 3.25]
    text = repr(x)
    assert "device='tpu:0'" in text and "1.5000" in text and "3.2500" in text
    assert "tpu:0" in str(torch.zeros(2, 2, dtype=torch.int32, device="tpu"))


def test_zero_size_and_scalar_tensors(native_only):
    e = torch.empty(0, 3, device="tpu")
    assert e.cpu().shape == (0, 3)
    s = torch.tensor(4.0).to("tpu")
    assert s.dim() == 0 and s.item() == 4.0
    assert (s + s).item() == 8.0


def test_copies_of_more_dims_than_a_record_holds(mode, native_only):
    # 13 and 14 dims whose strides do not merge: copies split them into
    # slices instead of failing (every other op depends on copies).
    x = torch.randn([2] * 14, generator=torch.Generator().manual_seed(1))
    rev = list(reversed(range(14)))
    src = x.permute(rev)
    assert torch.equal(src.to("tpu").cpu(), src)
    t = x.to("tpu")
    assert torch.equal(t.permute(rev).cpu(), src)
    assert torch.equal(t.permute(rev).contiguous().cpu(), src.contiguous())
    assert torch.equal(t.permute(rev).to("tpu:1").cpu(), src)
    pinned = src.pin_memory().to("tpu", non_blocking=True)
    assert torch.equal(pinned.cpu(), src)
    y = torch.randn([2] * 13).permute(list(reversed(range(13))))
    assert torch.equal(y.to("tpu").cpu(), y)


def test_fill_and_zero_on_more_dims_and_expanded(mode, native_only):
    t = torch.zeros([2] * 13, device="tpu").permute(list(reversed(range(13))))
    t.fill_(5)
    assert torch.equal(t.cpu(), torch.full([2] * 13, 5.0))
    # fill_ accepts an expanded (stride-0) tensor, as on the CPU.
    base = torch.zeros(4, device="tpu")
    base.expand(3, 4).fill_(7)
    assert base.cpu().tolist() == [7.0] * 4
    base.expand(3, 4).zero_()
    assert base.cpu().tolist() == [0.0] * 4


def test_copy_into_expanded_tensor_is_rejected_like_cpu():
    dst = torch.zeros(3, device="tpu").expand(2, 3)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        dst.copy_(torch.ones(2, 3))
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        dst.copy_(torch.ones(2, 3, device="tpu:1"))


def test_set_growing_a_storage_keeps_stream_order_and_chip(native_only):
    # set_ with a view past the end grows the storage: the old bytes must
    # be copied after queued work wrote them, into memory of the storage's
    # own chip (not the current chip).
    for chip in (0, 1):
        x = torch.zeros(1000, device=f"tpu:{chip}")
        a = torch.randn(512, 512, device=f"tpu:{chip}")
        for _ in range(3):
            a = a @ a
        x.add_(1)  # queued behind the products
        t = torch.empty(0, device=f"tpu:{chip}")
        before = [torch.tpu.memory_allocated(c) for c in (0, 1)]
        t.set_(x.untyped_storage(), 0, (2000,), (1,))
        grown = [torch.tpu.memory_allocated(c) - before[c] for c in (0, 1)]
        assert grown[1 - chip] == 0 and grown[chip] > 0
        assert x.untyped_storage().nbytes() == 8000
        assert torch.equal(t[:1000].cpu(), torch.ones(1000))


def test_set_without_arguments_gives_an_empty_tpu_storage(native_only):
    x = torch.ones(3, device="tpu:1")
    x.set_()
    assert x.shape == (0,) and x.device == torch.device("tpu:1")
    assert x.untyped_storage().device == torch.device("tpu:1")
    x.resize_(4).fill_(1)
    assert x.cpu().tolist() == [1.0] * 4
    with pytest.raises(RuntimeError, match="storage offset must be non-negative"):
        torch.empty(0, device="tpu").set_(x.untyped_storage(), -1, (2,), (1,))
