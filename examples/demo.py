"""torch-tpu demo: train a small MLP on the virtual TPU, the one-line way.

Run with ./scripts/demo.sh (sets everything up first)."""
import time

import torch  # torch_tpu autoloads: "tpu" is a device now

torch.manual_seed(0)
print(f"devices: {torch.tpu.device_count()} x {torch.tpu.get_device_name()}")
props = torch.tpu.get_device_properties()
print(f"modeled chip: {props.total_memory / 2**30:.0f} GiB HBM at {props.hbm_bandwidth / 1e9:.0f} GB/s, "
      f"{props.peak_bf16_flops / 1e12:.0f} TFLOP/s bf16, {props.mxu_size}x{props.mxu_size} MXU")

# A toy regression problem: y = sin(x0) + x1 * x2.
x = torch.randn(2048, 3)
y = (torch.sin(x[:, 0]) + x[:, 1] * x[:, 2]).unsqueeze(1)

model = torch.nn.Sequential(torch.nn.Linear(3, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
model.to("tpu")  # the only change
xd, yd = x.to("tpu"), y.to("tpu")
opt = torch.optim.SGD(model.parameters(), lr=0.05)

start = time.perf_counter()
for step in range(201):
    loss = torch.nn.functional.mse_loss(model(xd), yd)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(f"step {step:3d}  loss {loss.item():.4f}")
torch.tpu.synchronize()
print(f"trained in {time.perf_counter() - start:.2f}s on {xd.device}; "
      f"memory allocated {torch.tpu.memory_allocated() / 2**20:.1f} MiB")

fallbacks = torch.tpu.fallback_stats()
print(f"ops that ran through the CPU fallback: {len(fallbacks)} "
      f"({sum(fallbacks.values())} calls); native kernels did the rest")
