"""PEFT LoRA fine-tuning of a tiny Llama (built from a config) with
transformers' Trainer on tpu, against the same run with ``use_cpu=True``:
same seed, same data, float32, every CPU fallback an error. After ``merge_and_unload`` the full weights
agree within rtol 1e-4 / atol 1e-5 and differ from the base model's by far
more, so the comparison covers what LoRA learned. Dropout is 0 (LoRA's and
the model's): tpu and the CPU draw their masks from different generators
(Philox and Mersenne Twister), so with dropout the two runs would differ
by design, not by error."""
import pathlib
import re
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is a test dependency (scripts/setup.sh)")
peft = pytest.importorskip("peft", reason="peft is a test dependency (scripts/setup.sh)")

VOCAB, SEQ = 61, 12
TARGETS = ["q_proj", "v_proj", "down_proj"]


def base_model() -> "transformers.LlamaForCausalLM":
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
        vocab_size=VOCAB, max_position_embeddings=32, bos_token_id=0, eos_token_id=1))


def dataset() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    ids = (torch.randint(0, VOCAB, (32, 1), generator=g) + torch.arange(SEQ)) % VOCAB
    return [{"input_ids": row, "labels": row} for row in ids]


def lora_fit(output_dir: str, use_cpu: bool) -> tuple["transformers.Trainer", set[str], dict[str, torch.Tensor]]:
    """Trains; returns the trainer, the devices of the LoRA parameters after
    training and the merged weights on the CPU."""
    lora = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS, task_type="CAUSAL_LM")
    model = peft.get_peft_model(base_model(), lora)
    args = transformers.TrainingArguments(
        output_dir=output_dir, max_steps=8, per_device_train_batch_size=4, learning_rate=3e-2, logging_steps=1,
        save_strategy="no", seed=3, report_to=[], disable_tqdm=True, dataloader_pin_memory=False, use_cpu=use_cpu)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=dataset())
    trainer.train()
    lora_devices = {p.device.type for name, p in model.named_parameters() if "lora_" in name and p.requires_grad}
    merged = trainer.model.merge_and_unload()
    return trainer, lora_devices, {name: value.detach().cpu() for name, value in merged.state_dict().items()}


def losses(trainer: "transformers.Trainer") -> list[float]:
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def test_lora_trainer_matches_cpu(tmp_path, native_only):
    tpu, tpu_lora, tpu_merged = lora_fit(str(tmp_path / "tpu"), use_cpu=False)
    assert tpu_lora == {"tpu"}
    cpu, cpu_lora, cpu_merged = lora_fit(str(tmp_path / "cpu"), use_cpu=True)
    assert cpu_lora == {"cpu"}
    assert cpu.args.device.type == "cpu"

    torch.testing.assert_close(torch.tensor(losses(tpu)), torch.tensor(losses(cpu)), rtol=1e-4, atol=1e-5)
    assert tpu_merged.keys() == cpu_merged.keys() and not any("lora" in name for name in tpu_merged)
    torch.testing.assert_close(tpu_merged, cpu_merged, rtol=1e-4, atol=1e-5)

    base = base_model().state_dict()
    for name in tpu_merged:
        changed = (tpu_merged[name] - base[name]).abs().max().item()
        if any(target in name for target in TARGETS):
            assert changed > 1e-2, f"{name}: LoRA moved it by only {changed}"
        else:
            assert changed == 0, f"{name} is not a LoRA target but changed by {changed}"


def test_finetune_example_runs():
    """examples/finetune_trainer.py, a few steps: it trains on tpu, and its
    merged model agrees with the adapted one."""
    root = pathlib.Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, str(root / "examples" / "finetune_trainer.py"), "--steps", "4"],
                         capture_output=True, text=True, timeout=300, cwd=root)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Trainer device: tpu:0" in run.stdout
    merged = re.search(r"merged model on tpu:0: logits within (\S+) of the adapted model", run.stdout)
    assert merged and float(merged.group(1)) < 1e-4, run.stdout
