"""Regression tests for the defect classes of the reliability issue, each
written against its mechanism. Where the failure mode is a hang or a crash
the case runs in a fresh interpreter with a timeout, so that a regression
fails the test instead of taking the suite down.

1. No wait deadlocks on the GIL: workers never need it, host waits give it up.
2. A view that does not fit in its storage is refused by every native op.
3. 0-dim device operands of a wider dtype behave as on the CPU backend.
4. Operands on different devices raise PyTorch's same-device error.
5. The queue of a stream is bounded: host memory does not grow without sync.
6. An out-of-memory retry reclaims blocks pending on other chips' streams.
7. Chip indices are checked before narrowing, never wrapped.
8. Errors say what happened (see also test_compile_errors.py and
   test_multiprocessing_errors.py).
(9. Float-to-integer conversion: test_conversion.py.)
"""
import itertools
import threading
import time
import warnings

import pytest
import torch

from conftest import run_python


def run_ok(code: str, env: dict | None = None, timeout: int = 90) -> str:
    """Runs `code` in a fresh interpreter; it must exit 0 within `timeout`."""
    proc = run_python(code, env=env, timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
    return proc.stdout


# ---------------------------------------------------------------- 1. GIL

# A stream's worker releases the pinned buffer of an asynchronous copy
# while the host thread waits for the stream holding the GIL: every
# blocking entry point that the reliability report found, and the
# asynchronous copy in both directions.
_PINNED_RELEASE_PROLOGUE = """
    import gc, io, torch
    a = torch.randn(1200, 1200, device='tpu')
    b = a @ a; b = b @ a                      # keep the stream busy
"""

_BLOCKING_CALLS = {
    "tpu_empty_cache": "torch.tpu.empty_cache()",
    "accelerator_empty_cache": "torch.accelerator.empty_cache()",
    "torch_save": "torch.save(b, io.BytesIO())",
    "storage_cpu": "b.untyped_storage().cpu()",
    "synchronize": "torch.tpu.synchronize()",
    "item": "b[0, 0].item()",
}


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
@pytest.mark.parametrize("call", sorted(_BLOCKING_CALLS))
def test_no_deadlock_when_worker_releases_pinned_buffer(direction, call):
    if direction == "h2d":
        copy = """
    src = torch.ones(2**20).pin_memory(); st = src.untyped_storage()
    d = src.to('tpu', non_blocking=True)
    del src, st; gc.collect()
    """
        check = "assert d.sum().item() == 2**20"
    else:
        copy = """
    src = torch.ones(2**20, device='tpu')
    dst = torch.empty(2**20).pin_memory()
    dst.copy_(src, non_blocking=True)
    del dst; gc.collect()
    """
        check = "assert src.sum().item() == 2**20"
    run_ok(_PINNED_RELEASE_PROLOGUE + copy + f"\n    {_BLOCKING_CALLS[call]}\n    {check}\n    print('ok')\n",
           timeout=120)


def test_blocking_waits_release_the_gil():
    """While the main thread waits for the device in an entry point that
    PyTorch does not wrap in a GIL release (empty_cache, a storage copy),
    another Python thread keeps running."""
    ticks = 0
    stop = threading.Event()

    def count():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    a = torch.randn(1024, 1024, device="tpu")
    (a @ a).sum().item()  # warm up
    counter = threading.Thread(target=count)
    counter.start()
    try:
        for wait in (torch.tpu.empty_cache, lambda: b.untyped_storage().cpu()):
            b = a
            for _ in range(8):
                b = b @ a  # about a second of queued work
            before = ticks
            start = time.perf_counter()
            wait()
            waited = time.perf_counter() - start
            during = ticks - before
            # Holding the GIL for the whole wait would leave the counter at
            # a handful of ticks (one switch interval at most).
            if waited > 0.2:
                assert during > 1000, f"{during} ticks in a {waited:.2f} s wait: the GIL was held"
    finally:
        stop.set()
        counter.join()


def test_full_queue_waits_without_the_gil():
    """A submitter that fills a stream's queue waits for room, with the GIL
    released: another thread runs meanwhile, and every op runs in order."""
    out = run_ok("""
        import threading, time, torch
        a = torch.randn(1024, 1024, device='tpu')
        x = torch.zeros(1, device='tpu')
        ticks = [0]; stop = threading.Event()
        def count():
            while not stop.is_set():
                ticks[0] += 1
        t = threading.Thread(target=count); t.start()
        b = a
        for _ in range(6):
            b = b @ a                  # keep the worker busy
        before = ticks[0]; start = time.perf_counter()
        for i in range(3000):          # more records than the queue holds
            x.add_(1)
        issue = time.perf_counter() - start
        during = ticks[0] - before
        stop.set(); t.join()
        assert x.item() == 3000
        print(issue, during)
    """)
    issue, during = out.split()
    if float(issue) > 0.2:  # the submitter really waited for room
        assert int(during) > 1000


# ------------------------------------------------------- 2. storage bounds

def _shrunk_view():
    x = torch.zeros(256, device="tpu")
    view = x[128:]
    x.untyped_storage().resize_(16)
    return view


_NATIVE_OPS_ON_VIEW = {
    "fill_": lambda v: v.fill_(1),
    "zero_": lambda v: v.zero_(),
    "copy_from_cpu": lambda v: v.copy_(torch.ones(128)),
    "copy_to_cpu": lambda v: torch.empty(128).copy_(v),
    "copy_on_chip_src": lambda v: torch.empty(128, device="tpu").copy_(v),
    "copy_on_chip_dst": lambda v: v.copy_(torch.ones(128, device="tpu")),
    "uniform_": lambda v: v.uniform_(),
    "normal_": lambda v: v.normal_(),
    "add": lambda v: v + 1,
    "add_": lambda v: v.add_(1),
    "mul_out": lambda v: torch.mul(torch.ones(128, device="tpu"), 2, out=v),
    "div_tensor": lambda v: torch.ones(128, device="tpu") / v,
    "add_same_shape": lambda v: v + v,
    "mul_same_shape_": lambda v: v.mul_(torch.ones(128, device="tpu")),
    "sub_same_shape_into_other": lambda v: torch.ones(128, device="tpu").sub_(v),
    "sum": lambda v: v.sum(),
    "mean_dim": lambda v: v.view(8, 16).mean(1),
    "mm": lambda v: v.view(8, 16) @ torch.ones(16, 4, device="tpu"),
    "addmm": lambda v: torch.addmm(torch.ones(4, device="tpu"), v.view(8, 16), torch.ones(16, 4, device="tpu")),
    "clone": lambda v: v.clone(),
    "fallback_exp": lambda v: v.exp(),
}


@pytest.mark.parametrize("mode_name", ["strict", "debug"])
def test_views_outside_their_storage_are_refused(mode_name):
    """Every native op (and the fallback's copies) raises a RuntimeError for
    a view left hanging over a shrunk storage, in both modes, and the
    process, the stream and the allocator stay sound. Run in a subprocess:
    a regression is a wild write."""
    out = run_ok(f"""
        import warnings, torch
        warnings.simplefilter('ignore')
        from test_reliability import _shrunk_view, _NATIVE_OPS_ON_VIEW
        torch.tpu.set_mode({mode_name!r})
        for name, op in _NATIVE_OPS_ON_VIEW.items():
            try:
                op(_shrunk_view())
                torch.tpu.synchronize()
            except RuntimeError as e:
                msg = str(e)
                assert 'storage' in msg and 'resized' in msg, (name, msg)
            else:
                raise AssertionError(name + ' accepted a view outside its storage')
        assert (torch.ones(3, device='tpu') * 2).sum().item() == 6
        print('ok')
    """, env={"PYTHONPATH": __import__("os").path.dirname(__file__)})
    assert out.strip() == "ok"


def test_view_over_a_storage_shrunk_to_nothing_is_refused():
    # Offset 0 over an empty storage: the view's data pointer is NULL.
    x = torch.arange(20.0, device="tpu")
    v = x[:10]
    x.untyped_storage().resize_(0)
    ones = torch.ones(10, device="tpu")
    for name, op in {"add": lambda: v + 1, "add_": lambda: v.add_(1),
                     "add_same_shape": lambda: v + ones, "mul_same_shape_": lambda: v.mul_(ones),
                     "div_same_shape_into_other": lambda: ones.div_(v),
                     "out": lambda: torch.add(ones, 1, out=v),
                     "where": lambda: torch.where(ones > 0, ones, v),
                     "addcmul": lambda: torch.addcmul(ones, ones, v),
                     "lerp": lambda: torch.lerp(ones, v, 0.5),
                     "host_scalar_first": lambda: torch.sub(torch.tensor(1.0), v)}.items():
        with pytest.raises(RuntimeError, match="resized"):
            op()
            torch.tpu.synchronize()
    assert (torch.ones(3, device="tpu") * 2).sum().item() == 6


def test_many_dim_view_outside_its_storage_writes_nothing():
    """More dims than a record holds: the op runs as several records, one
    per slice. A view of such a tensor that leaves its storage is refused
    before any of them runs, so the output is left as it was."""
    nd, strides, s = 14, [], 1
    for _ in range(nd):  # no two dims merge
        strides.insert(0, s)
        s = 2 * s + 1
    x = torch.arange(sum(strides) + 1, dtype=torch.float32, device="tpu")
    v = x.as_strided([2] * nd, strides)
    x.untyped_storage().resize_(20000 * 4)  # the first slices still fit, the last do not
    out = torch.full([2] * nd, -7.0, device="tpu")
    with pytest.raises(RuntimeError, match="resized"):
        torch.add(v, 1, out=out)
        torch.tpu.synchronize()
    assert torch.equal(out.cpu(), torch.full([2] * nd, -7.0))
    left = torch.empty(0, device="tpu").set_(x.untyped_storage(), 0, (20000,))  # what the storage keeps
    keep = left.cpu()
    with pytest.raises(RuntimeError, match="resized"):
        v.add_(1)
        torch.tpu.synchronize()
    assert torch.equal(left.cpu(), keep)


def test_shrunk_storage_itself_still_works():
    x = torch.arange(256.0, device="tpu")
    x.untyped_storage().resize_(16)
    head = torch.empty(0, device="tpu").set_(x.untyped_storage(), 0, (4,))
    torch.testing.assert_close(head.cpu(), torch.arange(4.0))


# ------------------------------------------------------- 3. 0-dim operands

_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
           torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _values(dtype):
    if dtype == torch.bool:
        return torch.tensor([True, False, True, True])
    if dtype == torch.uint8:
        return torch.tensor([200, 7, 0, 255], dtype=dtype)
    if dtype.is_floating_point:
        return torch.tensor([100.75, -7.5, 0.125, 300.0], dtype=torch.float64).to(dtype)
    return torch.tensor([100, -7, 0, 127], dtype=dtype)


def _scalar(dtype):
    if dtype == torch.bool:
        return torch.tensor(True)
    if dtype == torch.uint8:
        return torch.tensor(3, dtype=dtype)
    if dtype.is_floating_point:
        return torch.tensor(300.3, dtype=torch.float64).to(dtype)
    return torch.tensor(300 if dtype in (torch.int16, torch.int32, torch.int64) else -3, dtype=dtype)


def _same(fn, *cpu_args):
    """fn on CPU and on tpu: both raise, or both give equal results."""
    try:
        want = fn(*cpu_args)
    except (RuntimeError, TypeError) as e:
        with pytest.raises(type(e)):  # kernel-side errors come at the sync
            fn(*[a.to("tpu") for a in cpu_args]).cpu()
        return
    got = fn(*[a.to("tpu") for a in cpu_args])
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, atol=0, rtol=0)


