"""Rank bodies for the tensor-parallel and checkpoint tests, and the models
they share with their one-process CPU oracles (spawned by _launch.run_ranks).

Every model is built from a seed on the CPU, so the ranks (which move it to
tpu and parallelize it) and the oracle (which trains it on the CPU in the
test's own process) start from the same weights and see the same batches."""
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module
from torch.distributed.tensor.parallel import (ColwiseParallel, ParallelStyle, RowwiseParallel, SequenceParallel,
                                               parallelize_module)

DIM, HEADS, HIDDEN, SEQ, BATCH = 16, 4, 32, 6, 3


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(DIM, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """A pre-norm transformer block. Heads are counted from the width of q,
    so that under tensor parallelism each rank runs its own heads. k has no
    bias: its gradient would be zero up to rounding (softmax ignores a shift
    of every score by q.b), which Adam blows up into noise-driven updates."""

    def __init__(self) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.q, self.k, self.v = nn.Linear(DIM, DIM), nn.Linear(DIM, DIM, bias=False), nn.Linear(DIM, DIM)
        self.out = nn.Linear(DIM, DIM)
        self.ln2 = nn.LayerNorm(DIM)
        self.mlp = MLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        q, k, v = (p(h).unflatten(-1, (-1, DIM // HEADS)).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).flatten(2))
        return x + self.mlp(self.ln2(x))


# "block_sp": the block under sequence parallelism (same model, same data).
MODELS = {"mlp": MLP, "block": Block, "block_sp": Block}


def build(kind: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return MODELS[kind]()


def batch(kind: str, step: int):
    g = torch.Generator().manual_seed(100 + step)
    shape = (BATCH * SEQ, DIM) if kind == "mlp" else (BATCH, SEQ, DIM)
    return torch.randn(shape, generator=g), torch.randn(shape, generator=g)


def optimizer(kind: str, params) -> torch.optim.Optimizer:
    if kind == "mlp":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    return torch.optim.AdamW(params, lr=0.01)


class Replicated(ParallelStyle):
    """A plan entry that keeps a module whole on every rank, with its
    parameters as Replicate DTensors and plain tensors in and out. (Plain
    parameters beside DTensor ones break foreach optimizers, the default on
    tpu as on cuda: "got mixed torch.Tensor and DTensor".)"""

    def _apply(self, module: nn.Module, mesh) -> nn.Module:
        return distribute_module(
            module, mesh,
            input_fn=lambda mod, inputs, mesh: tuple(DTensor.from_local(t, mesh, [Replicate()]) for t in inputs),
            output_fn=lambda mod, out, mesh: out.to_local(),
        )


def tp_plan(kind: str) -> dict:
    """Colwise into rowwise for every MLP; q/k/v colwise and the output
    projection rowwise for attention; LayerNorms replicated ("block") or
    under sequence parallelism ("block_sp": the norms and residuals run on
    each rank's slice of the sequence, the projections gather it first and
    the rowwise ones scatter their sums back over it)."""
    if kind == "mlp":
        return {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    if kind == "block_sp":
        plan = {name: ColwiseParallel(input_layouts=Shard(1)) for name in ("q", "k", "v", "mlp.fc1")}
        plan.update({name: RowwiseParallel(output_layouts=Shard(1)) for name in ("out", "mlp.fc2")})
        plan.update({"ln1": SequenceParallel(), "ln2": SequenceParallel()})
        return plan
    plan = {name: ColwiseParallel() for name in ("q", "k", "v", "mlp.fc1")}
    plan.update({name: RowwiseParallel() for name in ("out", "mlp.fc2")})
    plan.update({"ln1": Replicated(), "ln2": Replicated()})
    return plan


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole value of a parameter, gradient or state, on the CPU."""
    if isinstance(t, DTensor):
        t = t.full_tensor()
    return t.detach().cpu().clone()


def train(model: nn.Module, opt: torch.optim.Optimizer, kind: str, steps, device: str, forward=None) -> dict:
    """Trains on the batches of ``steps``, recording each step's forward
    output, loss and gradients, and the weights at the end. ``forward``
    (default: the model) maps the whole batch to the whole output."""
    record = {"outputs": [], "losses": [], "grads": []}
    for step in steps:
        x, y = batch(kind, step)
        out = (forward or model)(x.to(device))
        loss = F.mse_loss(out, y.to(device))
        opt.zero_grad()
        loss.backward()
        record["outputs"].append(full(out))
        record["losses"].append(loss.item())
        record["grads"].append({n: full(p.grad) for n, p in model.named_parameters()})
        opt.step()
    record["params"] = {n: full(p) for n, p in model.named_parameters()}
    return record


def oracle(kind: str, steps: int) -> dict:
    """The same model trained in one process on CPU PyTorch."""
    model = build(kind)
    return train(model, optimizer(kind, model.parameters()), kind, range(steps), "cpu")


# -- tensor parallelism ----------------------------------------------------------


def tp_model(kind: str, mesh, seed: int = 0) -> nn.Module:
    return parallelize_module(build(kind, seed).to("tpu"), mesh, tp_plan(kind))


def tensor_parallel(rank: int, world: int, kind: str, steps: int) -> dict:
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("tpu", (world,))
    model = tp_model(kind, mesh)
    forward = None
    if kind == "block_sp":
        def forward(x: torch.Tensor) -> torch.Tensor:
            # This rank's slice of the sequence in, the whole output back.
            return DTensor.from_local(model(x.chunk(world, dim=1)[rank]), mesh, [Shard(1)]).full_tensor()

    placements = {n: str(p.placements) if isinstance(p, DTensor) else "plain"
                  for n, p in model.named_parameters()}
    local = {n: tuple(p.to_local().shape) for n, p in model.named_parameters() if isinstance(p, DTensor)}
    torch.tpu.reset_fallback_stats()
    record = train(model, optimizer(kind, model.parameters()), kind, range(steps), "tpu", forward)
    record["fallbacks"] = torch.tpu.fallback_stats()
    record["placements"], record["local_shapes"] = placements, local
    return record
