"""torch_tpu._C._Signal, the host signal behind tpu_dist's async calls
(tpu/signal.h): a stream waits for it without blocking the host, its
deadline starts when it is armed, and bad timeouts are refused. The suite
runs in strict and fused mode; debug mode's inline wait is covered by
tests/c/test_runtime_signal.c."""
import math
import threading
import time

import pytest
import torch
import torch.distributed as dist

from torch_tpu import _C


def _wait_on_current(sig, timeout_s):
    s = torch.tpu.current_stream()
    sig.wait_on(s.stream_id, s.device_index, timeout_s)
    return s


def test_later_work_waits_and_the_host_does_not():
    sig = _C._Signal("host-set work")
    x = torch.ones(4, device="tpu")
    s = _wait_on_current(sig, -1)
    y = x + 1  # queued behind the wait; the host is not blocked
    assert not s.query()
    threading.Timer(0.05, lambda: sig.set(True)).start()
    assert y.cpu().tolist() == [2.0] * 4
    assert sig.is_set()


def test_failure_is_raised_once_as_dist_backend_error():
    sig = _C._Signal("a collective")
    _wait_on_current(sig, -1)
    sig.set(False, "rank 1 is gone")
    with pytest.raises(dist.DistBackendError, match="a collective failed: rank 1 is gone"):
        torch.tpu.synchronize()
    torch.tpu.synchronize()


def test_deadline_counts_from_arm_not_from_the_wait():
    sig = _C._Signal("queued behind others")
    start = time.monotonic()
    s = _wait_on_current(sig, -1)
    time.sleep(0.1)
    assert not s.query()  # no deadline until armed
    sig.arm(0.05)
    with pytest.raises(dist.DistBackendError, match="queued behind others did not complete before the stream's deadline"):
        s.synchronize()
    assert time.monotonic() - start >= 0.14
    sig.set(True)  # late: harmless


@pytest.mark.parametrize("huge", [math.inf, 1e300, 86400.0 * 365 * 1e6])
def test_huge_timeouts_mean_no_deadline(huge):
    sig = _C._Signal("far")
    s = _wait_on_current(sig, huge)
    sig.arm(huge)
    time.sleep(0.05)
    assert not s.query()
    sig.set(True)
    s.synchronize()


def test_nan_timeout_is_refused():
    sig = _C._Signal("nan")
    s = torch.tpu.current_stream()
    with pytest.raises(ValueError, match="Signal.wait_on: timeout_s is NaN"):
        sig.wait_on(s.stream_id, s.device_index, math.nan)
    with pytest.raises(ValueError, match="Signal.arm: timeout_s is NaN"):
        sig.arm(math.nan)
    with pytest.raises(RuntimeError, match="Signal.wait_on"):
        sig.wait_on(s.stream_id, 99, 1.0)
    sig.set(True)
    with pytest.raises(Exception, match="already set"):
        sig.set(True)
