"""Rank bodies for the distributed-checkpoint tests (spawned by
_launch.run_ranks): an FSDP2 model and a tensor-parallel one are saved with
torch.distributed.checkpoint part way through training, loaded into fresh
models, and trained on."""
import torch
import torch.nn.functional as F

from . import _tp_workers as T

KIND = "block"  # the model every checkpoint test trains


def flat_state(model_sd: dict, optim_sd: dict) -> dict:
    """One flat {name: whole CPU tensor or value} of a model's and its
    optimizer's state dicts (as get_state_dict returns them)."""
    out = {f"model.{k}": T.full(v) for k, v in model_sd.items()}
    for fqn, state in optim_sd["state"].items():
        for k, v in state.items():
            out[f"optim.state.{fqn}.{k}"] = T.full(v) if isinstance(v, torch.Tensor) else v
    for i, group in enumerate(optim_sd["param_groups"]):
        for k, v in group.items():
            out[f"optim.param_groups.{i}.{k}"] = v
    return out


def _steps(model, opt, steps) -> None:
    for step in steps:
        x, y = T.batch(KIND, step)
        loss = F.mse_loss(model(x.to("tpu")), y.to("tpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()


def _fsdp_model(mesh, seed: int):
    from torch.distributed.fsdp import fully_shard

    model = T.build(KIND, seed).to("tpu")
    fully_shard(model.mlp, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _tp_model(mesh, seed: int):
    return T.tp_model(KIND, mesh, seed)


def _resume(make, mesh, path: str, split: int, steps: int) -> dict:
    """Trains ``steps`` steps without a break, saving a checkpoint after
    ``split``; then loads it into a model built from another seed and trains
    the rest. Returns what was saved, what was loaded and both ends."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model = make(mesh, 0)
    opt = T.optimizer(KIND, model.parameters())
    _steps(model, opt, range(split))
    msd, osd = get_state_dict(model, opt)
    saved = flat_state(msd, osd)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
    _steps(model, opt, range(split, steps))
    uninterrupted = {n: T.full(p) for n, p in model.named_parameters()}

    fresh = make(mesh, 1)
    fresh_opt = T.optimizer(KIND, fresh.parameters())
    msd, osd = get_state_dict(fresh, fresh_opt)  # also creates the optimizer's state
    before = flat_state(msd, osd)
    sd = {"model": msd, "optim": osd}
    dcp.load(sd, checkpoint_id=path)
    set_state_dict(fresh, fresh_opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    loaded = flat_state(*get_state_dict(fresh, fresh_opt))
    _steps(fresh, fresh_opt, range(split, steps))
    resumed = {n: T.full(p) for n, p in fresh.named_parameters()}
    return {"saved": saved, "before_load": before, "loaded": loaded, "uninterrupted": uninterrupted,
            "resumed": resumed}


def checkpoints(rank: int, world: int, path: str, split: int, steps: int) -> dict:
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("tpu", (world,))
    torch.tpu.reset_fallback_stats()
    out = {"fsdp": _resume(_fsdp_model, mesh, f"{path}/fsdp", split, steps),
           "tp": _resume(_tp_model, mesh, f"{path}/tp", split, steps)}
    out["fallbacks"] = torch.tpu.fallback_stats()
    return out
