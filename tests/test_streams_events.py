"""Streams and events: ordering, synchronisation, timing, and the
torch.Stream / torch.Event / torch.accelerator spellings."""
import pytest
import torch
from conftest import run_python


def test_default_and_current_streams():
    d = torch.tpu.default_stream()
    c = torch.tpu.current_stream()
    assert d.stream_id == 0 and c == d
    assert d.device == torch.device("tpu:0")
    s = torch.tpu.Stream()
    assert s.stream_id != 0 and s.device.type == "tpu"
    with torch.tpu.stream(s):
        assert torch.tpu.current_stream() == s
        assert torch.accelerator.current_stream() == s
    assert torch.tpu.current_stream() == d


def test_torch_stream_and_event_spellings():
    s = torch.Stream(device="tpu")
    assert s.device_type == torch.tpu.current_stream().device_type
    e = torch.Event(device="tpu", enable_timing=True)
    with s:
        x = torch.ones(100, device="tpu") + 1
        e.record()
    e.synchronize()
    assert e.query()
    assert s.query()
    s.synchronize()
    assert x.sum().item() == 200


def test_side_stream_work_ordered_by_wait_stream(mode):
    a = torch.randn(256, 256, device="tpu")
    expected = (a.cpu() * 3).sum()
    s = torch.tpu.Stream()
    s.wait_stream(torch.tpu.current_stream())
    with torch.tpu.stream(s):
        b = a * 3
        total = b.sum()
    torch.tpu.current_stream().wait_stream(s)
    assert torch.allclose(total.cpu(), expected, rtol=1e-4)


def test_many_records_run_in_order():
    x = torch.zeros(16, device="tpu")
    for i in range(2000):
        x.add_(1)
    assert x.cpu().tolist() == [2000.0] * 16


def test_event_timing_and_query():
    start = torch.tpu.Event(enable_timing=True)
    end = torch.tpu.Event(enable_timing=True)
    assert start.query()  # never recorded counts as complete
    start.record()
    a = torch.randn(128, 128, device="tpu")
    for _ in range(5):
        a = a @ a / 128
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0


def test_event_wait_across_chips():
    e = torch.tpu.Event()
    x = torch.full((1000,), 2.0, device="tpu:0")
    e.record(torch.tpu.current_stream(0))
    with torch.tpu.device(1):
        e.wait(torch.tpu.current_stream(1))
        y = x.to("tpu:1") * 2
    assert y.device == torch.device("tpu:1")
    assert y.sum().item() == 4000


def test_event_recorded_on_another_chip_is_an_error():
    e = torch.tpu.Event()
    e.record(torch.tpu.current_stream(0))
    with pytest.raises(RuntimeError, match="chip|device"):
        e.record(torch.tpu.current_stream(1))


def test_stream_of_another_device_type_is_rejected():
    with pytest.raises(Exception):
        torch.tpu.set_stream(torch.Stream(device="cpu"))


def test_stream_context_rejects_non_tpu_streams():
    with pytest.raises(ValueError, match="expected a tpu stream, got a stream on cpu"):
        torch.tpu.stream(torch.Stream(device="cpu"))
    with pytest.raises(TypeError, match="expected a torch.Stream"):
        torch.tpu.stream("tpu:0")
    with torch.tpu.stream(None):
        pass


def test_record_stream_covers_work_queued_after_it():
    """As on CUDA: record_stream(s) before the use on s still keeps the
    block from reuse until what s queued by the free has run."""
    big = torch.randn(512, 512, device="tpu")
    side = torch.tpu.Stream()
    for _ in range(5):
        torch.tpu.synchronize()
        with torch.tpu.stream(side):
            t = torch.full((1 << 18,), 1.0, device="tpu")
        torch.tpu.current_stream().wait_stream(side)
        t.record_stream(torch.tpu.current_stream())  # before the use
        _ = big @ big  # keeps the current stream busy
        u = t * 3
        del t
        with torch.tpu.stream(side):
            v = torch.full((1 << 18,), 100.0, device="tpu")  # may reuse t's block
        torch.tpu.synchronize()
        assert torch.equal(u.cpu(), torch.full((1 << 18,), 3.0))
        del v


@pytest.mark.skipif(torch.tpu.device_count() < 2, reason="needs two virtual chips (TORCH_TPU_CHIPS=2)")
def test_copy_between_chips_is_not_overtaken_by_a_later_write_to_the_source():
    xc = torch.randn(1000, 1000)
    x0 = xc.to("tpu:0")
    for _ in range(5):
        a = x0 * 2
        b = a.to("tpu:1")
        a.add_(1)  # queued on chip 0 after the copy
        assert torch.equal(b.cpu(), xc * 2)


def test_one_element_host_copies_convert_as_cpu():
    for src in [torch.tensor(2.5), torch.tensor([-7], dtype=torch.int64), torch.tensor(True),
                torch.tensor(float("nan")), torch.tensor(1e30, dtype=torch.float64), torch.tensor(300)]:
        for dt in [torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.uint8, torch.int64,
                   torch.bool, torch.float64]:
            dst = torch.empty(3, 2, dtype=dt, device="tpu")
            dst.copy_(src)
            want = torch.empty(3, 2, dtype=dt)
            want.copy_(src)
            got = dst.cpu()
            assert torch.equal(got, want) or (dt.is_floating_point and torch.isnan(want).all() and torch.isnan(got).all()), (src, dt)
    assert torch.equal(torch.tensor(2 ** 60 + 1).to("tpu").cpu(), torch.tensor(2 ** 60 + 1))


@pytest.mark.parametrize("no_membarrier", ["0", "1"])
def test_records_queued_as_the_worker_sleeps_run_unwaited(no_membarrier):
    """The stream's worker sleeps after about 1 ms idle, and a submitter
    wakes it without waiting on the stream. Each add is followed by an
    event that is only polled (a query does not wake the worker), with a
    deadline, so a lost wake-up fails instead of hanging; the gaps
    straddle the worker's spin. Both barrier pairs: membarrier, and the
    fenced one a kernel without it gets."""
    proc = run_python(
        """
        import random, time, torch, torch_tpu
        x = torch.zeros(1, device="tpu")
        rng = random.Random(7)
        for i in range(600):
            end = time.perf_counter() + rng.uniform(0.5e-3, 1.5e-3)
            while time.perf_counter() < end:
                pass
            x.add_(1)
            ev = torch.tpu.Event()
            ev.record()
            deadline = time.monotonic() + 5
            while not ev.query():
                if time.monotonic() > deadline:
                    raise SystemExit(f"add {i} did not run within 5 s")
        assert x.item() == 600, x.item()
        print("ok")
        """,
        env={"TORCH_TPU_NO_MEMBARRIER": no_membarrier},
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