@pytest.mark.parametrize("tensor_dtype", _DTYPES, ids=str)
def test_zero_dim_device_operands_match_cpu(tensor_dtype):
    """A 0-dim tpu tensor beside a tensor, of every dtype, in both operand
    orders, for the native binary ops (including in-place, fill_ and
    copy_), matches the CPU
    backend bit for bit: the 0-dim operand is converted as TensorIterator
    and the CPU kernels convert it. Python scalars too."""
    ops = [
        lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a, b: a / b,
        lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        lambda a, b: torch.div(a, b, rounding_mode="floor"),
        lambda a, b: torch.add(a, b, alpha=2),
    ]
    # In place into the tensor: the result keeps the tensor's dtype.
    inplace_ops = [
        lambda a, b: a.clone().add_(b), lambda a, b: a.clone().mul_(b), lambda a, b: a.clone().div_(b),
        lambda a, b: a.clone().div_(b, rounding_mode="trunc"),
        lambda a, b: a.clone().div_(b, rounding_mode="floor"),
        lambda a, b: a.clone().fill_(b), lambda a, b: a.clone().copy_(b),
    ]
    t = _values(tensor_dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for scalar_dtype in _DTYPES:
            s = _scalar(scalar_dtype)
            for op in ops:
                _same(op, t, s)
                _same(op, s, t)
            for op in inplace_ops:
                _same(op, t, s)
        for number in (300.3, -3, True, 2**40 + 1):
            for op in ops:
                _same(lambda a: op(a, number), t)
                _same(lambda a: op(number, a), t)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_rounded_half_division_matches_cpu_bit_for_bit(dtype, mode):
    """f16/bf16 division with rounding: the CPU backend divides tensors in
    the 16-bit type (each step rounded) and divides by a scalar, or any
    one-element op, in f32; the device gives the same bits in each case."""
    gen = torch.Generator().manual_seed(7)
    a = (torch.randn(2000, generator=gen) * 3000).to(dtype)
    b = (torch.randn(2000, generator=gen) * 5).to(dtype)
    cases = {
        "tensor": lambda x, y: torch.div(x, y, rounding_mode=mode),
        "strided": lambda x, y: torch.div(x[::3], y[1::3], rounding_mode=mode),
        "python_scalar": lambda x, y: torch.div(x, 3.3, rounding_mode=mode),
        "zero_dim": lambda x, y: torch.div(x, y[5].clone(), rounding_mode=mode),
        "one_element": lambda x, y: torch.div(x[:1], y[:1], rounding_mode=mode),
    }
    for name, fn in cases.items():
        want = fn(a, b)
        got = fn(a.to("tpu"), b.to("tpu")).cpu()
        assert torch.equal(got, want), name


# ------------------------------------------------------------ 4. devices

def test_fallback_rejects_operands_on_different_devices():
    a0 = torch.ones(3, device="tpu:0")
    a1 = torch.ones(3, device="tpu:1")
    c = torch.ones(3)
    cases = {
        "cat_chips": lambda: torch.cat([a0, a1]),
        "cat_cpu": lambda: torch.cat([a0, c]),
        "mm_chips": lambda: a0.view(3, 1) @ a1.view(1, 3),
        "where_chips": lambda: torch.where(a0 > 0, a0, a1),
        "where_cpu": lambda: torch.where(a0 > 0, a0, c),
        "atan2_cpu": lambda: torch.atan2(a0, c),
        "addcmul_chips": lambda: torch.addcmul(a0, a0, a1),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, fn in cases.items():
            with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
                fn()
                pytest.fail(name)


def test_fallback_keeps_cuda_exceptions_to_the_device_rule():
    """What CUDA accepts: 0-dim CPU tensors as scalars, CPU index tensors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = torch.arange(6.0, device="tpu")
        torch.testing.assert_close(torch.atan2(x, torch.tensor(2.0)).cpu(), torch.atan2(x.cpu(), torch.tensor(2.0)))
        mask = torch.tensor([True, False, True, False, True, False])
        torch.testing.assert_close(x[mask].cpu(), x.cpu()[mask])
        idx = torch.tensor([4, 0])
        torch.testing.assert_close(x[idx].cpu(), x.cpu()[idx])
        y = x.clone()
        y[idx] = torch.tensor(-1.0)
        want = x.cpu().clone()
        want[idx] = -1.0
        torch.testing.assert_close(y.cpu(), want)


# -------------------------------------------------------- 5. queue bound

def test_queue_is_bounded_in_host_memory():
    """200,000 in-place adds with no sync: host memory stays flat (it grew
    by about 870 bytes per op, 170 MiB, before the queue was bounded)."""
    out = run_ok("""
        import resource, torch
        x = torch.zeros(1, device='tpu')
        for _ in range(2000):
            x.add_(1)
        x.item()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for _ in range(200_000):
            x.add_(1)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert x.item() == 202_000
        print((after - before) / 1024)
    """, timeout=240)
    grown_mib = float(out.strip())
    assert grown_mib < 24, f"host memory grew by {grown_mib:.1f} MiB over 200,000 queued ops"


# ------------------------------------------------- 6. multi-chip reclaim

def test_oom_retry_reclaims_blocks_pending_on_another_chip():
    """A block freed on chip 0 while a chip-to-chip copy on chip 1's stream
    still reads it is reclaimed by the out-of-memory retry (which waits for
    every chip), not reported as an out-of-memory error."""
    run_ok("""
        import torch
        big = torch.ones(40 * 2**20, dtype=torch.uint8, device='tpu:0')
        busy = torch.randn(1024, 1024, device='tpu:1')
        for _ in range(10):
            busy = busy @ busy.clamp(-1, 1)      # chip 1's stream is busy
        moved = big.to('tpu:1')                   # chip 1 reads chip 0's block
        del big                                   # pending on chip 1's stream
        again = torch.empty(40 * 2**20, dtype=torch.uint8, device='tpu:0')
        assert torch.tpu.memory_stats(0)['num_alloc_retries'] >= 1
        assert moved.sum().item() == 40 * 2**20
        print('ok')
    """, env={"TORCH_TPU_CHIPS": "2", "TORCH_TPU_MEMORY_LIMIT": "64M"})


# --------------------------------------------------------- 7. chip index

@pytest.mark.parametrize("index", [2, 7, 127, 128, 256, 257, 2**31 + 1])
def test_chip_index_is_checked_before_narrowing(index):
    calls = {
        "Stream": lambda: torch.tpu.Stream(device=index),
        "Stream_str": lambda: torch.tpu.Stream(device=f"tpu:{index}"),
        "memory_stats": lambda: torch.tpu.memory_stats(index),
        "memory_allocated": lambda: torch.tpu.memory_allocated(index),
        "mem_get_info": lambda: torch.tpu.mem_get_info(index),
        "current_stream": lambda: torch.tpu.current_stream(index),
        "default_stream": lambda: torch.tpu.default_stream(index),
        "device_ctx": lambda: torch.tpu.device(index).__enter__(),
        "set_device": lambda: torch.tpu.set_device(index),
        "get_device_properties": lambda: torch.tpu.get_device_properties(index),
        "get_rng_state": lambda: torch.tpu.get_rng_state(index),
        "synchronize": lambda: torch.tpu.synchronize(index),
        "default_generators": lambda: torch.tpu.default_generators[index],
        "manual_seed_on": lambda: torch.tpu.set_rng_state(torch.tpu.get_rng_state(0), index),
    }
    for name, call in calls.items():
        with pytest.raises((RuntimeError, ValueError, IndexError), match=str(index)):
            call()
            pytest.fail(name)
    assert torch.tpu.current_device() == 0


# -------------------------------------------------------------- 8. errors

def test_unsupported_dtype_view_names_the_op():
    """A dtype the device lacks (a uint16/uint32 view) is a
    NotImplementedError naming the op, as the CPU's missing kernels are:
    never a TypeError, which Python's operators would turn into
    NotImplemented (and `==` into an identity comparison)."""
    x = torch.arange(4, dtype=torch.int32, device="tpu")
    cases = {
        "aten::sum": lambda v: v.sum(),
        "aten::add": lambda v: v + v,
        "aten::mul": lambda v: v * v,
        "fill_": lambda v: v.fill_(1),
        "aten::eq": lambda v: v == v,
        "copy_": lambda v: v.to(torch.float32),
    }
    for dtype in (torch.uint16, torch.uint32):
        v = x.view(dtype)
        for name, fn in cases.items():
            with pytest.raises(NotImplementedError, match=f"{name}: tpu does not support dtype"):
                fn(v)


def test_reduction_casts_its_input_to_the_requested_dtype():
    """sum(dtype=...) casts the input first, as PyTorch documents; mean
    does as PyTorch's does."""
    cases = [
        (torch.tensor([1e5, -1e5, 1.0], dtype=torch.float64), torch.float16),
        (torch.tensor([-654, 912, 1, -3, -1]), torch.bfloat16),
        (torch.tensor([3e9, 1.0], dtype=torch.float64), torch.int32),
        (torch.tensor([300, 300]), torch.int8),
    ]
    for x, dtype in cases:
        want = x.sum(dtype=dtype)
        got = x.to("tpu").sum(dtype=dtype).cpu()
        torch.testing.assert_close(got, want, equal_nan=True, atol=0, rtol=0)
        if dtype.is_floating_point:  # mean computes in at least f32, no cast first
            torch.testing.assert_close(x.to("tpu").mean(dtype=dtype).cpu(), x.mean(dtype=dtype), equal_nan=True)
    with pytest.raises(RuntimeError, match="could not infer output dtype"):
        torch.mean(torch.ones(4, dtype=torch.int8, device="tpu"), 0,
                   out=torch.empty(0, dtype=torch.float16, device="tpu"))


def test_results_and_copies_follow_cpu_rules():
    """Element-wise results keep the layout of a transposed input (so view
    and reshape alias as on the CPU), and copy_ checks shapes even when
    nothing is copied."""
    for dev in ("cpu", "tpu"):
        z = torch.zeros(2, 3, device=dev).t() + 1
        assert z.stride() == (1, 3)
        w = z.reshape(-1)
        w.zero_()
        assert z.cpu().eq(1).all()
        with pytest.raises(RuntimeError):
            torch.empty(2, 0, 1, device=dev).copy_(torch.empty(2, 0, 2, device=dev))
        with pytest.raises(RuntimeError, match="more than one element"):
            b = torch.zeros(1, 2, device=dev)
            b.expand(3, 2).copy_(b)


def test_out_of_memory_message_gives_exact_bytes():
    out = run_ok("""
        import torch
        keep = torch.empty(16 * 2**20 + 512, dtype=torch.uint8, device='tpu')   # 64M - 48M - 512 left
        more = torch.empty(32 * 2**20, dtype=torch.uint8, device='tpu')
        try:
            torch.empty(16 * 2**20 - 100, dtype=torch.uint8, device='tpu')
        except torch.OutOfMemoryError as e:
            print(e)
    """, env={"TORCH_TPU_MEMORY_LIMIT": "64M"})
    assert "(16777116 bytes, a block of 16777216 bytes)" in out
    assert "bytes) free of 64.00 MiB capacity" in out
