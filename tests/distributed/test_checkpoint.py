"""torch.distributed.checkpoint (DCP) on tpu: a sharded FSDP2 model and a
tensor-parallel one, with their AdamW state, saved by 2 ranks part way
through training, loaded into fresh models on 2 ranks (training then goes on
exactly as without the break) and into one plain CPU process."""
import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from . import _ckpt_workers as C
from . import _tp_workers as T
from ._launch import run_ranks

SPLIT, STEPS = 2, 4  # saved after SPLIT steps, trained to STEPS


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    path = tmp_path_factory.mktemp("dcp")
    r0, r1 = run_ranks(C.checkpoints, 2, str(path), SPLIT, STEPS, timeout=90).values()
    assert r0["fallbacks"] == {} and r1["fallbacks"] == {}, f"ops run through the CPU fallback: {r0['fallbacks']}"
    return path, r0, r1


def _equal(a, b) -> bool:
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


def _assert_same(actual: dict, expected: dict, what: str) -> None:
    assert actual.keys() == expected.keys(), what
    for k, v in expected.items():
        assert _equal(actual[k], v), f"{what}: {k}"


@pytest.mark.parametrize("layout", ["fsdp", "tp"])
def test_load_on_two_ranks_resumes_exactly(ranks, layout):
    _, r0, r1 = ranks
    for r in (r0, r1):
        run = r[layout]
        # The checkpoint holds every parameter and every AdamW state.
        assert sum(k.endswith(".exp_avg_sq") for k in run["saved"]) == len(run["uninterrupted"])
        # The fresh model started elsewhere; loading brought back every
        # value bit for bit, and training on gives the uninterrupted run's
        # weights bit for bit.
        tensors = [k for k, v in run["saved"].items() if isinstance(v, torch.Tensor)]
        assert not [k for k in tensors if _equal(run["saved"][k], run["before_load"][k])]
        _assert_same(run["loaded"], run["saved"], "loaded")
        _assert_same(run["resumed"], run["uninterrupted"], "resumed")
    _assert_same(r1[layout]["saved"], r0[layout]["saved"], "rank 1's view of the checkpoint")
    # Training itself followed one CPU process, before and after the save.
    for state, steps in (({f"model.{k}": v for k, v in r0[layout]["uninterrupted"].items()}, STEPS),
                         (r0[layout]["saved"], SPLIT)):
        for name, p in T.oracle(C.KIND, steps)["params"].items():
            torch.testing.assert_close(state[f"model.{name}"], p, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout", ["fsdp", "tp"])
def test_load_in_one_cpu_process(ranks, tmp_path, layout):
    path, r0, _ = ranks
    saved = r0[layout]["saved"]
    # dcp_to_torch_save: one torch.save file of the whole state.
    dcp_to_torch_save(path / layout, tmp_path / "whole.pt")
    whole = torch.load(tmp_path / "whole.pt", weights_only=True)
    _assert_same(C.flat_state(whole["model"], whole["optim"]), saved, "dcp_to_torch_save")

    # dcp.load without a process group, into a plain CPU model and AdamW:
    # the same values, and training on follows the ranks' uninterrupted run.
    model = T.build(C.KIND, seed=2)
    opt = T.optimizer(C.KIND, model.parameters())
    msd, osd = get_state_dict(model, opt)
    sd = {"model": msd, "optim": osd}
    with pytest.warns(UserWarning, match="single process"):
        dcp.load(sd, checkpoint_id=path / layout)
    set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    _assert_same(C.flat_state(*get_state_dict(model, opt)), saved, "dcp.load in one process")
    for step in range(SPLIT, STEPS):
        x, y = T.batch(C.KIND, step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), r0[layout]["uninterrupted"][name], rtol=1e-5, atol=1e-6)
