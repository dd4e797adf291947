"""Fine-tune with Hugging Face's Trainer and PEFT LoRA on the virtual TPU.

A small Llama is built from a config (nothing is downloaded) and LoRA
adapters on all its projections are trained, character by character, on
the project's own docs (with the embeddings, which a new vocabulary needs). No device setting anywhere: with torch-tpu
installed, Trainer (through accelerate) puts the model, the optimizer and
the batches on tpu, as it would on cuda. bf16 autocast, a warm-up and
cosine schedule, gradient clipping and evaluation are the Trainer's own.
At the end the adapters are merged into the base weights
(``merge_and_unload``) and the merged model is checked against the adapted
one.

    .venv/bin/python examples/finetune_trainer.py            # about a minute on 2 cores
    .venv/bin/python examples/finetune_trainer.py --steps 400 --fp32
"""
import argparse
import math
import os
import pathlib
import tempfile
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # built from a config: nothing to fetch

import torch  # noqa: E402  (torch_tpu autoloads: "tpu" is a device now)

ROOT = pathlib.Path(__file__).resolve().parent.parent
BLOCK = 64


def corpus() -> tuple[list[str], torch.Tensor]:
    """The README and docs as one string of characters, encoded."""
    text = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    return chars, torch.tensor([stoi[c] for c in text], dtype=torch.long)


def blocks(data: torch.Tensor, count: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """``count`` random windows of BLOCK characters; the model shifts the labels itself."""
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(data) - BLOCK, (count,), generator=g).tolist()
    return [{"input_ids": data[s:s + BLOCK], "labels": data[s:s + BLOCK]} for s in starts]


def build_model(vocab: int):
    import peft
    import transformers

    torch.manual_seed(0)
    base = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=BLOCK, bos_token_id=0, eos_token_id=1))
    lora = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, task_type="CAUSAL_LM",
                           target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                           "down_proj"],
                           # A character vocabulary is new to any base model: its embeddings train fully.
                           modules_to_save=["embed_tokens", "lm_head"])
    return peft.get_peft_model(base, lora)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--fp32", action="store_true", help="train in float32 instead of bf16 autocast")
    options = parser.parse_args()

    import transformers

    transformers.logging.set_verbosity_error()
    # peft 0.21 still calls a transformers name that transformers 5 deprecates.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    chars, data = corpus()
    split = int(len(data) * 0.9)
    train, held_out = blocks(data[:split], 16 * options.steps, seed=1), blocks(data[split:], 64, seed=2)
    model = build_model(len(chars))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    print(f"devices: {torch.tpu.device_count()} x {torch.tpu.get_device_name()}")
    print(f"Llama from a config: {total / 1e3:.0f}k parameters, LoRA trains {trainable / 1e3:.0f}k of them; "
          f"{len(data)} characters of the project's docs, vocabulary {len(chars)}")

    with tempfile.TemporaryDirectory() as output_dir:
        args = transformers.TrainingArguments(
            output_dir=output_dir, max_steps=options.steps, per_device_train_batch_size=16,
            per_device_eval_batch_size=32, learning_rate=3e-3, warmup_steps=options.steps // 10,
            lr_scheduler_type="cosine", max_grad_norm=1.0, bf16=not options.fp32, eval_strategy="no",
            logging_steps=max(1, options.steps // 10), save_strategy="no", report_to=[], seed=0,
            dataloader_pin_memory=False, disable_tqdm=False)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=train, eval_dataset=held_out)
        print(f"Trainer device: {args.device}, precision: {'float32' if options.fp32 else 'bf16 autocast'}")
        before = trainer.evaluate()["eval_loss"]
        result = trainer.train()
        after = trainer.evaluate()["eval_loss"]

    # accelerate wrapped the forward in bf16 autocast: unwrap it, so that
    # the check below compares float32 with float32.
    model = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False).eval()
    probe = torch.stack([b["input_ids"] for b in held_out[:4]]).to(args.device)
    with torch.no_grad():
        adapted = model(input_ids=probe).logits
        merged = model.merge_and_unload()
        merged_logits = merged(input_ids=probe).logits
    merge_error = (merged_logits - adapted).abs().max().item()

    metrics = result.metrics
    fallbacks = torch.tpu.fallback_stats()
    print(f"\ntrain loss {metrics['train_loss']:.3f}, {metrics['train_samples_per_second']:.0f} samples/s, "
          f"{metrics['train_runtime']:.1f} s")
    print(f"held-out loss {before:.3f} -> {after:.3f} nats/char (perplexity {math.exp(before):.1f} -> "
          f"{math.exp(after):.1f}; a uniform guess: {math.log(len(chars)):.2f})")
    print(f"merged model on {next(merged.parameters()).device}: logits within {merge_error:.1e} of the adapted model")
    print(f"peak device memory {torch.tpu.max_memory_allocated() / 2**20:.1f} MiB, "
          f"CPU fallbacks: {fallbacks if fallbacks else 'none'}")


if __name__ == "__main__":
    main()
