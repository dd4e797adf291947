"""PyTorch's own operator database (OpInfo) run on tpu against the CPU
backend: every op with float32 or int64 support, its first sample inputs
in those dtypes, through
native kernels where they exist and the CPU fallback elsewhere. This is
the broad proof that the fallback, copies and views compose correctly."""
import importlib.util
import itertools
import pathlib
import warnings

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_map

# tests/conformance/conformance.py, loaded by path (see test_conformance.py).
_spec = importlib.util.spec_from_file_location(
    "tpu_conformance", pathlib.Path(__file__).parent / "conformance" / "conformance.py")
conformance = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conformance)


@pytest.fixture(scope="module", autouse=True)
def _fast_sample_inputs():
    """The sample iterators' stack walk, skipped (conformance.no_test_fn_lookup)."""
    with conformance.no_test_fn_lookup():
        yield

# Ops whose values are random or uninitialised by definition: only the
# output's metadata is compared.
VALUES_UNDEFINED = {
    "bernoulli", "cauchy", "empty", "empty_like", "empty_permuted", "empty_strided", "exponential",
    "geometric", "log_normal", "multinomial", "new_empty", "new_empty_strided", "normal", "rand_like",
    "randint", "randint_like", "randn", "randn_like", "uniform", "nn.functional.alpha_dropout",
    "nn.functional.dropout", "nn.functional.dropout1d", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.feature_alpha_dropout", "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d", "nn.functional.rrelu", "nn.functional.scaled_dot_product_attention",
    "nn.functional.multi_head_attention_forward",
}
# Ops whose indices among equal values are in no specified order (PyTorch's
# CPU topk uses an unstable partial sort): the values must match, and the
# indices must pick those values out of the input.
TIE_ORDER_UNDEFINED = {"topk"}
# as_strided on a view reads the base's storage, which .to("tpu") does not
# carry over (it copies the view's elements), exactly as for CUDA.
STORAGE_DEPENDENT = {"as_strided"}
# PyTorch requires these index arguments to be CPU tensors on any device.
CPU_ONLY_ARGS = {"tensor_split"}
# Ops whose samples move results to another device on purpose.
DEVICE_CHANGING = {"to"}

CASES = [pytest.param(op, dtype, id=f"{op.name}{'.' + op.variant_test_name if op.variant_test_name else ''}-{dtype}")
         for dtype in (torch.float32, torch.int64) for op in op_db if dtype in op.supported_dtypes("cpu")]


def to_tpu(x):
    return x.to("tpu") if isinstance(x, torch.Tensor) else x


def kwargs_to_tpu(kwargs: dict) -> dict:
    """Tensors move to tpu; a factory's device="cpu" becomes "tpu"."""
    moved = tree_map(to_tpu, kwargs)
    if "device" in moved:
        moved["device"] = "tpu"
    return moved


def to_cpu(x):
    return x.cpu() if isinstance(x, torch.Tensor) else x


def produces_unsupported(result) -> bool:
    """Complex, sparse or 64-bit unsigned results: dtypes and layouts the
    virtual TPU does not have yet."""
    leaves = [t for t in torch.utils._pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]
    return any(t.is_complex() or t.layout != torch.strided or t.dtype in (torch.uint16, torch.uint32, torch.uint64)
               for t in leaves)


@pytest.mark.parametrize("op,dtype", CASES)
def test_op_matches_cpu(op, dtype):
    if op.name in STORAGE_DEPENDENT or op.name in CPU_ONLY_ARGS:
        pytest.skip(f"{op.name}: semantics differ for any non-CPU device (see the sets above)")
    torch.manual_seed(0)
    warnings.simplefilter("ignore")
    for sample in itertools.islice(op.sample_inputs("cpu", dtype), 2):
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:
            continue  # the CPU backend rejects this sample too
        inputs = [sample.input, *sample.args, *sample.kwargs.values()]
        if produces_unsupported(expected) or produces_unsupported(inputs):
            with pytest.raises((TypeError, NotImplementedError, RuntimeError)):
                op(*tree_map(to_tpu, (sample.input, *sample.args)), **kwargs_to_tpu(sample.kwargs))
            continue
        try:
            got = op(tree_map(to_tpu, sample.input), *tree_map(to_tpu, sample.args), **kwargs_to_tpu(sample.kwargs))
        except TypeError as e:
            # Real in, real out, complex inside (stft, hfft, irfft, ...):
            # complex dtypes are not on the virtual TPU yet; the error
            # must say so.
            assert "Complex" in str(e), str(e)
            continue
        for leaf in torch.utils._pytree.tree_leaves(got):
            if isinstance(leaf, torch.Tensor) and op.name not in DEVICE_CHANGING:
                assert leaf.device.type == "tpu", f"{op.name} returned a tensor on {leaf.device}"
        # A non_blocking copy to the host (a "to" sample) is only complete
        # after a sync, as on CUDA.
        torch.tpu.synchronize()
        got = tree_map(to_cpu, got)
        if op.name in VALUES_UNDEFINED:
            assert [t.shape for t in torch.utils._pytree.tree_leaves(got) if isinstance(t, torch.Tensor)] == \
                [t.shape for t in torch.utils._pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
            continue
        if op.name in TIE_ORDER_UNDEFINED:
            values, indices = got
            dim = sample.args[1] if len(sample.args) > 1 else sample.kwargs.get("dim", -1)
            picked = sample.input.gather(dim, indices) if sample.input.dim() else sample.input
            torch.testing.assert_close(values, expected[0], rtol=1e-4, atol=1e-4, equal_nan=True)
            torch.testing.assert_close(picked, values, equal_nan=True)
            continue
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, equal_nan=True)
