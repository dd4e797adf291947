"""transformers.Trainer end to end on tpu, with no device setting: a tiny
GPT-2 built from a config fine-tunes with evaluation, gradient
accumulation, gradient clipping, a warm-up + cosine learning-rate schedule,
checkpoints and prediction, with every CPU fallback turned into an error
(the Trainer's whole tpu workload is native).

- float32 against the same Trainer run with ``use_cpu=True``: logged
  losses, gradient norms and learning rates, evaluation losses and final
  weights agree (dropout off: tpu draws from its own Philox generator, the
  CPU from its Mersenne Twister, so their masks differ by design).
- ``bf16=True``: autocast on tpu is active inside the model's forward.
- resuming: training to step 3, checkpointing and resuming to step 6 in a
  new Trainer gives weights, AdamW moments and the tpu generator state
  bit-identical to an uninterrupted run to 6,
  with dropout on, so the tpu generator's state must travel in the
  checkpoint (torch_tpu/_transformers.py adds it; without it the resumed
  run draws other masks and the weights differ).
"""
from typing import Any

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is a test dependency (scripts/setup.sh)")

VOCAB, SEQ = 61, 12
MAX_GRAD_NORM = 0.5


def tiny_gpt2(dropout: float) -> "transformers.GPT2LMHeadModel":
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=VOCAB, n_positions=SEQ,
                                     resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
                                     bos_token_id=0, eos_token_id=1)
    return transformers.GPT2LMHeadModel(config)


