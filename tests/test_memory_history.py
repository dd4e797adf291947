"""Allocation history and snapshots in the format of PyTorch's memory
visualizer (torch.cuda._memory_viz and pytorch.org/memory_viz)."""
import inspect
import os
import pickle
import subprocess
import sys

import pytest
import torch
from torch.cuda import _memory_viz

HERE = os.path.abspath(__file__)


@pytest.fixture(autouse=True)
def _history_off():
    yield
    torch.tpu.memory._record_memory_history(None)


def _line() -> int:
    """The caller's current line."""
    return inspect.currentframe().f_back.f_lineno


def _block_of(snapshot, tensor):
    address = tensor.untyped_storage().data_ptr()
    for seg in snapshot["segments"]:
        for b in seg["blocks"]:
            if b["address"] == address:
                return seg, b
    raise AssertionError(f"no block at {address:#x}")


def _here(frames):
    """The innermost frame of this file (with stacks="all" C++ frames come first)."""
    mine = [f for f in frames if f["filename"] == HERE]
    assert mine, frames
    return mine[0]


def _events_at(trace, address):
    return [e for e in trace if e.get("addr") == address]


def test_frames_name_the_allocating_line():
    torch.tpu.synchronize()
    torch.tpu.empty_cache()  # so that the block below takes a fresh segment
    torch.tpu.memory._record_memory_history(stacks="python")
    x = torch.empty(1000, device="tpu"); line = _line()  # noqa: E702
    snap = torch.tpu.memory._snapshot()
    seg, block = _block_of(snap, x)
    assert block["state"] == "active_allocated"
    assert block["size"] == 4096 and block["requested_size"] == 4000
    top = block["frames"][0]
    assert top["filename"] == HERE and top["line"] == line
    assert top["name"] == "test_frames_name_the_allocating_line"
    assert seg["device"] == 0 and seg["stream"] == 0 and seg["segment_type"] == "small"
    assert seg["total_size"] == sum(b["size"] for b in seg["blocks"])
    assert seg["frames"][0]["line"] == line  # the segment was taken for this allocation
    del x


def test_trace_matches_what_the_test_did():
    torch.tpu.memory._record_memory_history(max_entries=100_000, clear_history=True)
    x = torch.empty(3 << 18, dtype=torch.uint8, device="tpu:1"); alloc_line = _line()  # noqa: E702
    address = x.untyped_storage().data_ptr()
    del x; free_line = _line()  # noqa: E702
    snap = torch.tpu.memory._snapshot()
    trace = snap["device_traces"][1]
    assert len(snap["device_traces"]) == torch.tpu.device_count()
    mine = _events_at(trace, address)
    actions = [e["action"] for e in mine]
    # A fresh segment (or a cached one) for the allocation, then its free.
    assert actions[-3:] == ["alloc", "free_requested", "free_completed"]
    alloc, requested, completed = mine[-3:]
    assert alloc["size"] == requested["size"] == completed["size"] == 3 << 18
    assert alloc["stream"] == 0 and alloc["time_us"] <= requested["time_us"] <= completed["time_us"]
    assert _here(alloc["frames"])["line"] == alloc_line
    # context="all": the free's own stack.
    assert _here(requested["frames"])["line"] == free_line
    assert trace[-1]["action"] == "snapshot"
    for e in trace:
        assert set(e) >= {"action", "size", "stream", "time_us"}


def test_snapshot_accepted_by_memory_viz(tmp_path):
    torch.tpu.synchronize()
    torch.tpu.empty_cache()  # fresh segments: segment_alloc events in the trace
    torch.tpu.memory._record_memory_history(max_entries=1000, clear_history=True)
    keep = torch.randn(256, 256, device="tpu"); line = _line()  # noqa: E702
    gone = torch.ones(1 << 20, device="tpu")
    del gone
    snap = torch.tpu.memory._snapshot()

    # segsum checks that the blocks add up to the segments and the reserved total.
    summary = _memory_viz.segsum(snap)
    assert f"segments: {len(snap['segments'])}" in summary
    text = _memory_viz.trace(snap)
    assert "Device 0" in text and "cudaMalloc" in text and "del " in text
    flame = _memory_viz.memory(snap, format_flamegraph=lambda lines: lines)
    assert f"test_memory_history.py:{line}:test_snapshot_accepted_by_memory_viz" in flame
    assert "stream_0" in _memory_viz.segments(snap, format_flamegraph=lambda lines: lines)
    for html in (_memory_viz.trace_plot(snap), _memory_viz.segment_plot(snap),
                 _memory_viz.trace_plot(snap, plot_segments=True)):
        assert "MemoryViz.js" in html and "snapshot.pickle" in html
    assert "only_after" in _memory_viz.compare([], snap["segments"], format_flamegraph=lambda lines: lines)

    path = tmp_path / "snap.pickle"
    torch.tpu.memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    assert loaded["segments"] and len(loaded["device_traces"]) == torch.tpu.device_count()
    # The command-line tool, offline: an HTML page embedding the snapshot.
    html = tmp_path / "snap.html"
    r = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", str(path), "-o", str(html)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "MemoryViz.js" in html.read_text()
    r = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "stats", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "total_reserved" in r.stdout, r.stderr
    del keep


