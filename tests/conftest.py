"""Shared set-up for the pytest suites.

Two virtual chips, so that multi-chip paths run; set before torch is
imported, since the runtime reads its configuration once."""
import os
import subprocess
import sys
import textwrap

os.environ.setdefault("TORCH_TPU_CHIPS", "2")

import pytest  # noqa: E402
import torch  # noqa: E402  (autoloads torch_tpu)

MODES = ["strict", "debug"]


@pytest.fixture(params=MODES)
def mode(request):
    """Runs a test once per execution mode where the mode matters."""
    with torch.tpu.mode(request.param):
        yield request.param
    torch.tpu.synchronize()


@pytest.fixture
def native_only():
    """Makes any CPU fallback raise, to prove an op runs natively."""
    previous = torch.tpu.get_fallback_error()
    torch.tpu.set_fallback_error(True)
    yield
    torch.tpu.set_fallback_error(previous)


def run_python(code: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    """Runs a fresh interpreter (for configuration read at start-up, fork
    behaviour and autoload), returning the finished process."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