def token_dataset(count: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """Sequences with a learnable pattern (each token the previous plus one)."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, VOCAB, (count, 1), generator=g)
    ids = (start + torch.arange(SEQ)) % VOCAB
    return [{"input_ids": row, "labels": row} for row in ids]


def training_args(output_dir: str, **overrides: Any) -> "transformers.TrainingArguments":
    options = dict(
        output_dir=output_dir, max_steps=6, per_device_train_batch_size=4, gradient_accumulation_steps=2,
        per_device_eval_batch_size=8, learning_rate=3e-3, lr_scheduler_type="cosine", warmup_steps=2,
        max_grad_norm=MAX_GRAD_NORM, weight_decay=0.01, eval_strategy="steps", eval_steps=3, logging_steps=1,
        save_strategy="no", seed=7, report_to=[], disable_tqdm=True, dataloader_pin_memory=False,
    )
    options.update(overrides)
    return transformers.TrainingArguments(**options)


def fit(model: torch.nn.Module, args: "transformers.TrainingArguments",
        resume: str | None = None) -> "transformers.Trainer":
    trainer = transformers.Trainer(model=model, args=args, train_dataset=token_dataset(32, seed=1),
                                   eval_dataset=token_dataset(8, seed=2))
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def cpu_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().cpu().clone() for name, value in model.state_dict().items()}


def logged(trainer: "transformers.Trainer", key: str) -> list[float]:
    return [entry[key] for entry in trainer.state.log_history if key in entry]


def test_trainer_fp32_matches_cpu(tmp_path, native_only):
    tpu = fit(tiny_gpt2(dropout=0.0), training_args(str(tmp_path / "tpu")))
    cpu = fit(tiny_gpt2(dropout=0.0), training_args(str(tmp_path / "cpu"), use_cpu=True))
    assert tpu.args.device.type == "tpu" and cpu.args.device.type == "cpu"
    assert all(p.device.type == "tpu" for p in tpu.model.parameters())
    assert all(state["exp_avg"].device.type == "tpu" for state in tpu.optimizer.state.values())

    # Clipping must have acted for the comparison to cover it.
    assert max(logged(tpu, "grad_norm")) > MAX_GRAD_NORM
    assert logged(tpu, "learning_rate") == logged(cpu, "learning_rate")
    for key in ("loss", "grad_norm", "eval_loss"):
        torch.testing.assert_close(torch.tensor(logged(tpu, key)), torch.tensor(logged(cpu, key)),
                                   rtol=1e-4, atol=1e-5, msg=lambda m, key=key: f"{key}: {m}")
    assert logged(tpu, "loss")[-1] < logged(tpu, "loss")[0]
    torch.testing.assert_close(cpu_weights(tpu.model), cpu_weights(cpu.model), rtol=1e-4, atol=1e-5)

    # predict: the tpu model's logits against the CPU model's, same data.
    test_data = token_dataset(8, seed=3)
    out_tpu, out_cpu = tpu.predict(test_data), cpu.predict(test_data)
    torch.testing.assert_close(torch.from_numpy(out_tpu.predictions), torch.from_numpy(out_cpu.predictions),
                               rtol=1e-4, atol=1e-4)
    assert out_tpu.metrics["test_loss"] == pytest.approx(out_cpu.metrics["test_loss"], rel=1e-5)


def autocast_probe(model: torch.nn.Module) -> dict[str, Any]:
    """Records, from inside the forward, whether tpu autocast is on and the
    dtype a matrix product there returns."""
    seen: dict[str, Any] = {}

    def hook(module: torch.nn.Module, inputs: Any, output: torch.Tensor) -> None:
        seen.setdefault("autocast", []).append(torch.is_autocast_enabled("tpu"))
        seen.setdefault("dtype", []).append(output.dtype)
        seen["device"] = output.device

    model.transformer.h[0].mlp.c_fc.register_forward_hook(hook)
    return seen


def test_trainer_bf16_resume_is_bit_identical(tmp_path, native_only):
    """bf16 autocast with dropout on: six steps straight, against three
    steps, a checkpoint and a resume in a new Trainer."""
    straight_model = tiny_gpt2(dropout=0.1)
    seen = autocast_probe(straight_model)
    straight = fit(straight_model, training_args(str(tmp_path / "run"), bf16=True, save_strategy="steps",
                                                 save_steps=3))
    assert seen["device"].type == "tpu"
    assert all(seen["autocast"]) and set(seen["dtype"]) == {torch.bfloat16}
    straight_rng = torch.tpu.get_rng_state()
    losses = logged(straight, "loss")
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses)))
    assert len(logged(straight, "eval_loss")) == 2

    checkpoint = tmp_path / "run" / "checkpoint-3"
    rng = torch.load(checkpoint / "rng_state.pth", weights_only=False)
    assert "tpu" in rng, "torch_tpu/_transformers.py did not add the tpu RNG state"
    optimizer_state = torch.load(checkpoint / "optimizer.pt", weights_only=True, map_location="cpu")
    assert optimizer_state["state"], "the checkpoint holds no optimizer state"

    # A fresh model with other weights: everything must come from the checkpoint.
    torch.manual_seed(123)
    fresh = tiny_gpt2(dropout=0.1)
    for p in fresh.parameters():
        torch.nn.init.normal_(p)
    resumed = fit(fresh, training_args(str(tmp_path / "run"), bf16=True, max_steps=6),
                  resume=str(checkpoint))
    assert resumed.state.global_step == 6
    assert logged(resumed, "loss") == losses  # the first three come from the checkpoint's log
    for name, value in cpu_weights(straight.model).items():
        assert torch.equal(cpu_weights(resumed.model)[name], value), name
    straight_state, resumed_state = straight.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    assert straight_state.keys() == resumed_state.keys()
    for index, state in resumed_state.items():
        assert state["exp_avg"].device.type == "tpu"
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(state[key].cpu(), straight_state[index][key].cpu()), (index, key)
    assert torch.equal(torch.tpu.get_rng_state(), straight_rng)


def test_trainer_imported_before_torch():
    """``from transformers import Trainer`` before torch: transformers.trainer
    imports torch, whose autoload imports torch-tpu while the trainer module
    is half-run (no Trainer class yet); the RNG hook waits for the module
    (it used to fail with a RuntimeWarning and checkpoints lacked tpu's state)."""
    from conftest import run_python

    run = run_python("""
        import warnings
        warnings.simplefilter("error", RuntimeWarning)
        from transformers import Trainer
        import torch
        print(Trainer._save_rng_state._torch_tpu, Trainer._load_rng_state._torch_tpu)
    """)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "True"]
