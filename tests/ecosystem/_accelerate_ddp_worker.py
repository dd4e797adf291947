"""Run by torchrun from test_accelerate.py: a small regression model
trained by accelerate with no device setting; writes this rank's view of
the run to $OUT/rank<R>.json."""
import json
import os

import torch
from accelerate import Accelerator


def main() -> None:
    acc = Accelerator()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    model, opt, loader = acc.prepare(model, opt, loader)
    losses, batch_devices = [], set()
    for xb, yb in loader:
        batch_devices.add(str(xb.device))
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(acc.gather(loss.detach()).mean().item())
    params = [p.detach().cpu().flatten().tolist() for p in acc.unwrap_model(model).parameters()]
    result = dict(rank=acc.process_index, world=acc.num_processes, device=str(acc.device),
                  wrapper=type(model).__name__, backend=torch.distributed.get_backend_config(),
                  batch_devices=sorted(batch_devices), losses=losses, params=params)
    with open(os.path.join(os.environ["OUT"], f"rank{acc.process_index}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
