"""The caching allocator as seen through torch.tpu and torch.accelerator."""
import gc

import pytest
import torch

import torch_tpu.tpu.memory as tpu_memory
from conftest import run_python


@pytest.fixture(autouse=True)
def settled():
    """These tests count the allocator's bytes and blocks exactly: earlier
    tests' garbage (models in reference cycles) is collected first, so that
    the collector does not free tensors, or run finalizers that allocate,
    in the middle of a count."""
    gc.collect()
    torch.tpu.synchronize()


def test_allocated_tracks_live_tensors():
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    x = torch.empty(1024 * 1024, dtype=torch.float32, device="tpu")
    assert torch.tpu.memory_allocated() - base >= 4 * 1024 * 1024
    assert torch.tpu.memory_reserved() >= torch.tpu.memory_allocated()
    assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated()
    del x
    assert torch.tpu.memory_allocated() == base
    assert torch.accelerator.memory_allocated(0) == base


def test_cached_block_is_reused_on_same_stream():
    x = torch.empty(1 << 20, device="tpu")
    ptr = x.data_ptr()
    del x
    y = torch.empty(1 << 20, device="tpu")
    assert y.data_ptr() == ptr


def test_peak_reset_and_empty_cache():
    x = torch.empty(4 << 20, device="tpu")
    del x
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()
    reserved_before = torch.tpu.memory_reserved()
    torch.tpu.empty_cache()
    assert torch.tpu.memory_reserved() <= reserved_before
    assert torch.tpu.memory_reserved() >= torch.tpu.memory_allocated()


def test_memory_stats_keys_and_mem_get_info():
    x = torch.empty(1000, device="tpu")
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    assert stats["reserved_bytes.all.current"] == torch.tpu.memory_reserved()
    assert stats["num_ooms"] >= 0
    free, total = torch.tpu.mem_get_info()
    assert total == torch.tpu.get_device_properties().total_memory
    assert free == total - torch.tpu.memory_reserved()
    del x


def test_stats_counts_peaks_and_pools_are_consistent():
    torch.tpu.synchronize()
    torch.tpu.empty_cache()
    torch.tpu.reset_peak_memory_stats()
    torch.tpu.reset_accumulated_memory_stats()
    x = torch.empty(3 << 20, dtype=torch.uint8, device="tpu")
    s = torch.tpu.memory_stats()
    for key in ("allocated_bytes", "reserved_bytes", "allocation", "segment", "active"):
        assert s[f"{key}.all.peak"] >= s[f"{key}.all.current"] > 0, key
        assert s[f"{key}.small_pool.current"] + s[f"{key}.large_pool.current"] == s[f"{key}.all.current"], key
    block = s["allocated_bytes.all.allocated"]
    assert block >= 3 << 20 and s["allocated_bytes.all.freed"] == 0
    assert s["allocation.all.allocated"] == 1
    del x
    s = torch.tpu.memory_stats()
    assert s["allocated_bytes.all.freed"] == block and s["allocation.all.freed"] == 1
    assert s["allocation.all.peak"] == 1 and s["allocation.all.current"] == 0
    torch.tpu.empty_cache()
    s = torch.tpu.memory_stats()
    assert s["segment.all.current"] == 0 and s["segment.all.peak"] >= 1
    assert s["reserved_bytes.all.freed"] == s["reserved_bytes.all.allocated"]


def test_per_chip_accounting():
    base1 = torch.tpu.memory_allocated(1)
    base0 = torch.tpu.memory_allocated(0)
    y = torch.empty(1 << 20, device="tpu:1")
    assert torch.tpu.memory_allocated(1) > base1
    assert torch.tpu.memory_allocated(0) == base0
    del y


def test_oom_names_sizes_and_leaves_state_sound():
    before = torch.tpu.memory_allocated()
    ooms = torch.tpu.memory_stats()["num_ooms"]
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(1 << 40, dtype=torch.uint8, device="tpu")
    msg = str(info.value)
    assert "tpu:0" in msg and "1099511627776" in msg and "16.00 GiB" in msg
    assert torch.tpu.memory_allocated() == before
    assert torch.tpu.memory_stats()["num_ooms"] == ooms + 1
    z = torch.ones(10, device="tpu")
    assert z.sum().item() == 10


