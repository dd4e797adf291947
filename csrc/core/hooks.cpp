// PrivateUse1 hooks: what PyTorch asks of any accelerator backend
// (availability, chips, generators, pinned memory, pointer lookup, storage
// resize). Registered once, when the extension is loaded.
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "core/generator.h"
#include "core/glue.h"

namespace torch_tpu {
namespace {

struct TpuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return chip_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex index) const override { return index >= 0 && index < chip_count(); }
  void init() const override { ensure_runtime(); }

  c10::DeviceIndex deviceCount() const override { return chip_count(); }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_current_chip(index); }
  c10::DeviceIndex getCurrentDevice() const override { return current_chip(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    const c10::DeviceIndex old = current_chip();
    if (index != old) set_current_chip(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override { return exchangeDevice(index); }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    if (index < 0) index = current_chip();
    check_chip_index(index, "Generator");
    return at::make_generator<TpuGeneratorImpl>(index);
  }

  at::Device getDeviceFromPtr(void* data) const override {
    int chip = 0;
    TPU_CHECK_STATUS(tpu_mem_chip_of(data, &chip));
    return at::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(chip));
  }

  bool isPinnedPtr(const void* data) const override { return is_pinned_host_ptr(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_host_allocator(); }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    resize_storage_bytes(storage, nbytes);
  }
};

// Registered at load time; never destroyed (PyTorch keeps the pointer).
struct RegisterHooks {
  RegisterHooks() { at::RegisterPrivateUse1HooksInterface(new TpuHooks()); }
};
RegisterHooks g_register_hooks;

}  // namespace
}  // namespace torch_tpu
