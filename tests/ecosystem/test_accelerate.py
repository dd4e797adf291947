"""Hugging Face accelerate on tpu with no setting (torch_tpu/_accelerate.py):
device choice, prepare, backward, clipping and bf16 autocast, against the
same steps written in plain PyTorch on the CPU; the training steps with
every CPU fallback turned into an error."""
import pytest
import torch

from conftest import run_python

accelerate = pytest.importorskip("accelerate", reason="accelerate is a test dependency (scripts/setup.sh)")


def test_default_device_is_tpu():
    # No index, as accelerate answers torch.device("cuda") for one process.
    assert accelerate.PartialState().device == torch.device("tpu")
    assert accelerate.Accelerator().device == torch.device("tpu")


def test_cpu_true_keeps_the_cpu():
    assert accelerate.Accelerator(cpu=True).device == torch.device("cpu")


def test_environment_variable_keeps_the_cpu():
    """ACCELERATE_TORCH_DEVICE is read when the state is first built, so a
    fresh interpreter; the same code without it chooses tpu."""
    code = """
        import os
        if os.environ["ACCELERATE_TORCH_DEVICE"] == "unset":
            del os.environ["ACCELERATE_TORCH_DEVICE"]
        import torch, accelerate
        print(accelerate.Accelerator().device, accelerate.PartialState().device)
    """
    for setting, expected in (("cpu", ["cpu", "cpu"]), ("unset", ["tpu", "tpu"])):
        run = run_python(code, env={"ACCELERATE_TORCH_DEVICE": setting})
        assert run.returncode == 0, run.stderr
        assert run.stdout.split() == expected, setting


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))


def data() -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(1)
    return torch.utils.data.TensorDataset(torch.randn(24, 6, generator=g), torch.randn(24, 2, generator=g))


def test_prepare_backward_clip_match_cpu(native_only):
    """Three AdamW steps through accelerate on tpu, with clipping, against
    the same loop on the CPU with torch.nn.utils.clip_grad_norm_."""
    accelerator = accelerate.Accelerator()
    model = small_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = torch.utils.data.DataLoader(data(), batch_size=8)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    assert all(p.device.type == "tpu" for p in model.parameters())

    reference = small_model()
    ref_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    ref_loader = torch.utils.data.DataLoader(data(), batch_size=8)

    for (x, y), (rx, ry) in zip(loader, ref_loader, strict=True):
        assert x.device.type == "tpu"
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        norm = accelerator.clip_grad_norm_(model.parameters(), 0.05)
        optimizer.step()
        optimizer.zero_grad()

        ref_loss = torch.nn.functional.mse_loss(reference(rx), ry)
        ref_loss.backward()
        ref_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.05)
        ref_optimizer.step()
        ref_optimizer.zero_grad()

        assert ref_norm > 0.05  # the clip acts
        torch.testing.assert_close(loss.cpu(), ref_loss, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(norm.cpu(), ref_norm, rtol=1e-5, atol=1e-6)
    for p, ref in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-6)
    assert all(s["exp_avg"].device.type == "tpu" for s in optimizer.optimizer.state.values())


def test_bf16_autocast_runs_in_bf16_on_tpu(native_only):
    accelerator = accelerate.Accelerator(mixed_precision="bf16")
    assert accelerator.device.type == "tpu" and accelerator.mixed_precision == "bf16"
    model = accelerator.prepare(small_model())
    inner = []
    model[0].register_forward_hook(lambda module, args, out: inner.append((out.dtype, out.device.type)))
    x = torch.randn(4, 6, device=accelerator.device)
    with accelerator.autocast():
        assert torch.is_autocast_enabled("tpu")
        assert torch.get_autocast_dtype("tpu") == torch.bfloat16
        product = x @ x.T
    assert product.dtype == torch.bfloat16 and product.device.type == "tpu"
    torch.testing.assert_close(product.float().cpu(), (x.cpu() @ x.cpu().T).bfloat16().float(),
                               rtol=1e-2, atol=3e-2)
    assert (x @ x.T).dtype == torch.float32  # and not after it

    # prepare() wraps the forward in the same autocast: its matrix products
    # run in bf16, the output comes back as f32 (accelerate's convert_outputs_to_fp32).
    out = model(x)
    assert inner == [(torch.bfloat16, "tpu")]
    assert out.dtype == torch.float32
    accelerator.backward(out.sum())
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())


def test_find_executable_batch_size_halves_on_tpu_oom():
    """accelerate retries with a smaller batch on errors whose text it knows
    (CUDA's "... out of memory."); tpu's OutOfMemoryError ("tpu:0 out of
    memory: ...") used to end the search at the first try. A fresh
    interpreter: the memory fraction is process-wide."""
    run = run_python("""
        import torch, torch_tpu
        from accelerate.utils import find_executable_batch_size
        from accelerate.utils.memory import should_reduce_batch_size
        torch.tpu.set_per_process_memory_fraction(0.01)  # 163.8 MiB of 16 GiB
        tried = []

        @find_executable_batch_size(starting_batch_size=1024)
        def step(batch_size):
            tried.append(batch_size)
            torch.empty(batch_size, 1 << 18, device="tpu")  # 1 MiB a row
            return batch_size

        print(step(), len(tried))
        print(should_reduce_batch_size(RuntimeError("something else")))
    """)
    assert run.returncode == 0, run.stderr
    final, tries = run.stdout.split()[:2]
    assert int(final) * 2**20 <= 0.01 * 16 * 2**30 and int(tries) > 1
    assert run.stdout.split()[2] == "False"


@pytest.mark.parametrize("launcher", [["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"],
                                      ["-m", "accelerate.commands.accelerate_cli", "launch", "--num_processes=2"]],
                         ids=["torchrun", "accelerate-launch"])
def test_two_processes_train_as_one(tmp_path, launcher):
    """torchrun or accelerate launch with two processes (accelerate launch
    with no mode given: it would start one process if it counted only GPUs):
    accelerate forms one group over tpu_dist,
    wraps the model in DDP on tpu and shards the data; the result is the
    same model trained in one process on the CPU with both ranks' batches
    together (batch 16 = two shards of 8, gradients averaged)."""
    import json
    import os
    import subprocess
    import sys

    worker = os.path.join(os.path.dirname(__file__), "_accelerate_ddp_worker.py")
    env = dict(os.environ, OUT=str(tmp_path), OMP_NUM_THREADS="1", TORCH_TPU_CHIPS="2")
    run = subprocess.run([sys.executable, *launcher, worker], capture_output=True, text=True, timeout=180, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g)
    want_losses = []
    for start in range(0, 64, 16):
        loss = torch.nn.functional.mse_loss(model(x[start:start + 16]), y[start:start + 16])
        loss.backward()
        opt.step()
        opt.zero_grad()
        want_losses.append(loss.item())
    want = torch.cat([p.detach().flatten() for p in model.parameters()])

    for r, got in enumerate(ranks):
        assert (got["rank"], got["world"], got["wrapper"]) == (r, 2, "DistributedDataParallel")
        assert got["device"] == f"tpu:{r}" and got["batch_devices"] == [got["device"]]  # tpu:LOCAL_RANK
        assert "tpu:tpu_dist" in got["backend"]
        torch.testing.assert_close(torch.tensor(got["losses"]), torch.tensor(want_losses), rtol=1e-5, atol=1e-6)
        params = torch.tensor([v for p in got["params"] for v in p])
        torch.testing.assert_close(params, want, rtol=1e-5, atol=1e-6)
