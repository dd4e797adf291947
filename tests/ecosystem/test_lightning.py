"""Lightning's Trainer on tpu through torch_tpu/lightning.py: by name
("tpu", "torch_tpu", "auto") and by instance, fit and validate against the
same fit on the CPU; bf16-mixed autocasting on tpu; device parsing and its
errors; the standalone pytorch_lightning package too. The fits on tpu run
with every CPU fallback turned into an error."""
import importlib
import importlib.util
from typing import Any

import pytest
import torch

pl = pytest.importorskip("lightning.pytorch", reason="lightning is a test dependency (scripts/setup.sh)")
from conftest import run_python  # noqa: E402
from torch_tpu.lightning import TPUAccelerator, accelerator_class  # noqa: E402

STEPS = 6


def make_module(base: type) -> Any:
    class Regressor(base):
        """Records, from inside training_step, where the parameters are and
        what a matrix product there returns."""

        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
            self.seen: set[tuple[str, torch.dtype]] = set()

        def training_step(self, batch: Any, index: int) -> torch.Tensor:
            x, y = batch
            out = self.net(x)
            self.seen.add((next(self.parameters()).device.type, out.dtype))
            loss = torch.nn.functional.mse_loss(out.float(), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch: Any, index: int) -> None:
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.net(x).float(), y))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    return Regressor()


def loaders() -> tuple[torch.utils.data.DataLoader, torch.utils.data.DataLoader]:
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(48, 6, generator=g), torch.randn(48, 1, generator=g))
    return (torch.utils.data.DataLoader(data, batch_size=8),
            torch.utils.data.DataLoader(data, batch_size=16))


def fit(package: Any, accelerator: Any, **options: Any) -> tuple[Any, Any, list[dict[str, float]]]:
    module = make_module(package.LightningModule)
    trainer = package.Trainer(accelerator=accelerator, devices=1, max_steps=STEPS, logger=False,
                              enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                              **options)
    train, val = loaders()
    trainer.fit(module, train, val)
    results = trainer.validate(module, val, verbose=False)
    return trainer, module, results


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().cpu() for name, value in module.state_dict().items()}


@pytest.fixture(scope="module")
def cpu_run() -> tuple[dict[str, torch.Tensor], list[dict[str, float]]]:
    trainer, module, results = fit(pl, "cpu")
    assert type(trainer.accelerator).__name__ == "CPUAccelerator"
    assert module.seen == {("cpu", torch.float32)}
    return weights(module), results


@pytest.mark.parametrize("accelerator", ["tpu", "torch_tpu", "auto", "instance"])
def test_fit_and_validate_match_cpu(accelerator, cpu_run, native_only):
    if accelerator == "tpu" and importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("torch_xla is installed: the name 'tpu' is Lightning's XLA accelerator (torch_tpu/lightning.py)")
    chosen = TPUAccelerator() if accelerator == "instance" else accelerator
    trainer, module, results = fit(pl, chosen)
    assert isinstance(trainer.accelerator, TPUAccelerator)
    assert trainer.strategy.root_device == torch.device("tpu", 0)
    assert module.seen == {("tpu", torch.float32)}
    assert trainer.global_step == STEPS
    cpu_weights, cpu_results = cpu_run
    torch.testing.assert_close(weights(module), cpu_weights, rtol=1e-5, atol=1e-6)
    assert results[0]["val_loss"] == pytest.approx(cpu_results[0]["val_loss"], rel=1e-5)


def test_ddp_strategy_on_one_chip():
    # strategy="ddp" wraps the module in DistributedDataParallel over
    # tpu_dist (one process); the training is that of the same strategy on
    # the CPU (gloo). In a fresh interpreter: Lightning's DDP sets LOCAL_RANK,
    # WORLD_SIZE, ... in os.environ and leaves its launcher behind.
    code = """
import torch, lightning.pytorch as pl

class Regressor(pl.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
        self.seen = set()
    def training_step(self, batch, index):
        self.seen.add(next(self.parameters()).device.type)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)
    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)

def run(accelerator):
    g = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(48, 6, generator=g), torch.randn(48, 1, generator=g))
    module = Regressor()
    trainer = pl.Trainer(accelerator=accelerator, devices=1, strategy="ddp", max_steps=6, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=8))
    config = torch.distributed.get_backend_config()
    torch.distributed.destroy_process_group()
    return type(trainer.strategy).__name__, module.seen, config, torch.cat([p.detach().cpu().flatten() for p in module.parameters()])

cpu, tpu = run("cpu"), run("tpu")
assert tpu[:2] == ("DDPStrategy", {"tpu"}), tpu[:2]
assert "tpu:tpu_dist" in tpu[2], tpu[2]
torch.testing.assert_close(tpu[3], cpu[3], rtol=1e-5, atol=1e-6)
print("OK")
"""
    result = run_python(code, timeout=180)
    assert result.returncode == 0 and result.stdout.strip().endswith("OK"), result.stderr[-3000:]


def test_bf16_mixed_autocasts_on_tpu(cpu_run, native_only):
    trainer, module, results = fit(pl, "torch_tpu", precision="bf16-mixed")
    assert trainer.precision_plugin.device == "tpu"
    assert module.seen == {("tpu", torch.bfloat16)}
    assert all(p.dtype == torch.float32 for p in module.parameters())
    # bf16 products: only close to the float32 CPU run.
    assert results[0]["val_loss"] == pytest.approx(cpu_run[1][0]["val_loss"], rel=3e-2)


