"""torch.save / torch.load of tpu tensors, parameters and state_dicts, with
and without map_location, and safetensors files loaded onto tpu."""
import pytest
import torch


def test_tensor_roundtrip_keeps_device(tmp_path):
    x = torch.randn(3, 4)
    path = tmp_path / "t.pt"
    torch.save(x.to("tpu:1"), path)
    y = torch.load(path)
    assert y.device == torch.device("tpu:1") and torch.equal(y.cpu(), x)


@pytest.mark.parametrize(
    "location,expected",
    [("cpu", "cpu"), ("tpu", "tpu:0"), ("tpu:1", "tpu:1"), (torch.device("tpu:0"), "tpu:0"),
     ({"tpu:1": "tpu:0"}, "tpu:0")],
)
def test_map_location(tmp_path, location, expected):
    x = torch.arange(10.0)
    path = tmp_path / "t.pt"
    torch.save(x.to("tpu:1"), path)
    y = torch.load(path, map_location=location)
    assert y.device == torch.device(expected)
    assert torch.equal(y.cpu(), x)


def test_cpu_checkpoint_onto_tpu(tmp_path):
    path = tmp_path / "c.pt"
    torch.save({"w": torch.ones(2, 2)}, path)
    d = torch.load(path, map_location="tpu")
    assert d["w"].device.type == "tpu"


def test_views_keep_sharing(tmp_path):
    base = torch.arange(12.0, device="tpu")
    path = tmp_path / "v.pt"
    torch.save({"base": base, "view": base[2:8:2]}, path)
    d = torch.load(path)
    assert d["view"].untyped_storage().data_ptr() == d["base"].untyped_storage().data_ptr()
    assert d["view"].cpu().tolist() == [2.0, 4.0, 6.0]


def test_module_state_dict_and_parameters(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3).tpu()
    path = tmp_path / "m.pt"
    torch.save(m.state_dict(), path)
    sd = torch.load(path)
    assert all(v.device.type == "tpu" for v in sd.values())
    m2 = torch.nn.Linear(4, 3).tpu()
    m2.load_state_dict(sd)
    for a, b in zip(m.parameters(), m2.parameters()):
        assert torch.equal(a.cpu(), b.cpu())
    torch.save(m.weight, tmp_path / "p.pt")
    p = torch.load(tmp_path / "p.pt")
    assert isinstance(p, torch.nn.Parameter) and p.device.type == "tpu"
    cpu_sd = torch.load(path, map_location="cpu")
    assert all(v.device.type == "cpu" for v in cpu_sd.values())


def test_missing_chip_is_a_clear_error(tmp_path):
    from conftest import run_python

    path = tmp_path / "t.pt"
    torch.save(torch.ones(2, device="tpu:1"), path)
    r = run_python(
        f"""
        import torch
        try:
            torch.load({str(path)!r})
        except RuntimeError as e:
            print("error:", e)
        """,
        {"TORCH_TPU_CHIPS": "1"},
    )
    assert "invalid device index tpu:1 (this process has 1 tpu chip" in r.stdout, r.stdout + r.stderr


def test_safetensors_load_onto_tpu(tmp_path):
    safetensors = pytest.importorskip("safetensors.torch", reason="safetensors is a test dependency")
    tensors = {"a": torch.randn(3, 3), "b": torch.arange(5, dtype=torch.int64), "c": torch.randn(2).bfloat16()}
    path = str(tmp_path / "w.safetensors")
    safetensors.save_file(tensors, path)
    # safetensors' device parser knows only its built-in device names; an
    # index means "chip N of the current accelerator", which is tpu here.
    loaded = safetensors.load_file(path, device=1)
    for k, v in tensors.items():
        assert loaded[k].device == torch.device("tpu:1") and torch.equal(loaded[k].cpu(), v)
    model = torch.nn.Linear(3, 3).to("tpu")
    model.load_state_dict({"weight": tensors["a"], "bias": torch.zeros(3)})
    assert model.weight.device.type == "tpu" and torch.equal(model.weight.detach().cpu(), tensors["a"])
    safetensors.save_file({k: v.to("tpu") for k, v in tensors.items()}, path)
    again = safetensors.load_file(path)
    assert all(torch.equal(again[k], v) for k, v in tensors.items())
