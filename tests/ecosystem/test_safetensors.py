"""safetensors with the device strings users write: load_file and safe_open
onto "tpu", "tpu:N" and torch.device("tpu", N) (torch_tpu/_safetensors.py)."""
import pytest
import safetensors
import torch
from safetensors.torch import load_file, save_file

from conftest import run_python


@pytest.fixture
def saved(tmp_path):
    tensors = {
        "weight": torch.randn(4, 6),
        "bias": torch.arange(6, dtype=torch.int64),
        "half": torch.randn(3, 5).to(torch.bfloat16),
    }
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    return path, tensors


@pytest.mark.parametrize("device", ["tpu", "tpu:0", "tpu:1", torch.device("tpu", 1), torch.device("tpu")])
def test_load_file_onto_tpu(saved, device):
    path, tensors = saved
    loaded = load_file(str(path), device=device)
    want = torch.device(device) if not isinstance(device, torch.device) else device
    assert set(loaded) == set(tensors)
    for name, t in tensors.items():
        assert loaded[name].device == torch.device("tpu", want.index or 0)
        assert loaded[name].dtype == t.dtype and torch.equal(loaded[name].cpu(), t)


def test_safe_open_tensors_and_slices(saved):
    path, tensors = saved
    with safetensors.safe_open(str(path), framework="pt", device="tpu:1") as f:
        assert sorted(f.keys()) == sorted(tensors)
        w = f.get_tensor("weight")
        part = f.get_slice("weight")[1:3, ::2]
    assert w.device == torch.device("tpu:1") and torch.equal(w.cpu(), tensors["weight"])
    assert part.device == torch.device("tpu:1") and torch.equal(part.cpu(), tensors["weight"][1:3, ::2])


def test_other_devices_unchanged_and_bad_chip_is_clear(saved):
    path, tensors = saved
    assert load_file(str(path), device="cpu")["weight"].device.type == "cpu"
    assert load_file(str(path), device=0)["weight"].device == torch.device("tpu:0")
    with pytest.raises(RuntimeError, match="tpu:9"):
        load_file(str(path), device="tpu:9")
    with pytest.raises(safetensors.SafetensorError, match="tpux"):
        load_file(str(path), device="tpux")


def test_safetensors_imported_before_torch(tmp_path):
    # safetensors' own package does not import torch: the hook must still
    # reach safe_open when torch (and so torch_tpu) comes second.
    code = f"""
import safetensors
import torch
from safetensors.torch import load_file, save_file
save_file({{"a": torch.ones(3)}}, {str(tmp_path / 'a.st')!r})
with safetensors.safe_open({str(tmp_path / 'a.st')!r}, "pt", device="tpu") as f:
    print(f.get_tensor("a").device, load_file({str(tmp_path / 'a.st')!r}, device="tpu")["a"].device)
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["tpu:0", "tpu:0"]
