"""Random numbers come from the per-chip Philox generator: seeding means
something, and results depend on neither mode nor thread count."""
import pytest
import torch

from conftest import run_python


def test_manual_seed_reproduces(native_only):
    torch.tpu.manual_seed(123)
    a = torch.rand(1000, device="tpu").cpu()
    b = torch.randn(1000, device="tpu").cpu()
    torch.tpu.manual_seed(123)
    assert torch.equal(torch.rand(1000, device="tpu").cpu(), a)
    assert torch.equal(torch.randn(1000, device="tpu").cpu(), b)
    torch.tpu.manual_seed(124)
    assert not torch.equal(torch.rand(1000, device="tpu").cpu(), a)


def test_torch_manual_seed_seeds_tpu_and_cpu_is_untouched(native_only):
    torch.manual_seed(7)
    a = torch.rand(100, device="tpu").cpu()
    cpu_after = torch.rand(3)
    torch.manual_seed(7)
    cpu_first = torch.rand(3)
    assert torch.equal(cpu_after, cpu_first)  # tpu draws did not consume the CPU generator
    torch.manual_seed(7)
    assert torch.equal(torch.rand(100, device="tpu").cpu(), a)


def test_generators_state_and_chips(native_only):
    g = torch.Generator(device="tpu").manual_seed(5)
    x = torch.empty(50, device="tpu").uniform_(-2, 3, generator=g)
    assert x.cpu().min().item() >= -2 and x.cpu().max().item() < 3
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    y = torch.randn(20, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.randn(20, device="tpu").cpu(), y)
    torch.tpu.manual_seed_all(9)
    assert torch.tpu.initial_seed() == 9
    r0 = torch.rand(10, device="tpu:0").cpu()
    r1 = torch.rand(10, device="tpu:1").cpu()
    assert torch.equal(r0, r1)  # same seed, same first draw, on each chip
    with pytest.raises(RuntimeError):
        torch.empty(3, device="tpu:0").uniform_(generator=torch.Generator(device="tpu:1"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_distributions(dtype, native_only):
    torch.tpu.manual_seed(0)
    u = torch.empty(200_000, dtype=dtype, device="tpu").uniform_(2, 4).cpu().double()
    assert 2 <= u.min() and u.max() < 4
    assert abs(u.mean() - 3) < 0.01 and abs(u.var() - 1 / 3) < 0.01
    n = torch.empty(200_000, dtype=dtype, device="tpu").normal_(1.5, 2).cpu().double()
    assert abs(n.mean() - 1.5) < 0.03 and abs(n.std() - 2) < 0.03


def test_non_contiguous_targets(native_only):
    torch.tpu.manual_seed(3)
    full = torch.empty(8, 6, device="tpu").normal_()
    torch.tpu.manual_seed(3)
    t = torch.empty(6, 8, device="tpu").t()
    t.normal_()
    assert torch.equal(t.cpu(), full.cpu())


def test_same_values_in_both_modes_and_any_thread_count():
    code = """
        import torch
        torch.tpu.manual_seed(11)
        print(torch.randn(100000, device="tpu").sum().item(), torch.rand(77, device="tpu")[5].item())
    """
    results = {run_python(code, env).stdout for env in
               ({"TORCH_TPU_NUM_THREADS": "1"}, {"TORCH_TPU_NUM_THREADS": "3"}, {"TPU_LAUNCH_BLOCKING": "1"})}
    assert len(results) == 1 and results.pop().strip()


def test_fallback_random_ops_follow_tpu_seed():
    torch.tpu.manual_seed(21)
    a = torch.bernoulli(torch.full((500,), 0.5, device="tpu")).cpu()
    torch.manual_seed(999)  # the CPU generator must not matter
    torch.tpu.manual_seed(21)
    b = torch.bernoulli(torch.full((500,), 0.5, device="tpu")).cpu()
    assert torch.equal(a, b)
    assert 150 < a.sum().item() < 350
    c = torch.bernoulli(torch.full((500,), 0.5, device="tpu")).cpu()
    assert not torch.equal(a, c)


def test_dropout_follows_tpu_seed():
    x = torch.ones(1000, device="tpu")
    torch.tpu.manual_seed(4)
    a = torch.nn.functional.dropout(x, 0.5).cpu()
    torch.tpu.manual_seed(4)
    b = torch.nn.functional.dropout(x, 0.5).cpu()
    assert torch.equal(a, b)