def test_capacity_is_enforced_across_allocations():
    r = run_python(
        """
        import torch
        keep = [torch.empty(16 << 20, dtype=torch.uint8, device="tpu") for _ in range(3)]
        try:
            more = torch.empty(32 << 20, dtype=torch.uint8, device="tpu")
            print("no error")
        except torch.OutOfMemoryError as e:
            print("OOM", torch.tpu.memory_allocated() == 3 * (16 << 20))
        del keep
        x = torch.empty(32 << 20, dtype=torch.uint8, device="tpu")
        print("after", torch.tpu.memory_reserved() <= 64 << 20)
        """,
        {"TORCH_TPU_MEMORY_LIMIT": "64M"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["OOM", "True", "after", "True"]


def test_record_stream_and_storage_resize():
    s = torch.tpu.Stream()
    x = torch.ones(1 << 16, device="tpu")
    s.wait_stream(torch.tpu.current_stream())  # x is filled on the default stream
    with torch.tpu.stream(s):
        y = x * 2
    x.record_stream(s)
    y.record_stream(s)
    torch.tpu.current_stream().wait_stream(s)
    assert y.sum().item() == 2 * (1 << 16)
    st = torch.arange(6.0, device="tpu").untyped_storage()
    st.resize_(48)
    assert st.nbytes() == 48
    t = torch.empty(0, device="tpu").set_(st)
    assert t.shape == (12,)
    assert t[:6].cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_pinned_memory():
    x = torch.arange(10.0)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and p.device.type == "cpu"
    assert torch.equal(p, x)
    y = p.to("tpu", non_blocking=True)
    back = torch.empty(10).pin_memory()
    back.copy_(y, non_blocking=True)
    torch.tpu.synchronize()
    assert torch.equal(back, x)


# ---------------------------------------------------------------- pools


def test_small_and_large_pools_and_requested_bytes():
    torch.tpu.synchronize()
    torch.tpu.empty_cache()
    before = torch.tpu.memory_stats()
    small = torch.empty(1000, dtype=torch.uint8, device="tpu")  # a 1024-byte block: small pool
    large = torch.empty(3 << 20, dtype=torch.uint8, device="tpu")  # split off a 4 MiB segment: large pool
    s = torch.tpu.memory_stats()

    def grew(key):
        return s[key] - before[key]

    assert grew("allocated_bytes.small_pool.current") == 1024
    assert grew("allocated_bytes.large_pool.current") == 3 << 20
    assert grew("requested_bytes.small_pool.current") == 1000
    assert grew("requested_bytes.large_pool.current") == 3 << 20
    assert grew("segment.small_pool.current") == 1 and grew("segment.large_pool.current") == 1
    assert grew("active_bytes.all.current") == 1024 + (3 << 20)
    assert grew("reserved_bytes.large_pool.current") == 4 << 20
    assert grew("inactive_split_bytes.large_pool.current") == 1 << 20  # the segment's cached rest
    del small, large
    s = torch.tpu.memory_stats()
    assert s["requested_bytes.all.current"] == before["requested_bytes.all.current"]
    assert s["active.all.current"] == before["active.all.current"]


def test_large_blocks_split_so_allocated_tracks_requested():
    """A large tensor reuses a bigger cached block by splitting it: memory_allocated
    counts its own bytes (rounded to 512), its peak is no more than a fresh
    process's, and the parts merge back into one segment that empty_cache releases."""
    torch.tpu.synchronize()
    torch.tpu.empty_cache()
    base_alloc, base_reserved = torch.tpu.memory_allocated(), torch.tpu.memory_reserved()
    big = torch.ones(12 << 20, dtype=torch.uint8, device="tpu")  # 12 MiB
    del big
    torch.tpu.reset_peak_memory_stats()
    # 7 MiB splits the cached 12 MiB block (at most twice the request), 4 MiB the 5 MiB rest.
    parts = [torch.full((n << 20,), i, dtype=torch.uint8, device="tpu") for i, n in enumerate((7, 4))]
    assert torch.tpu.memory_allocated() - base_alloc == 11 << 20
    assert torch.tpu.max_memory_allocated() - base_alloc == 11 << 20
    assert torch.tpu.memory_reserved() == base_reserved + (12 << 20)  # both from the cached block
    s = torch.tpu.memory_stats()
    assert s["inactive_split.all.current"] == 1 and s["inactive_split_bytes.all.current"] == 1 << 20
    for i, n in enumerate((7, 4)):  # each part's bytes are its own
        assert torch.equal(parts[i].cpu(), torch.full((n << 20,), i, dtype=torch.uint8))
    del parts[0]
    s = torch.tpu.memory_stats()
    assert s["inactive_split.all.current"] == 2 and s["inactive_split_bytes.all.current"] == 8 << 20
    parts.clear()  # every part is free: they merge back into the segment
    torch.tpu.synchronize()
    torch.tpu.empty_cache()
    assert torch.tpu.memory_reserved() == base_reserved
    assert torch.tpu.memory_stats()["inactive_split.all.current"] == 0


def test_nested_stats_and_deprecated_aliases():
    x = torch.empty(1 << 16, device="tpu")
    flat = torch.tpu.memory_stats()
    nested = torch.tpu.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == flat["allocated_bytes.all.current"]
    assert nested["num_ooms"] == flat["num_ooms"]
    count = 0
    for key, value in flat.items():
        level = nested
        for part in key.split("."):
            level = level[part]
        assert level == value, key
        count += 1
    assert count == len(flat)

    with pytest.warns(FutureWarning, match="renamed to `torch.tpu.memory_reserved`"):
        assert torch.tpu.memory_cached() == torch.tpu.memory_reserved()
    with pytest.warns(FutureWarning, match="renamed to `torch.tpu.max_memory_reserved`"):
        assert torch.tpu.max_memory_cached() == torch.tpu.max_memory_reserved()
    y = torch.empty(4 << 20, dtype=torch.uint8, device="tpu")
    del y
    assert torch.tpu.max_memory_allocated() > torch.tpu.memory_allocated()
    with pytest.warns(FutureWarning, match="resets /all/ peak memory stats"):
        torch.tpu.reset_max_memory_allocated()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()
    with pytest.warns(FutureWarning, match="reset_max_memory_cached now calls"):
        torch.tpu.reset_max_memory_cached()
    assert torch.tpu.max_memory_reserved() == torch.tpu.memory_reserved()
    assert torch.tpu.device_memory_used() == torch.tpu.memory_reserved()
    assert torch.tpu.device_memory_used("tpu:1") == torch.tpu.memory_reserved(1)
    del x


# -------------------------------------------------------------- summary


def _summary_row(text, label):
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == label:
            return cells[1:]
    raise AssertionError(f"no row {label!r} in\n{text}")


def test_memory_summary_reads_memory_stats():
    keep = [torch.empty(1000, device="tpu") for _ in range(3)]
    text = torch.tpu.memory_summary()
    s = torch.tpu.memory_stats()
    assert "device tpu:0" in text and torch.tpu.get_device_name() in text
    assert f"OOMs: {s['num_ooms']}" in text
    current, peak, allocated, freed = _summary_row(text, "Allocations")
    assert current == f"{s['allocation.all.current']:,}" and peak == f"{s['allocation.all.peak']:,}"
    assert allocated == f"{s['allocation.all.allocated']:,}" and freed == f"{s['allocation.all.freed']:,}"
    assert _summary_row(text, "Non-releasable memory")[0] == "0 B"
    assert text.count("from large pool") == 9 and text.count("from small pool") == 9
    short = torch.tpu.memory_summary(device="tpu:1", abbreviated=True)
    assert "device tpu:1" in short and "from large pool" not in short
    assert _summary_row(short, "Allocated memory")[0] == tpu_memory._size_text(torch.tpu.memory_allocated(1))
    del keep


def test_summary_sizes():
    size_text = tpu_memory._size_text
    assert size_text(0) == "0 B" and size_text(1023) == "1023 B"
    assert size_text(1536) == "1.50 KiB" and size_text(3 << 30) == "3.00 GiB"


# ------------------------------------------------------ memory fraction


def test_memory_fraction_arguments():
    assert torch.tpu.get_per_process_memory_fraction() == 1.0
    with pytest.raises(TypeError, match="set_per_process_memory_fraction: invalid type for fraction.*int 1"):
        torch.tpu.set_per_process_memory_fraction(1)  # CUDA wants a float too
    with pytest.raises(TypeError, match="str '0.5'"):
        torch.tpu.set_per_process_memory_fraction("0.5")
    for bad in (1.5, -0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="invalid fraction value"):
            torch.tpu.set_per_process_memory_fraction(bad)
    with pytest.raises(RuntimeError, match="invalid device index tpu:7"):
        torch.tpu.set_per_process_memory_fraction(0.5, 7)
    with pytest.raises(ValueError, match="expected a tpu device"):
        torch.tpu.get_per_process_memory_fraction("cpu")
    assert torch.tpu.get_per_process_memory_fraction() == 1.0


def test_memory_fraction_limits_reserved_memory():
    capacity = torch.tpu.get_device_properties(1).total_memory
    info = torch.tpu.mem_get_info(1)
    ooms = torch.tpu.memory_stats(1)["num_ooms"]
    try:
        torch.tpu.set_per_process_memory_fraction(0.5, "tpu:1")
        assert torch.tpu.get_per_process_memory_fraction(1) == 0.5
        assert torch.tpu.get_per_process_memory_fraction(0) == 1.0
        assert torch.tpu.mem_get_info(1) == info  # as cudaMemGetInfo, unchanged
        with pytest.raises(torch.OutOfMemoryError) as e:
            torch.empty(capacity // 2 + (2 << 20), dtype=torch.uint8, device="tpu:1")
        msg = str(e.value)
        assert f"({capacity // 2 + (2 << 20)} bytes)" in msg
        assert f"memory fraction 0.5 limits this process to 8.00 GiB ({capacity // 2} bytes)" in msg
        assert "16.00 GiB capacity" in msg
        assert torch.tpu.memory_stats(1)["num_ooms"] == ooms + 1
        x = torch.ones(1000, device="tpu:1")  # below the limit
        assert x.sum().item() == 1000
    finally:
        torch.tpu.set_per_process_memory_fraction(1.0, 1)


def test_memory_fraction_keeps_cache_and_frees_it_first():
    r = run_python(
        """
        import torch
        torch.tpu.set_per_process_memory_fraction(0.5)  # 32 MiB of 64
        keep = [torch.empty(8 << 20, dtype=torch.uint8, device="tpu") for _ in range(4)]
        try:
            torch.empty(8 << 20, dtype=torch.uint8, device="tpu")
            print("no error")
        except torch.OutOfMemoryError as e:
            print("OOM", "limits this process to 32.00 MiB (33554432 bytes)" in str(e))
        del keep[0]
        torch.tpu.set_per_process_memory_fraction(0.25)
        print(torch.tpu.memory_reserved() == 32 << 20)   # nothing freed by lowering it
        again = torch.empty(8 << 20, dtype=torch.uint8, device="tpu")  # the cached block
        print(torch.tpu.memory_reserved() == 32 << 20)
        del keep, again
        retries = torch.tpu.memory_stats()["num_alloc_retries"]
        side = torch.tpu.Stream()
        with torch.tpu.stream(side):  # another stream: the cache is released first
            y = torch.empty(16 << 20, dtype=torch.uint8, device="tpu")
        print(torch.tpu.memory_reserved() == 16 << 20, torch.tpu.memory_stats()["num_alloc_retries"] == retries + 1)
        print(torch.tpu.mem_get_info() == (48 << 20, 64 << 20))
        """,
        {"TORCH_TPU_MEMORY_LIMIT": "64M"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["OOM", "True", "True", "True", "True", "True", "True"]


# ----------------------------------------------------- pinned host memory


def test_host_memory_stats():
    torch.tpu.synchronize()
    torch.tpu.reset_accumulated_host_memory_stats()
    torch.tpu.reset_peak_host_memory_stats()
    before = torch.tpu.host_memory_stats()
    assert before["num_host_alloc"] == 0 and before["allocations.allocated"] == 0
    assert before["host_alloc_time.count"] == 0
    p = torch.empty(10000, dtype=torch.uint8).pin_memory()  # three 4 KiB pages
    s = torch.tpu.host_memory_stats()
    assert s["allocations.current"] == before["allocations.current"] + 1
    assert s["allocated_bytes.current"] == before["allocated_bytes.current"] + 3 * 4096
    assert s["active_requests.current"] == s["allocations.current"]
    assert s["active_bytes.current"] == s["allocated_bytes.current"]
    assert s["num_host_alloc"] == 1 and s["host_alloc_time.count"] == 1
    assert s["allocated_bytes.peak"] >= s["allocated_bytes.current"]
    nested = torch.tpu.host_memory_stats_as_nested_dict()
    assert nested["allocations"]["current"] == s["allocations.current"]
    assert set(nested["host_free_time"]) == {"total", "max", "min", "count", "avg"}
    d = p.to("tpu", non_blocking=True)
    del p
    torch.tpu.synchronize()  # the queued copy held the block; now it is gone
    s = torch.tpu.host_memory_stats()
    assert s["allocations.current"] == before["allocations.current"]
    assert s["allocated_bytes.freed"] == 3 * 4096 and s["num_host_free"] == 1
    torch.tpu.reset_peak_host_memory_stats()
    assert torch.tpu.host_memory_stats()["allocated_bytes.peak"] == s["allocated_bytes.current"]
    torch.tpu.reset_accumulated_host_memory_stats()
    s = torch.tpu.host_memory_stats()
    assert s["num_host_alloc"] == 0 and s["num_host_free"] == 0 and s["allocated_bytes.freed"] == 0
    del d


# ------------------------------------------------- raw blocks, caching off


def test_caching_allocator_alloc_and_delete():
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    ptr = torch.tpu.caching_allocator_alloc(1000)
    assert ptr != 0 and torch.tpu.memory_allocated() == before + 1024
    side = torch.tpu.Stream()
    on_side = torch.tpu.caching_allocator_alloc(5000, stream=side)
    on_chip1 = torch.tpu.caching_allocator_alloc(100, device="tpu:1", stream=0)
    seg = [s for s in torch.tpu.memory._snapshot()["segments"] if s["address"] == on_side]
    assert seg and seg[0]["stream"] == side.stream_id and seg[0]["blocks"][0]["requested_size"] == 5000
    for p in (ptr, on_side, on_chip1):
        torch.tpu.caching_allocator_delete(p)
    assert torch.tpu.memory_allocated() == before
    assert torch.tpu.caching_allocator_alloc(0) == 0
    torch.tpu.caching_allocator_delete(0)
    with pytest.raises(RuntimeError, match="caching_allocator_delete: 0x[0-9a-f]+ was not returned by "
                                           "caching_allocator_alloc, or was deleted already"):
        torch.tpu.caching_allocator_delete(ptr)
    # A live tensor's block is not a raw block: deleting it would free the
    # tensor's memory under it.
    live = torch.full((256,), 3.0, device="tpu")
    with pytest.raises(RuntimeError, match="was not returned by caching_allocator_alloc"):
        torch.tpu.caching_allocator_delete(live.data_ptr())
    assert torch.tpu.memory_allocated() == before + 1024
    assert live.cpu().eq(3.0).all()
    del live
    with pytest.raises(TypeError, match="invalid type for stream argument.*got str"):
        torch.tpu.caching_allocator_alloc(10, stream="side")
    with pytest.raises(ValueError, match="is not a stream of tpu:0"):
        torch.tpu.caching_allocator_alloc(10, stream=torch.tpu.Stream("tpu:1"))
    with pytest.raises(ValueError, match="stream 40 is not a stream of tpu:0"):
        torch.tpu.caching_allocator_alloc(10, stream=40)
    with pytest.raises(ValueError, match="size must be non-negative, got -5"):
        torch.tpu.caching_allocator_alloc(-5)
    with pytest.raises(torch.OutOfMemoryError):
        torch.tpu.caching_allocator_alloc(1 << 40)
    # Past int64 (CUDA: an OverflowError from PyLong_AsSsize_t), not pybind11's
    # "incompatible function arguments" listing.
    with pytest.raises(OverflowError, match="size 18446744073709551616 is too large"):
        torch.tpu.caching_allocator_alloc(2**64)
    with pytest.raises(ValueError, match=f"stream {2**64} is not a stream of tpu:0"):
        torch.tpu.caching_allocator_alloc(10, stream=2**64)
    assert torch.tpu.memory_allocated() == before
    assert torch.tpu.get_allocator_backend() == "native"


def test_caching_allocator_disabled():
    torch.tpu.synchronize()
    torch.tpu.empty_cache()
    reserved = torch.tpu.memory_reserved()
    frees = torch.tpu.memory_stats()["num_device_free"]
    with torch.tpu.caching_allocator_disabled():
        x = torch.empty(1 << 20, device="tpu")
        assert torch.tpu.memory_reserved() == reserved + (4 << 20)
        del x
        # Back to the target once no queued work can use it: at the free
        # itself in strict mode; fused mode queues a marker at the free, so
        # there at the next allocation after the stream has run it.
        torch.tpu.synchronize()
        small = torch.empty(1, device="tpu")
        assert torch.tpu.memory_reserved() == reserved + 512
        assert torch.tpu.memory_stats()["num_device_free"] == frees + 1
        del small
        y = torch.ones(1 << 20, device="tpu") * 2  # values stay right without caching
        assert y.sum().item() == 2 * (1 << 20)
        del y
    torch.tpu.synchronize()
    torch.tpu.empty_cache()
    z = torch.empty(1 << 20, device="tpu")
    del z
    assert torch.tpu.memory_reserved() == reserved + (4 << 20)  # cached again
    torch.tpu.caching_allocator_enable(True)
    with pytest.raises(RuntimeError, match="caching_allocator_enable expects a bool, but got str"):
        torch.tpu.caching_allocator_enable("no")
