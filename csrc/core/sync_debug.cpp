// The sync debug mode (see sync_debug.h).
#include "core/sync_debug.h"

#include <c10/util/Exception.h>

#include <string>

namespace torch_tpu {

std::atomic<int> g_sync_debug_mode{0};

namespace {
thread_local const char* tls_site = nullptr;
}  // namespace

void set_sync_debug_mode(int64_t mode) {
  TORCH_CHECK(mode >= 0 && mode <= 2, "set_sync_debug_mode: invalid debug_mode ", mode,
              " (expected 0 or 'default', 1 or 'warn', 2 or 'error')");
  g_sync_debug_mode.store(static_cast<int>(mode), std::memory_order_relaxed);
}

void warn_or_error_on_sync(const char* what) {
  const int mode = sync_debug_mode();
  if (mode == 0) return;
  std::string msg = "called a synchronizing TPU operation: ";
  if (tls_site != nullptr)
    msg += std::string(tls_site) + " (" + what + ")";
  else
    msg += what;
  if (mode == 2) TORCH_CHECK(false, msg, " [torch.tpu.set_sync_debug_mode('error')]");
  TORCH_WARN(msg);
}

SyncSite::SyncSite(const char* name) {
  if (C10_UNLIKELY(sync_debug_mode() != 0) && tls_site == nullptr) {
    tls_site = name;
    owner_ = true;
  }
}

SyncSite::~SyncSite() {
  if (owner_) tls_site = nullptr;
}

}  // namespace torch_tpu
