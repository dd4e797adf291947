"""A rank that stops calling collectives, or dies, makes the others raise
within the timeout, with the collective and the missing ranks named."""
from . import _workers as W
from ._launch import run_ranks

TIMEOUT = 3.0


def test_straggler_is_named_within_the_timeout():
    results = run_ranks(W.straggler, 2, TIMEOUT, pg_timeout=TIMEOUT, timeout=60)
    (s0, r0), (s1, r1) = results
    assert s0 == "ok" and s1 == "ok", results
    assert r0["kind"] == "DistBackendError"
    assert r0["elapsed"] < TIMEOUT + 2
    msg = r0["message"]
    assert "all_reduce (collective #2" in msg and "within the timeout of 3 s" in msg
    assert "ranks that did not join it: [1] (rank 1 last started #1 all_reduce)" in msg


def test_killed_rank_makes_the_others_fail_within_the_timeout():
    results = run_ranks(W.killed, 3, pg_timeout=5, timeout=60)
    assert results[2][0] == "died"
    for status, out in results[:2]:
        assert status == "ok", results
        assert out["kind"] == "DistBackendError"
        assert out["elapsed"] < 5 + 2
        msg = out["message"]
        assert "all_reduce (collective #3" in msg
        assert "ranks that did not join it: [2] (rank 2 last started #2 broadcast)" in msg
        assert "no longer running: [2]" in msg
