"""The caching allocator as seen through torch.tpu and torch.accelerator."""
import pytest
import torch

from conftest import run_python


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