def test_block_states_and_streams():
    torch.tpu.synchronize()
    torch.tpu.memory._record_memory_history("state", stacks="python")
    side = torch.tpu.Stream()
    with torch.tpu.stream(side):
        on_side = torch.empty(5000, dtype=torch.uint8, device="tpu")
    cached = torch.empty(7000, dtype=torch.uint8, device="tpu")
    cached_address = cached.untyped_storage().data_ptr()
    del cached
    snap = torch.tpu.memory._snapshot()
    seg, block = _block_of(snap, on_side)
    assert seg["stream"] == side.stream_id != 0 and block["state"] == "active_allocated"
    inactive = [b for s in snap["segments"] for b in s["blocks"] if b["address"] == cached_address]
    assert inactive and inactive[0]["state"] == "inactive" and inactive[0]["frames"] == []
    for s in snap["segments"]:
        assert s["allocated_size"] == sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated")
        assert s["active_size"] >= s["allocated_size"]
        assert s["requested_size"] <= s["active_size"]
    # enabled="state" keeps no history: the traces are empty.
    assert all(t == [] for t in snap["device_traces"])
    assert torch.tpu.memory_snapshot() == snap["segments"]  # nothing changed since
    del on_side


def test_off_records_nothing_and_keeps_old_frames():
    torch.tpu.memory._record_memory_history(stacks="python")
    old = torch.empty(1000, device="tpu"); line = _line()  # noqa: E702
    torch.tpu.memory._record_memory_history(enabled=None)
    new = torch.empty(1000, device="tpu")
    snap = torch.tpu.memory._snapshot()
    assert _block_of(snap, old)[1]["frames"][0]["line"] == line
    assert _block_of(snap, new)[1]["frames"] == []
    assert all(t == [] for t in snap["device_traces"])  # disabling forgets the history
    del old, new


def test_ring_bound_skip_actions_and_legacy_form():
    torch.tpu.memory._record_memory_history(max_entries=4, clear_history=True)
    for _ in range(10):
        torch.empty(100, device="tpu")
    trace = torch.tpu.memory._snapshot()["device_traces"][0]
    assert len(trace) == 4 and trace[-1]["action"] == "snapshot"

    torch.tpu.memory._record_memory_history(clear_history=True, skip_actions=["free_requested", "snapshot"])
    torch.empty(100, device="tpu")
    actions = {e["action"] for e in torch.tpu.memory._snapshot()["device_traces"][0]}
    assert "alloc" in actions and "free_completed" in actions
    assert "free_requested" not in actions and "snapshot" not in actions

    # CUDA's legacy bool form: stacks of live blocks, a trace of trace_alloc_max_entries events.
    torch.tpu.memory._record_memory_history(True, trace_alloc_max_entries=3, trace_alloc_record_context=True)
    x = torch.empty(100, device="tpu"); line = _line()  # noqa: E702
    snap = torch.tpu.memory._snapshot()
    assert len(snap["device_traces"][0]) == 3
    assert _block_of(snap, x)[1]["frames"][0]["line"] == line
    torch.tpu.memory._record_memory_history(False)
    assert all(t == [] for t in torch.tpu.memory._snapshot()["device_traces"])
    del x


def test_oom_is_recorded():
    torch.tpu.memory._record_memory_history(clear_history=True, stacks="python")
    line = _line() + 2
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(1 << 40, dtype=torch.uint8, device="tpu")
    trace = torch.tpu.memory._snapshot()["device_traces"][0]
    oom = [e for e in trace if e["action"] == "oom"]
    assert len(oom) == 1 and oom[0]["size"] == 1 << 40 and "addr" not in oom[0]
    assert oom[0]["device_free"] == torch.tpu.mem_get_info()[0]
    assert oom[0]["frames"][0]["line"] == line
    assert "raise OutOfMemoryError" in _memory_viz.trace(torch.tpu.memory._snapshot())


def test_cpp_stacks():
    torch.tpu.memory._record_memory_history(stacks="all", max_entries=10)
    x = torch.empty(1000, device="tpu"); line = _line()  # noqa: E702
    frames = _block_of(torch.tpu.memory._snapshot(), x)[1]["frames"]
    python = [f for f in frames if f["filename"] == HERE]
    assert python and python[0]["line"] == line
    assert len(frames) > len(python)  # C++ frames too
    del x


def test_bad_arguments():
    record = torch.tpu.memory._record_memory_history
    with pytest.raises(RuntimeError, match="expected enabled to be 'state', 'all', or None, got 'yes'"):
        record("yes")
    with pytest.raises(RuntimeError, match="expected context to be .* got 'everything'"):
        record(context="everything")
    with pytest.raises(RuntimeError, match="expected stacks to be 'python', or 'all', got 'cpp'"):
        record(stacks="cpp")
    with pytest.raises(TypeError, match="max_entries must be an int, got float 1.5"):
        record(max_entries=1.5)
    with pytest.raises(ValueError, match="max_entries must be non-negative, got -1"):
        record(max_entries=-1)
    with pytest.raises(ValueError, match="unknown action 'malloc' in skip_actions"):
        record(skip_actions=["malloc"])
    with pytest.raises(TypeError, match="skip_actions must be a list"):
        record(skip_actions="alloc")
    with pytest.raises(RuntimeError, match="invalid device index tpu:9"):
        record(device=9)
    with pytest.raises(ValueError, match="unknown memory pool"):
        torch.tpu.memory_snapshot(mempool_id=(1, 2))
    # Nothing was turned on by the refused calls.
    torch.empty(10, device="tpu")
    assert all(t == [] for t in torch.tpu.memory._snapshot()["device_traces"])
