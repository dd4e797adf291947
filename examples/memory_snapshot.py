"""Where does the memory go? Record the allocator's history on tpu during a
few training steps of a small model, save a snapshot, and open it in
PyTorch's memory visualizer: the same calls as on CUDA, with "tpu" for
"cuda".

    python examples/memory_snapshot.py [--steps 4] [--out tpu_memory.pickle]

Then either drag the .pickle onto https://pytorch.org/memory_viz, or turn
it into a page that loads the visualizer itself:

    python -m torch.cuda._memory_viz trace_plot tpu_memory.pickle -o tpu_memory.html

(the page is written offline; viewing it fetches the visualizer's script
from the web). `python -m torch.cuda._memory_viz stats tpu_memory.pickle`
prints a text summary of the segments without a browser."""
import argparse

import torch
import torch.nn as nn


class SmallNet(nn.Module):
    """A two-layer MLP with layer norm: enough to show parameters,
    activations, gradients and optimizer state in the timeline."""

    def __init__(self, width: int = 512, classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.LayerNorm(4 * width), nn.Linear(4 * width, width), nn.GELU()
        )
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x) + x)


def train(steps: int, batch: int, width: int) -> float:
    model = SmallNet(width).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(0)
    loss = torch.zeros((), device="tpu")
    for _ in range(steps):
        x = torch.randn(batch, width, generator=gen).to("tpu")
        y = torch.randint(0, 10, (batch,), generator=gen).to("tpu")
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return loss.item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--out", default="tpu_memory.pickle")
    args = parser.parse_args()

    # Keep the last 100,000 allocator events with their Python stacks.
    torch.tpu.memory._record_memory_history(max_entries=100_000, stacks="python")
    loss = train(args.steps, args.batch, args.width)
    torch.tpu.memory._dump_snapshot(args.out)
    events = sum(len(t) for t in torch.tpu.memory._snapshot()["device_traces"])
    torch.tpu.memory._record_memory_history(enabled=None)  # stops, and forgets the history

    print(f"trained {args.steps} steps (last loss {loss:.4f}); peak allocated "
          f"{torch.tpu.max_memory_allocated() / 2**20:.1f} MiB")
    print(torch.tpu.memory_summary(abbreviated=True))
    print(f"wrote {args.out} ({events} events recorded). To look at it:")
    print("  - drag it onto https://pytorch.org/memory_viz, or")
    print(f"  - python -m torch.cuda._memory_viz trace_plot {args.out} -o {args.out.rsplit('.', 1)[0]}.html")
    print("    and open the .html in a browser (it loads the visualizer's script from the web)")


if __name__ == "__main__":
    main()
