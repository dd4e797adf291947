"""Set-up for the library integration tests (accelerate, transformers'
Trainer, PEFT, diffusers, Lightning).

Every model is built from a config: the Hugging Face hub is switched off
before any of its libraries is imported, so a test that tried to download
would fail instead of reaching the network. accelerate keeps its device
choice in process-wide singletons (``PartialState``, ``AcceleratorState``):
a CPU run would leave the next test on the CPU, so each test starts with
fresh ones, as accelerate's own test cases do."""
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


def _reset_accelerate() -> None:
    import sys

    if "accelerate.state" not in sys.modules:
        return
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    _reset_accelerate()
    yield
    _reset_accelerate()


@pytest.fixture(autouse=True)
def _quiet_transformers():
    """Trainer logs a notice per run (tiny configs' token ids, loss type)."""
    try:
        import transformers
    except ImportError:
        yield
        return
    previous = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    yield
    transformers.logging.set_verbosity(previous)
