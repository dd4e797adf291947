"""Whole models on tpu against the CPU backend: the one-line promise,
model.to("tpu"), including what it must preserve (shared parameters,
Parameter identity, optimizer state) and Hugging Face models built from
configs (no downloads)."""
import copy

import pytest
import torch


class TiedLM(torch.nn.Module):
    """An embedding whose matrix is also the output projection, as in GPT-2."""

    def __init__(self, vocab: int = 50, dim: int = 16):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.mix = torch.nn.Linear(dim, dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.tanh(self.mix(self.embed(ids))))


def test_to_keeps_parameter_identity_and_tied_weights():
    model = TiedLM()
    weight = model.embed.weight
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # built before the move, as people do
    model.to("tpu")
    assert model.embed.weight is weight and model.head.weight is weight
    assert weight.device.type == "tpu" and isinstance(weight, torch.nn.Parameter)
    assert opt.param_groups[0]["params"][0] is weight
    model.to("cpu")
    assert model.head.weight is model.embed.weight and weight.device.type == "cpu"
    t = torch.ones(3)
    t.data = torch.zeros(3, device="tpu")
    assert t.device.type == "tpu" and t.cpu().tolist() == [0.0, 0.0, 0.0]


def test_tied_model_training_matches_cpu():
    torch.manual_seed(0)
    cpu_model = TiedLM()
    tpu_model = copy.deepcopy(cpu_model).to("tpu")
    assert tpu_model.head.weight is tpu_model.embed.weight
    ids = torch.randint(0, 50, (4, 12))
    for model, device in ((cpu_model, "cpu"), (tpu_model, "tpu")):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(3):
            logits = model(ids.to(device))
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.to(device).flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
    for p_cpu, p_tpu in zip(cpu_model.parameters(), tpu_model.parameters()):
        torch.testing.assert_close(p_tpu.detach().cpu(), p_cpu.detach(), rtol=1e-4, atol=1e-5)


def test_small_cnn_training_step_matches_cpu():
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(8 * 4 * 4, 10))
    twin = copy.deepcopy(net).to("tpu")
    x, y = torch.randn(6, 3, 8, 8), torch.randint(0, 10, (6,))
    for model, device in ((net, "cpu"), (twin, "tpu")):
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for _ in range(2):
            loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
    for a, b in zip(net.state_dict().values(), twin.state_dict().values()):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-5)


transformers = pytest.importorskip("transformers", reason="transformers is a test dependency (scripts/setup.sh)")


def _gpt2():
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=97, n_positions=64,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                     eos_token_id=0)
    return transformers.GPT2LMHeadModel(config).eval()


def test_gpt2_forward_backward_and_generate_match_cpu():
    torch.manual_seed(0)
    model = _gpt2()
    ids = torch.randint(0, 97, (2, 16))
    ref = model(ids, labels=ids)
    ref.loss.backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    ref_generated = model.generate(ids[:1], max_new_tokens=6, do_sample=False)
    model.zero_grad(set_to_none=True)
    model.to("tpu")
    assert model.lm_head.weight is model.transformer.wte.weight
    out = model(ids.to("tpu"), labels=ids.to("tpu"))
    out.loss.backward()
    torch.testing.assert_close(out.logits.cpu(), ref.logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.loss.cpu(), ref.loss, rtol=1e-5, atol=1e-6)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad.cpu(), ref_grads[name], rtol=1e-4, atol=1e-5, msg=name)
    generated = model.generate(ids[:1].to("tpu"), max_new_tokens=6, do_sample=False)
    assert torch.equal(generated.cpu(), ref_generated)


def test_bert_classifier_matches_cpu_and_runs_under_autocast():
    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=2, num_attention_heads=2, hidden_size=32,
                                     intermediate_size=64, vocab_size=97, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0, num_labels=3)
    model = transformers.BertForSequenceClassification(config).eval()
    ids = torch.randint(0, 97, (3, 10))
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[0, 7:] = 0
    ref = model(input_ids=ids, attention_mask=mask).logits
    model.to("tpu")
    got = model(input_ids=ids.to("tpu"), attention_mask=mask.to("tpu")).logits
    torch.testing.assert_close(got.cpu(), ref, rtol=1e-4, atol=1e-5)
    with torch.autocast("tpu", dtype=torch.bfloat16):
        low = model(input_ids=ids.to("tpu"), attention_mask=mask.to("tpu")).logits
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.float().cpu(), ref, rtol=5e-2, atol=5e-2)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "LSTMCell", "GRUCell"])
def test_recurrent_layers_match_cpu(kind):
    # PyTorch runs RNNs on accelerators through fused cell ops that have no
    # CPU kernel; the tpu provides them, forward and backward.
    torch.manual_seed(0)
    if kind in ("LSTM", "GRU"):
        cpu_model = getattr(torch.nn, kind)(5, 7, num_layers=2, batch_first=True, bidirectional=True)
        x = torch.randn(3, 4, 5)
    else:
        cpu_model = getattr(torch.nn, kind)(5, 7)
        x = torch.randn(3, 5)
    tpu_model = copy.deepcopy(cpu_model).to("tpu")

    def run(model, inp):
        out = model(inp)
        leaves = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        sum((t * t).sum() for t in leaves).backward()
        return leaves

    x_cpu = x.clone().requires_grad_()
    x_tpu = x.to("tpu").requires_grad_()
    for a, b in zip(run(tpu_model, x_tpu), run(cpu_model, x_cpu)):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(x_tpu.grad.cpu(), x_cpu.grad, rtol=1e-4, atol=1e-5)
    for (name, p_tpu), p_cpu in zip(tpu_model.named_parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p_tpu.grad.cpu(), p_cpu.grad, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("family", ["llama", "t5", "vit"])
def test_more_hugging_face_families_match_cpu(family):
    """Llama (grouped-query attention, rotary embeddings, RMSNorm), T5
    (encoder-decoder, relative position bias) and ViT (patch convolution):
    loss and every parameter gradient against CPU."""
    torch.manual_seed(0)
    ids = torch.randint(0, 97, (2, 12))
    if family == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64))
        inputs = dict(input_ids=ids, labels=ids)
    elif family == "t5":
        model = transformers.T5ForConditionalGeneration(transformers.T5Config(
            vocab_size=97, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0.0,
            decoder_start_token_id=0))
        inputs = dict(input_ids=ids, labels=ids)
    else:
        model = transformers.ViTForImageClassification(transformers.ViTConfig(
            image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, num_labels=5, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
        inputs = dict(pixel_values=torch.randn(2, 3, 16, 16), labels=torch.tensor([1, 3]))
    model.eval()
    twin = copy.deepcopy(model).to("tpu")
    ref = model(**inputs).loss
    ref.backward()
    got = twin(**{k: v.to("tpu") for k, v in inputs.items()}).loss
    got.backward()
    torch.testing.assert_close(got.cpu(), ref, rtol=1e-5, atol=1e-6)
    for (name, p_cpu), p_tpu in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p_tpu.grad.cpu(), p_cpu.grad, rtol=1e-3, atol=1e-5, msg=name)
