"""Bad input gets a clear Python exception; the process and the memory
stats stay sound."""
import os
import sys

import pytest
import torch


def test_chip_index_out_of_range():
    with pytest.raises(RuntimeError, match="tpu:5"):
        torch.empty(2, device="tpu:5")
    with pytest.raises(RuntimeError, match="invalid device index"):
        torch.tpu.set_device(7)
    with pytest.raises(RuntimeError, match="tpu:3"):
        torch.ones(2).to("tpu:3")
    assert torch.tpu.current_device() == 0


def test_mixed_chips_in_one_op():
    a = torch.ones(3, device="tpu:0")
    b = torch.ones(3, device="tpu:1")
    for f in (torch.add, torch.mul, torch.sub, torch.div):
        with pytest.raises(RuntimeError, match="tpu:0 and tpu:1"):
            f(a, b)
    with pytest.raises(RuntimeError, match="same device"):
        a + torch.ones(3)


def test_unsupported_dtype():
    with pytest.raises(TypeError, match="ComplexFloat"):
        torch.empty(3, dtype=torch.complex64, device="tpu")
    with pytest.raises(TypeError, match="tpu does not support dtype"):
        torch.zeros(3, dtype=torch.uint32, device="tpu")


def test_negative_and_overflowing_sizes():
    with pytest.raises(RuntimeError, match="negative"):
        torch.empty(-1, device="tpu")
    with pytest.raises(RuntimeError, match="overflow|too large|out of memory"):
        torch.empty(2**62, 2**62, device="tpu")
    before = torch.tpu.memory_allocated()
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(2**60, dtype=torch.uint8, device="tpu")
    assert torch.tpu.memory_allocated() == before


@pytest.mark.skipif(sys.platform != "linux", reason="fork semantics tested on Linux")
def test_forked_child_gets_a_clear_error():
    torch.ones(2, device="tpu").sum().item()  # the parent has used the device
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read)
        try:
            torch.ones(2, device="tpu")
            msg = b"no error"
        except RuntimeError as e:
            msg = str(e).encode()[:500]
        os.write(write, msg)
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    message = os.read(read, 1000).decode()
    os.close(read)
    assert os.WEXITSTATUS(status) == 0
    assert "fork" in message
    assert torch.ones(2, device="tpu").sum().item() == 2


def test_bad_stream_and_event_use():
    with pytest.raises(ValueError):
        torch.tpu.current_stream("cpu")
    e1, e2 = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    with pytest.raises(ValueError, match="recorded"):
        e1.elapsed_time(e2)
