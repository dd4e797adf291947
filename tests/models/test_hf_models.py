"""Hugging Face models, built from tiny configs (nothing downloaded), on tpu
against PyTorch's CPU backend with every CPU fallback turned into an error:
forward, every gradient of loss.backward(), 20 AdamW steps, and greedy
generation with the KV cache for the decoders. In float32 and under
torch.autocast(dtype=torch.bfloat16).

Tolerances (stated per check below): float32 forward rtol 1e-4 / atol 1e-5
on the loss and 2e-4 / 2e-4 on logits; gradients rtol 2e-3 / atol 2e-4.
Under bfloat16 autocast both backends round every matrix product to
bfloat16 but in different orders, so the loss is compared within 3e-2
(relative) and the gradients by cosine similarity (> 0.99 over all
parameters); generation is compared in float32 only (a bfloat16 argmax tie
may flip either way)."""
import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

BATCH, SEQ, VOCAB = 2, 12, 96


def gpt2():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=4, vocab_size=VOCAB, n_positions=64, bos_token_id=0, eos_token_id=1))


def llama():
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
        vocab_size=VOCAB, max_position_embeddings=64, bos_token_id=0, eos_token_id=1))


def mixtral():
    return transformers.MixtralForCausalLM(transformers.MixtralConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
        vocab_size=VOCAB, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
        bos_token_id=0, eos_token_id=1))


def bert():
    return transformers.BertForMaskedLM(transformers.BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64, vocab_size=VOCAB,
        max_position_embeddings=64))


def t5():
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        num_layers=2, num_decoder_layers=2, d_model=32, d_kv=8, num_heads=4, d_ff=64, vocab_size=VOCAB,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))


def whisper():
    return transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(
        encoder_layers=2, decoder_layers=2, d_model=32, encoder_attention_heads=4, decoder_attention_heads=4,
        encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=VOCAB, num_mel_bins=8, max_source_positions=16,
        max_target_positions=32, pad_token_id=0, bos_token_id=2, eos_token_id=1, decoder_start_token_id=2,
        begin_suppress_tokens=None, suppress_tokens=None))


def vit():
    return transformers.ViTForImageClassification(transformers.ViTConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64, image_size=16,
        patch_size=4, num_channels=3, num_labels=5))


def resnet():
    return transformers.ResNetForImageClassification(transformers.ResNetConfig(
        num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=5))


def batch(name: str):
    """The model's inputs (CPU tensors), fixed by a seed."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, VOCAB, (BATCH, SEQ), generator=g)
    if name in ("gpt2", "llama", "mixtral"):
        return dict(input_ids=ids, labels=ids)
    if name == "bert":
        return dict(input_ids=ids, labels=torch.where(torch.rand(ids.shape, generator=g) < 0.3, ids, -100))
    if name == "t5":
        return dict(input_ids=ids, labels=ids[:, :6].contiguous())
    if name == "whisper":
        return dict(input_features=torch.randn(BATCH, 8, 32, generator=g), labels=ids[:, :6].contiguous())
    return dict(pixel_values=torch.randn(BATCH, 3, 16, 16, generator=g), labels=torch.tensor([1, 4]))


MODELS = {"gpt2": gpt2, "llama": llama, "mixtral": mixtral, "bert": bert, "t5": t5, "whisper": whisper,
          "vit": vit, "resnet": resnet}
DECODERS = {"gpt2", "llama", "mixtral", "t5", "whisper"}


@pytest.fixture(autouse=True)
def native_only():
    torch.tpu.set_fallback_error(True)
    yield
    torch.tpu.set_fallback_error(False)


def pair(name):
    torch.manual_seed(0)
    cpu = MODELS[name]().eval()  # eval: dropout off, so both runs are deterministic
    return cpu, copy.deepcopy(cpu).to("tpu")


def to(inputs, device):
    return {k: v.to(device) for k, v in inputs.items()}


def autocast(device, bf16):
    return torch.autocast(device, dtype=torch.bfloat16, enabled=bf16)


def flat_grads(model):
    return torch.cat([p.grad.detach().float().cpu().flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("bf16", [False, True], ids=["float32", "bf16_autocast"])
@pytest.mark.parametrize("name", list(MODELS))
def test_forward_and_gradients_match_cpu(name, bf16):
    cpu, tpu = pair(name)
    inputs = batch(name)
    outs = []
    for model, device in ((cpu, "cpu"), (tpu, "tpu")):
        with autocast(device, bf16):
            out = model(**to(inputs, device))
        out.loss.backward()
        outs.append(out)
    loss_c, loss_t = outs[0].loss.detach(), outs[1].loss.detach().cpu()
    if not bf16:
        torch.testing.assert_close(loss_t, loss_c, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(outs[1].logits.detach().cpu(), outs[0].logits.detach(), rtol=2e-4, atol=2e-4)
        for (pname, pc), pt in zip(cpu.named_parameters(), tpu.parameters()):
            assert (pc.grad is None) == (pt.grad is None), pname
            if pc.grad is not None:
                torch.testing.assert_close(pt.grad.cpu(), pc.grad, rtol=2e-3, atol=2e-4, msg=pname)
    else:
        torch.testing.assert_close(loss_t, loss_c, rtol=3e-2, atol=1e-3)
        gc, gt = flat_grads(cpu), flat_grads(tpu)
        assert torch.nn.functional.cosine_similarity(gc, gt, dim=0) > 0.99


@pytest.mark.parametrize("bf16", [False, True], ids=["float32", "bf16_autocast"])
@pytest.mark.parametrize("name", list(MODELS))
def test_adamw_steps_lower_the_loss_as_on_cpu(name, bf16):
    cpu, tpu = pair(name)
    inputs = batch(name)
    curves = []
    for model, device in ((cpu, "cpu"), (tpu, "tpu")):
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        curve = []
        for _ in range(20):
            with autocast(device, bf16):
                loss = model(**to(inputs, device)).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            curve.append(loss.item())
        curves.append(curve)
    cpu_curve, tpu_curve = curves
    assert tpu_curve[-1] < 0.9 * tpu_curve[0]  # it learns
    tol = 3e-2 if bf16 else 2e-3
    for step, (c, t) in enumerate(zip(cpu_curve, tpu_curve)):
        assert abs(t - c) <= tol * abs(c) + 1e-4, f"step {step}: cpu {c} tpu {t}"


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_greedy_generation_matches_cpu(name):
    cpu, tpu = pair(name)
    inputs = {k: v for k, v in batch(name).items() if k != "labels"}
    if name in ("gpt2", "llama", "mixtral"):
        inputs["input_ids"] = inputs["input_ids"][:, :5]
        inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    tokens = []
    for model, device in ((cpu, "cpu"), (tpu, "tpu")):
        with torch.no_grad():
            out = model.generate(**to(inputs, device), max_new_tokens=8, do_sample=False, use_cache=True,
                                 pad_token_id=0)
        tokens.append(out.cpu())
    assert torch.equal(tokens[0], tokens[1])
