"""torch.compile on tpu tensors: Inductor refuses with a clear message that
names the backends that work, and those backends ("eager", "aot_eager")
give the CPU's results, forward and backward."""
import gc
import warnings

import pytest
import torch
from conftest import run_python

from torch_tpu import _compile


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    # Compiled graphs and failed compilations hold tensors in reference
    # cycles: free them, so later tests see no stray device memory.
    torch._dynamo.reset()
    gc.collect()


def _f(a, b):
    return torch.nn.functional.gelu(a @ b).sum(0) * 2.0 + 1.0


def _assert_clear(err: BaseException):
    text = str(err)
    assert "tpu" in text and "no compile backend" in text, text
    for backend in _compile.WORKING_BACKENDS:
        assert f"backend='{backend}'" in text, text
    assert "jax" not in text.lower(), text


@pytest.mark.parametrize("kwargs", [{}, {"backend": "inductor"}, {"dynamic": True}],
                         ids=["default", "inductor", "dynamic"])
def test_inductor_on_tpu_raises_clear_error(kwargs):
    a = torch.randn(5, 7, device="tpu")
    b = torch.randn(7, 3, device="tpu")
    with pytest.raises(RuntimeError) as info:
        torch.compile(_f, **kwargs)(a, b)
    _assert_clear(info.value)


def test_inductor_on_cpu_unaffected_by_registration():
    # Only the "tpu" entry of Inductor's registry is replaced.
    from torch._inductor.codegen import common

    common.init_backend_registration()
    assert common.get_scheduling_for_device("tpu") is _compile.NoTpuCodegen
    assert common.get_scheduling_for_device("cpu") is not _compile.NoTpuCodegen


@pytest.mark.parametrize("backend", _compile.WORKING_BACKENDS)
def test_working_backends_match_cpu(backend):
    torch.manual_seed(0)
    a, b = torch.randn(5, 7, requires_grad=True), torch.randn(7, 3, requires_grad=True)
    at = a.detach().to("tpu").requires_grad_()
    bt = b.detach().to("tpu").requires_grad_()
    want = _f(a, b)
    want.sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CPU-fallback notices, if any
        got = torch.compile(_f, backend=backend)(at, bt)
        got.sum().backward()
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(at.grad.cpu(), a.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bt.grad.cpu(), b.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", _compile.WORKING_BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_working_backends_train_a_module(backend, dtype):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    ref = ref.to(dtype)
    dev = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    dev = dev.to(dtype)
    dev.load_state_dict(ref.state_dict())
    dev = dev.to("tpu")
    x = torch.randn(8, 16, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = torch.compile(dev, backend=backend)(x.to("tpu"))
        out.square().mean().backward()
    want = ref(x)
    want.square().mean().backward()
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(out.detach().cpu(), want.detach(), rtol=tol, atol=tol)
    torch.testing.assert_close(dev[0].weight.grad.cpu(), ref[0].weight.grad, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "before",
    [
        "import torch._inductor.codegen.common",
        # Inductor filled its defaults (Pallas for "tpu") before torch_tpu loaded.
        "import torch._inductor.codegen.common as c; c.init_backend_registration()",
    ],
    ids=["inductor imported", "inductor initialised"],
)
def test_registration_when_inductor_loaded_first(before):
    proc = run_python(
        f"""
        import torch
        {before}
        import torch_tpu
        x = torch.ones(4, device="tpu")
        try:
            torch.compile(lambda a: a * 2)(x)
        except RuntimeError as e:
            print("RAISED", "backend='eager'" in str(e), "jax" in str(e).lower())
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RAISED True False" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_import_torch_does_not_load_inductor():
    proc = run_python(
        """
        import sys, torch
        x = torch.ones(2, device="tpu")
        print("LOADED", "torch._inductor.codegen.common" in sys.modules)
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "LOADED False" in proc.stdout, proc.stdout
