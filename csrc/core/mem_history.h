// The contexts the C allocator keeps for torch.tpu.memory._record_memory_history:
// stack traces captured on the allocating (or freeing) thread with
// PyTorch's CapturedTraceback, the same object CUDA's allocator keeps, so
// that snapshots symbolize them the same way. The C allocator owns blocks,
// events and the references to contexts (tpu/mem_history.h); this layer
// only captures and frees them.
#pragma once

#include <torch/csrc/profiler/combined_traceback.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

extern "C" {
#include "tpu/mem_history.h"
}

namespace torch_tpu {

// A reference-counted traceback: the C allocator's opaque context.
struct MemContext {
  std::atomic<int64_t> refs{1};
  std::shared_ptr<torch::CapturedTraceback> traceback;
};

// What recording captures, kept here so that the allocation path decides
// with one relaxed load: a tpu_mem_context_level (NEVER when off), and
// whether C++ frames are captured too (stacks="all").
extern std::atomic<int> g_capture_level;
extern std::atomic<bool> g_capture_cpp;

// Installs the retain/release pair in the C allocator (once, at import).
void install_mem_context_ops();

// A new context (one reference, the caller's) holding the calling
// thread's traceback when recording keeps contexts at `level` or above,
// else nullptr. Call with no allocator lock held: capturing Python frames
// takes the GIL.
MemContext* capture_mem_context(tpu_mem_context_level level);

// Drops the caller's reference (nullptr is a no-op).
void release_mem_context(MemContext* context);

// The allocation path's test: one relaxed load when recording is off.
inline MemContext* maybe_capture_mem_context(tpu_mem_context_level level) {
  if (C10_LIKELY(g_capture_level.load(std::memory_order_relaxed) < level)) return nullptr;
  return capture_mem_context(level);
}

// Applies recording settings to the C allocator and the capture flags
// together. Raises (ValueError naming it) for an unknown action name in
// skip_actions.
void configure_mem_history(bool trace, uint64_t max_entries, tpu_mem_context_level level, bool cpp_frames,
                           const std::vector<std::string>& skip_actions, bool clear);

}  // namespace torch_tpu
