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

MODES = ["strict", "debug", "fused"]


def pytest_addoption(parser):
    parser.addoption("--tpu-mode", default="strict", choices=["strict", "fused"],
                     help="the execution mode every test starts in (CI runs the suite in both); "
                          "subprocesses inherit it through TORCH_TPU_DEFER_AND_FUSE")


def pytest_configure(config):
    global SESSION_MODE
    SESSION_MODE = config.getoption("--tpu-mode")
    os.environ["TORCH_TPU_DEFER_AND_FUSE"] = "1" if SESSION_MODE == "fused" else "0"
    torch.tpu.set_mode(SESSION_MODE)


SESSION_MODE = "strict"


@pytest.fixture(autouse=True)
def _session_mode():
    """Every test starts in the session's mode, whatever the last one left."""
    if torch.tpu.get_mode() != SESSION_MODE:
        torch.tpu.set_mode(SESSION_MODE)
    yield


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
