"""async_op=True on tpu tensors behaves as with NCCL: the call and wait()
return without waiting for other ranks, the issuing stream waits for the
result, wait() orders another stream, failures reach the stream."""
import pytest

from . import _async_workers as A
from ._launch import run_ranks


def test_call_and_wait_do_not_block_the_host():
    for out in run_ranks(A.no_host_block, 2, pg_timeout=20, timeout=60).values():
        assert out == {"value": True, "later_work": True, "completed": True}


def test_wait_on_another_stream_after_post_processing():
    for out in run_ranks(A.other_stream_waits, 2, pg_timeout=20, timeout=60).values():
        assert out == {"side": True, "tensor": True}


@pytest.mark.parametrize("world", [2, 3])
def test_futures_many_in_flight_and_program_order(world):
    for out in run_ranks(A.futures_and_many, world, timeout=90).values():
        assert out == {"then_item": True, "many": True, "gather_order": True, "broadcast": True,
                       "sync_after_async": True}, out


def test_mismatched_sizes_fail_through_the_stream():
    for out in run_ranks(A.mismatch, 2, timeout=60).values():
        assert out["kind"] in ("DistBackendError", "ValueError"), out
        assert "all_reduce (collective #1" in out["message"] and "4" in out["message"], out
        assert out["exception"] == "ValueError"
        assert out["after"] is True


def test_killed_rank_fails_async_work_within_the_timeout():
    results = run_ranks(A.killed_async, 3, pg_timeout=5, timeout=60)
    assert results[2][0] == "died"
    for status, out in results[:2]:
        assert status == "ok", results
        assert out["issued"] < 2  # the call itself did not wait for the dead rank
        assert out["kind"] == "DistBackendError", out
        assert out["elapsed"] < 5 + 3
        assert "all_reduce (collective #2" in out["message"] and "[2]" in out["message"], out
        assert out["completed"] is True and out["exception"] == "DistBackendError"
