"""torch.tpu.set_sync_debug_mode: the calls that make the host wait for the
device warn ("warn") or raise ("error"), naming themselves, where CUDA's
warn_or_error_on_sync does; asynchronous work and explicit device or event
synchronization do not."""
import warnings

import pytest
import torch

SYNC = "called a synchronizing TPU operation"


@pytest.fixture(autouse=True)
def _mode_off():
    torch.tpu.synchronize()
    yield
    torch.tpu.set_sync_debug_mode(0)


def _pageable():
    return torch.arange(6.0)


# (name, call, text the message must contain). Inputs are made before the
# mode is switched on.
SYNC_POINTS = [
    ("item", lambda x: x.sum().item(), "Tensor.item()"),
    ("cpu", lambda x: x.cpu(), "a copy from tpu to the host"),
    ("to_cpu", lambda x: x.to("cpu"), "a copy from tpu to the host"),
    ("tolist", lambda x: x.tolist(), "a copy from tpu to the host"),
    ("print", lambda x: str(x), "called a synchronizing"),
    ("copy_to_pageable", lambda x: torch.empty(6).copy_(x), "a copy from tpu to the host"),
    ("to_tpu_pageable", lambda x: _pageable().to("tpu"), "a copy from the host to tpu"),
    ("nonzero", lambda x: x.nonzero(), "torch.nonzero"),
    ("bool_mask", lambda x: x[x > 2], "torch.nonzero"),
    ("masked_select", lambda x: torch.masked_select(x, x > 2), "torch.masked_select"),
    ("unique", lambda x: torch.unique(x), "torch.unique"),
    ("equal", lambda x: torch.equal(x, x), "torch.equal"),
    ("bincount", lambda x: torch.bincount(x.long()), "torch.bincount"),
    ("stream_synchronize", lambda x: torch.tpu.current_stream().synchronize(), "torch.tpu.Stream.synchronize()"),
]


@pytest.mark.parametrize("name,call,text", SYNC_POINTS, ids=[p[0] for p in SYNC_POINTS])
def test_warn_mode_warns(name, call, text):
    x = torch.arange(6.0, device="tpu")
    torch.tpu.set_sync_debug_mode("warn")
    assert torch.tpu.get_sync_debug_mode() == 1
    with pytest.warns(UserWarning, match=SYNC) as record:
        call(x)
    assert any(text in str(w.message) for w in record), [str(w.message) for w in record]


@pytest.mark.parametrize("name,call,text", SYNC_POINTS, ids=[p[0] for p in SYNC_POINTS])
def test_error_mode_raises(name, call, text):
    x = torch.arange(6.0, device="tpu")
    torch.tpu.set_sync_debug_mode(2)
    assert torch.tpu.get_sync_debug_mode() == 2
    with pytest.raises(RuntimeError, match=SYNC) as info:
        call(x)
    assert text in str(info.value)
    torch.tpu.set_sync_debug_mode("default")
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # the device is unharmed


def test_refused_copy_queues_nothing():
    x = torch.full((4,), 7.0, device="tpu")
    host = torch.zeros(4)
    torch.tpu.set_sync_debug_mode("error")
    with pytest.raises(RuntimeError, match="a copy from tpu to the host"):
        host.copy_(x)
    torch.tpu.set_sync_debug_mode(0)
    torch.tpu.synchronize()
    assert host.tolist() == [0.0] * 4  # refused before the copy was queued


def _async_work(x, pinned, back):
    y = x * 2.0 + 1  # a host scalar rides in the record
    z = (y @ y.reshape(6, 1)).relu()
    w = torch.ones(3, device="tpu").add_(5)
    x.add_(torch.tensor(1.0))  # a 0-dim CPU tensor: no copy to wait for
    d = pinned.to("tpu", non_blocking=True)
    back.copy_(d, non_blocking=True)
    other = x.to("tpu:1")  # chip to chip
    s = torch.tpu.Stream()
    s.wait_stream(torch.tpu.current_stream())
    e = torch.tpu.current_stream().record_event()
    e.query()
    return y, z, w, other


def test_async_work_and_explicit_waits_do_not_warn():
    x = torch.arange(6.0, device="tpu")
    pinned = torch.arange(6.0).pin_memory()
    back = torch.empty(6).pin_memory()
    for mode in ("warn", "error"):
        torch.tpu.set_sync_debug_mode(mode)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            out = _async_work(x, pinned, back)
            # As on CUDA: waiting for the whole chip or an event is the
            # user's own request, not a hidden sync.
            torch.tpu.current_stream().record_event().synchronize()
            torch.tpu.synchronize()
            torch.tpu.synchronize("tpu:1")
        assert not [w for w in record if SYNC in str(w.message)]
    torch.tpu.set_sync_debug_mode(0)
    assert back.tolist() == pinned.tolist()
    assert out[2].tolist() == [6.0, 6.0, 6.0]


def test_off_is_silent():
    x = torch.arange(6.0, device="tpu")
    assert torch.tpu.get_sync_debug_mode() == 0
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        x.sum().item()
        x.cpu()
        x.nonzero()
        torch.tpu.current_stream().synchronize()
    assert not [w for w in record if SYNC in str(w.message)]


def test_fallback_copies_count():
    # A CPU fallback copies its operands to the host: a hidden sync too.
    x = torch.arange(6.0, device="tpu")
    previous = torch.tpu.get_fallback_error()
    torch.tpu.set_fallback_error(False)
    try:
        torch.tpu.set_sync_debug_mode("error")
        with pytest.raises(RuntimeError, match=SYNC):
            torch.special.bessel_j0(x)  # no native kernel
    finally:
        torch.tpu.set_sync_debug_mode(0)
        torch.tpu.set_fallback_error(previous)


def test_bad_values():
    for bad in (3, -1):
        with pytest.raises(RuntimeError, match=f"invalid value of debug_mode {bad}"):
            torch.tpu.set_sync_debug_mode(bad)
    with pytest.raises(RuntimeError, match="invalid value of debug_mode 'loud'"):
        torch.tpu.set_sync_debug_mode("loud")
    with pytest.raises(RuntimeError, match="invalid argument 1.5 of type float"):
        torch.tpu.set_sync_debug_mode(1.5)
    assert torch.tpu.get_sync_debug_mode() == 0
    torch.tpu.set_sync_debug_mode(1)
    assert torch.tpu.get_sync_debug_mode() == 1
    torch.tpu.set_sync_debug_mode("default")
    assert torch.tpu.get_sync_debug_mode() == 0
