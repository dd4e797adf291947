"""diffusers: a small UNet2DModel (built from a config, 8x8 samples, one
attention block down and up) trains four DDPM steps on tpu (the
scheduler's add_noise, MSE on the predicted noise, AdamW) against the same
steps on the CPU. Noise and timesteps are drawn on the CPU, so both
devices see the same batches. Every op runs natively (the CPU fallback
is an error here).

Tolerances: the losses rtol 1e-5 and the first step's gradients rtol 1e-4
/ atol 1e-7 (they agree to about 1e-7 relative). The final weights are
compared after AdamW, which divides each gradient by its own running
size: a weight whose true gradient is zero (the attention's key bias: a
constant added to every key of a row does not change the softmax) or tiny
moves by about ``lr`` per step in the direction of its rounding noise, on
either device. So every weight within atol 2e-4 (half the distance four
steps of lr 1e-3 can move one), and 99.5% of them within 1e-6."""
import copy

import pytest
import torch

diffusers = pytest.importorskip("diffusers", reason="diffusers is a test dependency (scripts/setup.sh)")

STEPS, TIMESTEPS, LR = 4, 100, 1e-3


def small_unet() -> "diffusers.UNet2DModel":
    torch.manual_seed(0)
    return diffusers.UNet2DModel(
        sample_size=8, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(16, 32),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=8)


def batches() -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    g = torch.Generator().manual_seed(1)
    images = torch.randn(4, 3, 8, 8, generator=g)
    return images, [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, TIMESTEPS, (4,), generator=g))
                    for _ in range(STEPS)]


def train(unet: torch.nn.Module, device: str) -> tuple[list[float], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Returns the losses, the first step's gradients and the final weights (on the CPU)."""
    model = copy.deepcopy(unet).to(device)
    scheduler = diffusers.DDPMScheduler(num_train_timesteps=TIMESTEPS)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    images, steps = batches()
    images = images.to(device)
    losses, first_grads = [], {}
    for noise, timesteps in steps:
        noise, timesteps = noise.to(device), timesteps.to(device)
        noisy = scheduler.add_noise(images, noise, timesteps)
        loss = torch.nn.functional.mse_loss(model(noisy, timesteps).sample, noise)
        loss.backward()
        assert all(p.grad.device.type == device for p in model.parameters())
        if not first_grads:
            first_grads = {name: p.grad.cpu().clone() for name, p in model.named_parameters()}
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    weights = {name: value.detach().cpu() for name, value in model.state_dict().items()}
    return losses, first_grads, weights


def test_ddpm_training_matches_cpu(native_only):
    unet = small_unet()
    tpu_losses, tpu_grads, tpu_weights = train(unet, "tpu")
    cpu_losses, cpu_grads, cpu_weights = train(unet, "cpu")

    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-5, atol=0)
    torch.testing.assert_close(tpu_grads, cpu_grads, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(tpu_weights, cpu_weights, rtol=0, atol=2e-4)
    differences = torch.cat([(tpu_weights[k] - cpu_weights[k]).abs().flatten() for k in cpu_weights])
    assert (differences <= 1e-6).float().mean() >= 0.995

    moved = max((cpu_weights[k] - v).abs().max().item() for k, v in unet.state_dict().items())
    assert moved > 2e-3, "the weights hardly moved: the comparison would say nothing"
