"""PyTorch's own module database (ModuleInfo): every nn module's sample
constructions, trained one step on tpu and on the CPU backend; outputs,
parameter gradients and buffers (running statistics) must agree."""
import copy
import itertools
import warnings

import pytest
import torch
from torch.testing._internal.common_modules import module_db
from torch.utils._pytree import tree_leaves, tree_map

# Modules whose outputs are random by definition, or whose parameters are
# initialised on first use from the device's own generator (Lazy*): only
# that they run is checked.
RANDOM = ("Dropout", "AlphaDropout", "FeatureAlphaDropout", "RReLU", "FractionalMaxPool", "Lazy")


def moved(x, device):
    if isinstance(x, torch.Tensor):
        return x.detach().to(device).requires_grad_(x.requires_grad)
    return x


def floats(out):
    return [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]


@pytest.mark.parametrize("info", module_db, ids=lambda i: i.module_cls.__name__ + (
    f".{i.variant_name}" if getattr(i, "variant_name", "") else ""))
def test_module_matches_cpu(info):
    warnings.simplefilter("ignore")
    random = info.module_cls.__name__.startswith(RANDOM)
    samples = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True, training=True)
    for sample in itertools.islice(samples, 2):
        torch.manual_seed(0)
        try:
            cpu_module = info.module_cls(*sample.constructor_input.args, **sample.constructor_input.kwargs)
            tpu_module = copy.deepcopy(cpu_module).to("tpu")
            cpu_args = sample.forward_input.args, sample.forward_input.kwargs
            tpu_args = tree_map(lambda x: moved(x, "tpu"), cpu_args)
            # Two forward passes each, so running statistics move twice.
            for _ in range(2):
                expected = cpu_module(*cpu_args[0], **cpu_args[1])
        except Exception:
            continue  # the CPU backend rejects this sample too
        for _ in range(2):
            got = tpu_module(*tpu_args[0], **tpu_args[1])
        assert all(t.device.type == "tpu" for t in floats(got))
        if random:
            continue
        for g, e in zip(floats(got), floats(expected)):
            torch.testing.assert_close(g.detach().cpu(), e.detach(), rtol=1e-3, atol=1e-4, equal_nan=True)
        exp_f, got_f = floats(expected), floats(got)
        if exp_f and exp_f[0].requires_grad:
            sum(t.sum() for t in exp_f).backward()
            sum(t.sum() for t in got_f).backward()
            for (name, p_cpu), p_tpu in zip(cpu_module.named_parameters(), tpu_module.parameters()):
                if p_cpu.grad is not None:
                    torch.testing.assert_close(p_tpu.grad.cpu(), p_cpu.grad, rtol=1e-3, atol=1e-4, equal_nan=True,
                                               msg=name)
        for (name, b_cpu), b_tpu in zip(cpu_module.named_buffers(), tpu_module.buffers()):
            torch.testing.assert_close(b_tpu.cpu(), b_cpu, rtol=1e-3, atol=1e-4, equal_nan=True, msg=name)
