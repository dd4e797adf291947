// PyTorch's DeviceAllocator over the runtime's per-chip caching allocator,
// so that tensors, torch.accelerator memory calls and torch.tpu.memory_*
// all see one set of numbers; plus the pinned host allocator behind
// Tensor.pin_memory().
#include <c10/core/CachingDeviceAllocator.h>

#include "core/glue.h"
#include "core/mem_history.h"

extern "C" {
#include "tpu/host_mem.h"
}

namespace torch_tpu {
namespace {

void free_device_block(void* ptr) {
  // Runs from destructors: a failure (e.g. in a forked child) cannot be
  // raised, and the block then simply stays with the dead runtime. While
  // history records frees (context "all"), the free's own stack goes with
  // its events.
  MemContext* context = maybe_capture_mem_context(TPU_MEM_CONTEXT_ALL);
  if (tpu_mem_free_ctx(ptr, context) != TPU_OK) tpu_clear_error();
  release_mem_context(context);
}

// A C statistic in PyTorch's form, pool by pool (CUDA's order: all, small,
// large).
void set_stat(c10::CachingAllocator::StatArray& out, const tpu_mem_stat* stat) {
  using c10::CachingAllocator::StatType;
  const std::pair<StatType, tpu_mem_pool> pools[] = {{StatType::AGGREGATE, TPU_MEM_POOL_ALL},
                                                     {StatType::SMALL_POOL, TPU_MEM_POOL_SMALL},
                                                     {StatType::LARGE_POOL, TPU_MEM_POOL_LARGE}};
  for (const auto& [type, pool] : pools) {
    auto& s = out[static_cast<size_t>(type)];
    s.current = stat[pool].current;
    s.peak = stat[pool].peak;
    s.allocated = stat[pool].allocated;
    s.freed = stat[pool].freed;
  }
}

struct TpuDeviceAllocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex chip = current_chip();
    check_chip_index(chip, "tpu allocator");
    void* ptr = nullptr;
    // While history records, the block keeps the allocating thread's
    // stack: captured here, before the allocator's lock (it takes the GIL).
    MemContext* context = maybe_capture_mem_context(TPU_MEM_CONTEXT_STATE);
    const tpu_status st = tpu_mem_alloc_ctx(chip, nbytes, current_c_stream(chip), context, &ptr);
    release_mem_context(context);
    TPU_CHECK_STATUS(st);
    return {ptr, ptr, &free_device_block, c10::Device(c10::DeviceType::PrivateUse1, chip)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &free_device_block; }

  // Device-to-device bytes, ordered on the current stream like any op.
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count == 0) return;
    int chip = 0;
    TPU_CHECK_STATUS(tpu_mem_chip_of(dest, &chip));
    tpu_op op{};
    op.code = TPU_OP_COPY;
    op.n_in = 1;
    op.out.data = dest;
    op.out.ndim = 1;
    op.out.sizes[0] = static_cast<int64_t>(count);
    op.out.strides[0] = 1;
    op.out.dtype = TPU_DTYPE_U8;
    op.out.storage = dest;
    op.out.storage_nbytes = static_cast<int64_t>(count);
    op.in[0] = op.out;
    op.in[0].data = op.in[0].storage = const_cast<void*>(src);
    submit(static_cast<c10::DeviceIndex>(chip), op, "storage copy");
  }

  bool initialized() override { return chip_count() > 0; }

  void emptyCache(c10::MempoolId_t /*pool*/) override {
    for (c10::DeviceIndex i = 0; i < chip_count(); i++) TPU_CHECK_STATUS(tpu_mem_empty_cache(i));
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (!ptr.get()) return;
    TPU_CHECK_STATUS(tpu_mem_record_stream(ptr.get(), c_stream(stream)));
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    check_chip_index(device, "memory_stats");
    tpu_mem_stats s{};
    TPU_CHECK_STATUS(tpu_mem_get_stats(device, &s));
    c10::CachingDeviceAllocator::DeviceStats out;
    set_stat(out.allocation, s.allocation);
    set_stat(out.segment, s.segment);
    set_stat(out.active, s.active);
    set_stat(out.allocated_bytes, s.allocated_bytes);
    set_stat(out.reserved_bytes, s.reserved_bytes);
    set_stat(out.active_bytes, s.active_bytes);
    set_stat(out.requested_bytes, s.requested_bytes);
    set_stat(out.inactive_split, s.inactive_split);
    set_stat(out.inactive_split_bytes, s.inactive_split_bytes);
    // The oversize statistics stay zero, truly: every block may be split
    // (there is no max_split_size).
    out.num_alloc_retries = static_cast<int64_t>(s.num_alloc_retries);
    out.num_ooms = static_cast<int64_t>(s.num_ooms);
    out.num_sync_all_streams = static_cast<int64_t>(s.num_sync_all_streams);
    out.num_device_alloc = static_cast<int64_t>(s.num_device_alloc);
    out.num_device_free = static_cast<int64_t>(s.num_device_free);
    return out;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_chip_index(device, "reset_accumulated_memory_stats");
    TPU_CHECK_STATUS(tpu_mem_reset_accumulated_stats(device));
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_chip_index(device, "reset_peak_memory_stats");
    TPU_CHECK_STATUS(tpu_mem_reset_peak_stats(device));
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    check_chip_index(device, "mem_get_info");
    uint64_t free_bytes = 0, total = 0;
    TPU_CHECK_STATUS(tpu_mem_get_info(device, &free_bytes, &total));
    return {static_cast<size_t>(free_bytes), static_cast<size_t>(total)};
  }
};

TpuDeviceAllocator g_device_allocator;

void free_pinned(void* ptr) {
  if (tpu_host_free(ptr) != TPU_OK) tpu_clear_error();
}

// Pinned memory is host (CPU) memory the runtime may copy from
// asynchronously.
struct TpuPinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nullptr;
    TPU_CHECK_STATUS(tpu_host_alloc(nbytes, &ptr));
    return {ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

TpuPinnedAllocator g_pinned_allocator;

}  // namespace

c10::Allocator* device_allocator() { return &g_device_allocator; }
c10::Allocator* pinned_host_allocator() { return &g_pinned_allocator; }
bool is_pinned_host_ptr(const void* ptr) { return ptr && tpu_host_is_pinned(ptr); }

void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
  const c10::DeviceIndex chip = impl->device().index();
  check_chip_index(chip, "resize_");
  c10::DataPtr fresh;
  {
    // Allocate on the storage's chip, whatever the current chip is.
    const c10::DeviceIndex saved = current_chip();
    set_current_chip(chip);
    try {
      fresh = g_device_allocator.allocate(nbytes);
    } catch (...) {
      set_current_chip(saved);
      throw;
    }
    set_current_chip(saved);
  }
  const size_t keep = std::min(nbytes, impl->nbytes());
  if (keep > 0 && impl->data() != nullptr) {
    g_device_allocator.copy_data(fresh.get(), impl->data(), keep);
    // The old block is freed below, maybe while the copy is still queued
    // on the current stream, which need not be the stream the block was
    // allocated for: keep it from reuse until the copy has run.
    TPU_CHECK_STATUS(tpu_mem_record_stream(const_cast<void*>(impl->data()), current_c_stream(chip)));
  }
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(nbytes);
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator);

}  // namespace torch_tpu
