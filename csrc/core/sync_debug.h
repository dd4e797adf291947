// torch.tpu.set_sync_debug_mode: warn about (or refuse) every call that
// makes the host wait for the device, where CUDA's warn_or_error_on_sync
// does: blocking copies between host and device (Tensor.item(), .cpu(),
// .tolist(), print, .to("tpu") of pageable memory), Stream.synchronize(),
// and ops whose result needs the device's data on the host (nonzero and
// what builds on it). As on CUDA, torch.tpu.synchronize() and
// Event.synchronize() are explicit waits and do not count.
//
// Off (the default), a check is one relaxed load of one flag.
#pragma once

#include <c10/macros/Macros.h>

#include <atomic>

namespace torch_tpu {

// CUDA's values: 0 off ("default"), 1 warn, 2 error.
extern std::atomic<int> g_sync_debug_mode;

inline int sync_debug_mode() { return g_sync_debug_mode.load(std::memory_order_relaxed); }

// Raises a RuntimeError for a mode outside 0..2, naming the value.
void set_sync_debug_mode(int64_t mode);

// Warns (UserWarning) or raises (RuntimeError) "called a synchronizing TPU
// operation: ..." naming the call that waits: the innermost SyncSite of
// this thread if one is open, with `what` (how it waits) in brackets.
[[gnu::cold]] void warn_or_error_on_sync(const char* what);

// Call right before a host wait, before anything is queued that the wait
// is for (so that a refusal leaves no work behind).
inline void check_sync(const char* what) {
  if (C10_UNLIKELY(sync_debug_mode() != 0)) warn_or_error_on_sync(what);
}

// Names the user-facing call that synchronises inside it (torch.nonzero,
// Tensor.item()) for the message of a check further down. The outermost
// site names it. Only touches thread-local state when the mode is on.
class SyncSite {
 public:
  explicit SyncSite(const char* name);
  ~SyncSite();
  SyncSite(const SyncSite&) = delete;
  SyncSite& operator=(const SyncSite&) = delete;

 private:
  bool owner_ = false;
};

}  // namespace torch_tpu
