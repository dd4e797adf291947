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
        assert out["kind"] == "DistBackendError", out
        assert "all_reduce (collective #1" in out["message"] and "4" in out["message"], out
        assert out["exception"] == "DistBackendError"
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


def test_debug_mode_completes_before_return():
    for out in run_ranks(A.debug_mode_without_wait, 2, env={"TPU_LAUNCH_BLOCKING": "1"}, timeout=60).values():
        assert out == {"mode": "debug", "value": True, "completed": True}


def test_stream_deadline_starts_when_the_call_starts():
    for out in run_ranks(A.queued_chain, 2, pg_timeout=1, timeout=60).values():
        assert out == {"values": True}


@pytest.mark.parametrize("async_op,barrier", [(False, False), (True, False), (False, True)],
                         ids=["sync", "async", "barrier"])
def test_kernel_error_before_a_collective_fails_every_rank_at_once(async_op, barrier):
    outs = run_ranks(A.kernel_error_before, 2, async_op, barrier, pg_timeout=20, timeout=90).values()
    for rank, out in enumerate(outs):
        assert out["kind"] is not None, (rank, out)
        assert out["elapsed"] < 10, (rank, out)  # not the group's timeout of 20 s
        assert out["after"] is True, (rank, out)
    assert "index 5 is out of bounds" in outs[0]["message"], outs[0]
    assert "rank 0" in outs[1]["message"] or "index 5" in outs[1]["message"], outs[1]


def test_failure_raised_by_wait_is_reported_once():
    for out in run_ranks(A.failure_reported_once, 2, timeout=60).values():
        assert out["kinds"] == ["DistBackendError", "DistBackendError"], out
        assert out["after"] is None, out
        assert out["exception"] == "DistBackendError"


def test_destroyed_groups_stop_their_threads_and_calls_free_their_tensors():
    for out in run_ranks(A.threads_and_memory, 2, timeout=90).values():
        assert out == {"threads": True, "freed": True}


@pytest.mark.parametrize("async_op", [False, True], ids=["sync", "async"])
def test_leaf_requiring_grad_is_reduced_and_expanded_tensors_refused(async_op):
    for out in run_ranks(A.leaf_and_expanded, 2, async_op, timeout=60).values():
        assert out["leaf"] is True and out["after"] is True, out
        assert out["expanded"] is not None and "share memory" in out["expanded"], out


def test_one_failure_does_not_fail_the_calls_queued_behind_it():
    outs = run_ranks(A.chain_after_kernel_error, 2, timeout=90).values()
    for rank, out in enumerate(outs):
        assert out["ok"] == [False] + [True] * 9, (rank, out)
        assert out["values"][1:] == [True] * 9, (rank, out)
        assert len(out["errors"]) == 1, (rank, out)  # reported once
        assert "collective #1 " in out["errors"][0] and len(out["errors"][0]) < 3000, (rank, out)
    assert "index 5 is out of bounds" in outs[0]["errors"][0], outs[0]


def test_timeouts_past_gloos_range_mean_never():
    for out in run_ranks(A.huge_timeout, 2, timeout=60).values():
        assert out == {"value": True}


def test_side_stream_wait_does_not_report_the_failure_twice():
    for out in run_ranks(A.side_stream_failure_once, 2, timeout=60).values():
        assert out == {"raised": [None, "DistBackendError", None]}, out
