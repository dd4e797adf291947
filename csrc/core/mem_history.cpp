// Stack-trace contexts for the allocator's history (see mem_history.h).
#include "core/mem_history.h"

#include <mutex>
#include <string>
#include <vector>

#include "core/glue.h"

namespace torch_tpu {

std::atomic<int> g_capture_level{TPU_MEM_CONTEXT_NEVER};
std::atomic<bool> g_capture_cpp{false};

namespace {

void retain_context(void* context) {
  static_cast<MemContext*>(context)->refs.fetch_add(1, std::memory_order_relaxed);
}

// Runs on any thread that frees memory, maybe under an allocator lock:
// destroying a CapturedTraceback needs no GIL (PyTorch defers the Python
// frames' decrefs to the next capture).
void release_context(void* context) {
  auto* c = static_cast<MemContext*>(context);
  // acq_rel: the last owner must see every other owner's use finished.
  if (c->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete c;
}

std::mutex g_configure_mutex;

}  // namespace

void install_mem_context_ops() {
  static const tpu_mem_context_ops ops{&retain_context, &release_context};
  tpu_mem_set_context_ops(&ops);
}

MemContext* capture_mem_context(tpu_mem_context_level level) {
  if (g_capture_level.load(std::memory_order_relaxed) < level) return nullptr;
  auto* c = new MemContext;
  // Python and TorchScript frames always; C++ frames for stacks="all".
  c->traceback = torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true,
                                                  /*cpp=*/g_capture_cpp.load(std::memory_order_relaxed));
  return c;
}

void release_mem_context(MemContext* context) {
  if (context) release_context(context);
}

void configure_mem_history(bool trace, uint64_t max_entries, tpu_mem_context_level level, bool cpp_frames,
                           const std::vector<std::string>& skip_actions, bool clear) {
  uint32_t skip = 0;
  for (const std::string& name : skip_actions) {
    int found = -1;
    for (int a = 0; a < TPU_MEM_ACTION_COUNT; a++)
      if (name == tpu_mem_action_name(static_cast<tpu_mem_action>(a))) found = a;
    TORCH_CHECK_VALUE(found >= 0, "_record_memory_history: unknown action '", name,
                      "' in skip_actions (expected alloc, free_requested, free_completed, segment_alloc, "
                      "segment_free, oom or snapshot)");
    skip |= 1u << found;
  }
  std::lock_guard<std::mutex> lock(g_configure_mutex);
  tpu_mem_history_config cfg{trace, max_entries, level, skip, clear};
  TPU_CHECK_STATUS(tpu_mem_history_configure(&cfg));
  g_capture_cpp.store(cpp_frames, std::memory_order_relaxed);
  g_capture_level.store(level, std::memory_order_relaxed);
}

}  // namespace torch_tpu