def test_devices():
    assert TPUAccelerator.parse_devices(1) == [0]
    assert TPUAccelerator.parse_devices("auto") == [0]
    assert TPUAccelerator.parse_devices(-1) == list(range(torch.tpu.device_count()))
    assert TPUAccelerator.parse_devices("0,1") == [0, 1]
    assert TPUAccelerator.get_parallel_devices([1]) == [torch.device("tpu", 1)]
    assert TPUAccelerator.auto_device_count() == 1
    assert TPUAccelerator.is_available()
    for bad in (0, torch.tpu.device_count() + 1, [0, 0], "x", None):
        with pytest.raises((ValueError, pl.utilities.exceptions.MisconfigurationException)):
            TPUAccelerator.parse_devices(bad)
    with pytest.raises(pl.utilities.exceptions.MisconfigurationException, match="runs on one tpu chip"):
        pl.Trainer(accelerator="torch_tpu", devices=2, logger=False)


def test_second_chip_and_device_stats():
    trainer = pl.Trainer(accelerator="torch_tpu", devices=[1], logger=False)
    assert trainer.strategy.root_device == torch.device("tpu", 1)
    x = torch.ones(1024, device="tpu:1")
    stats = trainer.accelerator.get_device_stats(torch.device("tpu", 1))
    assert stats == dict(torch.tpu.memory_stats(1))
    assert stats["allocated_bytes.all.current"] >= x.numel() * 4


def test_registry_names():
    registry = pl.accelerators.AcceleratorRegistry
    assert registry["torch_tpu"]["accelerator"] is TPUAccelerator
    if importlib.util.find_spec("torch_xla") is None:
        assert registry["tpu"]["accelerator"] is TPUAccelerator
    else:
        assert registry["tpu"]["accelerator"] is pl.accelerators.XLAAccelerator


def test_standalone_pytorch_lightning(cpu_run):
    standalone = pytest.importorskip("pytorch_lightning", reason="the standalone package is optional")
    ours = accelerator_class("pytorch_lightning")
    assert standalone.accelerators.AcceleratorRegistry["torch_tpu"]["accelerator"] is ours
    for chosen in ("torch_tpu", ours()):
        trainer, module, results = fit(standalone, chosen)
        assert isinstance(trainer.accelerator, ours) and module.seen == {("tpu", torch.float32)}
        torch.testing.assert_close(weights(module), cpu_run[0], rtol=1e-5, atol=1e-6)
    assert importlib.import_module("torch_tpu.lightning").accelerator_class("pytorch_lightning") is ours


def test_accelerator_imported_before_lightning():
    """``from torch_tpu.lightning import TPUAccelerator`` first imports
    Lightning, whose import hook registers the class: one class, both ways."""
    run = run_python("""
        from torch_tpu.lightning import TPUAccelerator
        import lightning.pytorch as pl
        assert pl.accelerators.AcceleratorRegistry["torch_tpu"]["accelerator"] is TPUAccelerator
        for chosen in (TPUAccelerator(), "torch_tpu"):
            trainer = pl.Trainer(accelerator=chosen, devices=1, logger=False)
            assert isinstance(trainer.accelerator, TPUAccelerator), trainer.accelerator
            print(trainer.strategy.root_device)
    """)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["tpu:0", "tpu:0"]


def test_pytorch_lightning_imported_before_torch():
    """``import pytorch_lightning`` before torch: its own code imports torch,
    whose autoload imports torch-tpu halfway through pytorch_lightning's
    import; the integration waits for that import to finish (it used to run
    at once on the half-imported package, fail, and leave "auto" on the CPU
    and "tpu" to XLA)."""
    pytest.importorskip("pytorch_lightning", reason="the standalone package is optional")
    run = run_python("""
        import warnings
        warnings.simplefilter("error", RuntimeWarning)
        import pytorch_lightning as pl
        import torch
        for chosen in ("auto", "torch_tpu", "tpu"):
            trainer = pl.Trainer(accelerator=chosen, devices=1, logger=False, enable_progress_bar=False)
            print(type(trainer.accelerator).__name__, trainer.strategy.root_device)
    """)
    assert run.returncode == 0, run.stderr
    expected = ["TPUAccelerator", "tpu:0"] * (3 if importlib.util.find_spec("torch_xla") is None else 2)
    assert run.stdout.split() == expected


def test_strategy_on_the_cpu_is_refused_at_fit():
    """strategy="single_device" is the registry's SingleDeviceStrategy on the
    CPU: the Trainer is built (the device summary used to raise ValueError
    "expected a tpu device, got cpu" from the constructor) and fit refuses
    it, as CUDAAccelerator.setup_device does ("Device should be GPU")."""
    trainer = pl.Trainer(accelerator="tpu", devices=1, strategy="single_device", max_steps=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    assert trainer.strategy.root_device == torch.device("cpu")
    train, _ = loaders()
    with pytest.raises(pl.utilities.exceptions.MisconfigurationException, match="needs a tpu device, got cpu"):
        trainer.fit(make_module(pl.LightningModule), train)
