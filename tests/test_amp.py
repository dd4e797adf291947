"""Mixed precision: torch.autocast("tpu") follows PyTorch's CUDA policies
(matrix products in the lower dtype, sensitive ops in f32), checked against
the same model under CPU autocast."""
import pytest
import torch


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_casts_matrix_products(dtype):
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16)
    with torch.autocast("cpu", dtype=dtype):
        ref = lin(x)
    lin_t = lin.to("tpu")
    with torch.autocast("tpu", dtype=dtype):
        out = lin_t(x.to("tpu"))
        mm = x.to("tpu") @ x.to("tpu").t()
        loss = torch.nn.functional.mse_loss(out, torch.zeros_like(out))
    assert out.dtype == dtype and mm.dtype == dtype
    assert loss.dtype == torch.float32  # mse_loss runs in f32 under autocast
    torch.testing.assert_close(out.cpu(), ref, rtol=2e-2, atol=2e-2)
    assert x.to("tpu").matmul(x.to("tpu").t()).dtype == torch.float32  # outside autocast


def test_autocast_training_step_with_grad_scaler():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("tpu")
    x, y = torch.randn(32, 8, device="tpu"), torch.randn(32, 1, device="tpu")
    losses = []
    for _ in range(5):
        with torch.autocast("tpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert losses[-1] < losses[0]
