"""torch.tpu device management, properties and registration, against the
meanings of torch.cuda."""
import pytest
import torch

from conftest import run_python


def test_autoload_with_import_torch_only():
    r = run_python(
        """
        import torch
        x = torch.ones(3, device="tpu")
        print(x.device, x.is_tpu, torch.tpu.is_available(), (x * 2).cpu().tolist())
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["tpu:0", "True", "True", "[2.0,", "2.0,", "2.0]"]


def test_import_torch_tpu_explicitly():
    r = run_python("import torch_tpu, torch; print(torch.device('tpu').type)", {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "tpu"


def test_wrong_torch_version_is_a_clear_import_error():
    r = run_python(
        """
        import torch
        torch.__version__ = "2.99.0"
        try:
            import torch_tpu
        except ImportError as e:
            print("ImportError:", e)
        """,
        {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert r.returncode == 0, r.stderr
    assert "ImportError: torch-tpu was built for torch==2.13.0" in r.stdout
    assert "2.99.0" in r.stdout


def test_counts_and_current_device():
    assert torch.tpu.is_available()
    assert torch.tpu.device_count() == 2
    assert torch.accelerator.device_count() == 2
    assert torch.accelerator.current_accelerator().type == "tpu"
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(1)
    try:
        assert torch.tpu.current_device() == 1
        assert torch.empty(2, device="tpu").device == torch.device("tpu:1")
    finally:
        torch.tpu.set_device(0)
    with torch.tpu.device(1):
        assert torch.tpu.current_device() == 1
        assert torch.accelerator.current_device_index() == 1
    assert torch.tpu.current_device() == 0


def test_device_properties_follow_generation():
    p = torch.tpu.get_device_properties(0)
    assert p.generation == "v5e"
    assert p.name == torch.tpu.get_device_name(0) == "TPU v5e (virtual)"
    assert p.total_memory == 16 * 2**30
    assert p.hbm_bandwidth > 0 and p.peak_bf16_flops > 0
    assert p.mxu_size == 128
    assert p.chip_count == 2
    assert torch.tpu.get_device_capability() == (5, 0)


@pytest.mark.parametrize(
    "gen,hbm,mxu,cap",
    [("v5e", 16, 128, (5, 0)), ("v5p", 95, 128, (5, 1)), ("v6e", 32, 256, (6, 0)), ("v7x", 192, 256, (7, 0))],
)
def test_generations_and_memory_limit(gen, hbm, mxu, cap):
    r = run_python(
        """
        import torch
        p = torch.tpu.get_device_properties()
        print(p.total_memory, p.mxu_size, *torch.tpu.get_device_capability(), torch.tpu.device_count())
        """,
        {"TORCH_TPU_GENERATION": gen, "TORCH_TPU_CHIPS": "3"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(hbm * 2**30), str(mxu), str(cap[0]), str(cap[1]), "3"]
    r = run_python(
        "import torch; print(torch.tpu.get_device_properties().total_memory)",
        {"TORCH_TPU_GENERATION": gen, "TORCH_TPU_MEMORY_LIMIT": "512M"},
    )
    assert r.stdout.strip() == str(512 * 2**20), r.stderr


def test_bad_configuration_is_reported():
    r = run_python(
        """
        import torch
        print(torch.tpu.is_available())
        try:
            torch.empty(1, device="tpu")
        except (RuntimeError, ValueError) as e:
            print("error:", e)
        """,
        {"TORCH_TPU_GENERATION": "v99"},
    )
    assert "TORCH_TPU_GENERATION" in r.stdout and "v99" in r.stdout, r.stdout + r.stderr


def test_tensor_and_module_methods():
    x = torch.arange(4.0)
    y = x.tpu()
    assert y.is_tpu and not x.is_tpu
    assert y.device == torch.device("tpu", 0)
    m = torch.nn.Linear(3, 2).tpu()
    assert all(p.device.type == "tpu" for p in m.parameters())
    assert torch.device("tpu:1").index == 1
    s = y.untyped_storage()
    assert s.device.type == "tpu" and s.is_tpu


def test_amp_supported_dtypes_and_autocast():
    assert torch.bfloat16 in torch.tpu.get_amp_supported_dtype()
    a = torch.randn(4, 8, device="tpu")
    b = torch.randn(8, 3, device="tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        assert torch.get_autocast_dtype("tpu") == torch.bfloat16
        assert torch.is_autocast_enabled("tpu")


def test_synchronize_and_accelerator_calls():
    x = torch.ones(1000, device="tpu") * 3
    torch.tpu.synchronize()
    torch.accelerator.synchronize()
    torch.tpu.synchronize("tpu:1")
    assert x.sum().item() == 3000


def test_generator_device():
    g = torch.Generator(device="tpu")
    assert g.device.type == "tpu"
    g1 = torch.Generator(device="tpu:1")
    assert g1.device == torch.device("tpu:1")


def test_peer_access_between_chips():
    # Two chips (conftest): each reaches the other, and, as cudaDeviceCanAccessPeer
    # answers for a device and itself, a chip is not its own peer.
    assert torch.tpu.can_device_access_peer(0, 1) and torch.tpu.can_device_access_peer("tpu:1", "tpu:0")
    assert not torch.tpu.can_device_access_peer(torch.device("tpu:1"), 1)
    with pytest.raises(RuntimeError, match="tpu:7"):
        torch.tpu.can_device_access_peer(0, 7)
    # What "peer" promises: a copy between the two chips gives the same values.
    x = torch.randn(5, 3)
    assert torch.equal(x.to("tpu:0").to("tpu:1").cpu(), x)


def test_cuda_names_for_errors_init_and_capture():
    assert torch.tpu.OutOfMemoryError is torch.cuda.OutOfMemoryError
    torch.tpu.init()
    assert torch.tpu.is_initialized()
    assert torch.tpu.is_current_stream_capturing() is False
    with torch.tpu.stream(torch.tpu.Stream()):
        assert torch.tpu.is_current_stream_capturing() is False
