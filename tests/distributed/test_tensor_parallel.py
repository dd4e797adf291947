"""Tensor parallelism (parallelize_module with colwise/rowwise plans, and
sequence parallelism) on DeviceMesh("tpu", (2,)), trained on 2 ranks and
checked step by step against the same model trained in one process on CPU
PyTorch."""
import pytest
import torch

from . import _tp_workers as T
from ._launch import run_ranks

STEPS = 3
SHARDED = {  # parameter -> the dimension tensor parallelism splits it on
    "mlp": {"fc1.weight": 0, "fc1.bias": 0, "fc2.weight": 1},
    "block": {"q.weight": 0, "q.bias": 0, "k.weight": 0, "v.weight": 0, "v.bias": 0, "out.weight": 1,
              "mlp.fc1.weight": 0, "mlp.fc1.bias": 0, "mlp.fc2.weight": 1},
}


def _close(actual, expected, what: str) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("kind", ["mlp", "block", "block_sp"])
def test_tensor_parallel_matches_cpu(kind):
    r0, r1 = run_ranks(T.tensor_parallel, 2, kind, STEPS, timeout=90).values()
    ref = T.oracle(kind, STEPS)
    model = T.build(kind)

    # Each sharded parameter holds half of its rows or columns on each rank;
    # every other one (biases of rowwise layers, LayerNorms) is replicated.
    sharded = SHARDED["mlp" if kind == "mlp" else "block"]
    for name, p in model.named_parameters():
        if name in sharded:
            dim = sharded[name]
            assert r0["placements"][name] == f"(Shard(dim={dim}),)", name
            expected = list(p.shape)
            expected[dim] //= 2
            assert list(r0["local_shapes"][name]) == expected, name
        else:
            assert r0["placements"][name] == "(Replicate(),)", name
    assert r0["fallbacks"] == {} and r1["fallbacks"] == {}, f"ops run through the CPU fallback: {r0['fallbacks']}"

    # Both ranks hold the same replicated values, bit for bit.
    assert r0["losses"] == r1["losses"]
    for a, b in zip(r0["outputs"] + [r0["params"]] + r0["grads"], r1["outputs"] + [r1["params"]] + r1["grads"]):
        for x, y in (zip(a.values(), b.values()) if isinstance(a, dict) else [(a, b)]):
            assert torch.equal(x, y)

    # And they follow the one-process CPU run: outputs, losses, every
    # gradient of every step, and the weights at the end.
    assert len(r0["losses"]) == STEPS
    _close(torch.tensor(r0["losses"]), torch.tensor(ref["losses"]), "losses")
    for step in range(STEPS):
        _close(r0["outputs"][step], ref["outputs"][step], f"output of step {step}")
        assert r0["grads"][step].keys() == ref["grads"][step].keys()
        for name, g in ref["grads"][step].items():
            assert g.abs().max() > 1e-4, f"{name}: a vanishing gradient checks nothing"
            _close(r0["grads"][step][name], g, f"gradient of {name} at step {step}")
    for name, p in ref["params"].items():
        assert not torch.equal(p, dict(model.named_parameters())[name].detach()), f"{name} did not train"
        _close(r0["params"][name], p, f"final {name}")
