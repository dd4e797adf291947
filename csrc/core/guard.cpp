// The device guard: PyTorch's one interface for the current chip, streams
// and events of a device type. torch.Stream / torch.Event / torch.accelerator
// and torch.tpu's Stream and Event all go through it.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "core/glue.h"
#include "core/sync_debug.h"

namespace torch_tpu {
namespace {

constexpr auto kTpu = c10::DeviceType::PrivateUse1;

tpu_event* as_event(void* event) { return static_cast<tpu_event*>(event); }

struct TpuGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kTpu; }

  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kTpu, "tpu guard: expected a tpu device, got ", d);
    const c10::Device old = getDevice();
    if (old.index() != d.index()) setDevice(d);
    return old;
  }

  c10::Device getDevice() const override { return c10::Device(kTpu, current_chip()); }

  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kTpu, "tpu guard: expected a tpu device, got ", d);
    set_current_chip(d.index() < 0 ? 0 : d.index());
  }

  void uncheckedSetDevice(c10::Device d) const noexcept override {
    try {
      set_current_chip(d.index() < 0 ? 0 : d.index());
    } catch (...) {
      // Called from guard destructors, restoring an index that was valid.
    }
  }

  c10::Stream getStream(c10::Device d) const override { return current_stream(d.index()); }

  c10::Stream getDefaultStream(c10::Device d) const override {
    const c10::DeviceIndex index = d.index() < 0 ? current_chip() : d.index();
    check_chip_index(index, "default_stream");
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, index), 0);
  }

  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/) const override {
    return getNewStream(d, 0);
  }

  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    const c10::DeviceIndex index = d.index() < 0 ? current_chip() : d.index();
    check_chip_index(index, "Stream");
    tpu_stream* s = nullptr;
    TPU_CHECK_STATUS(tpu_stream_next_from_pool(index, &s));
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, index), tpu_stream_index(s));
  }

  c10::Stream exchangeStream(c10::Stream s) const override {
    const c10::Stream old = current_stream(s.device_index());
    set_current_stream(s);
    return old;
  }

  c10::DeviceIndex deviceCount() const noexcept override { return chip_count(); }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag /*flag*/) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "Event device index ",
                static_cast<int>(device_index), " does not match recording stream's device index ",
                static_cast<int>(stream.device_index()), ".");
    tpu_stream* s = c_stream(stream);
    if (*event == nullptr) {
      tpu_event* e = nullptr;
      TPU_CHECK_STATUS(tpu_event_create(&e));
      *event = e;
    }
    TPU_CHECK_STATUS(tpu_event_record(as_event(*event), s));
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    TPU_CHECK_STATUS(tpu_stream_wait_event(c_stream(stream), as_event(event)));
  }

  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    bool done = false;
    TPU_CHECK_STATUS(tpu_event_query(as_event(event), &done));
    return done;
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    if (event) tpu_event_free(as_event(event));
  }

  bool queryStream(const c10::Stream& stream) const override {
    bool done = false;
    TPU_CHECK_STATUS(tpu_stream_query(c_stream(stream), &done));
    return done;
  }

  // As on CUDA, a stream's synchronize counts for the sync debug mode;
  // the device's and an event's do not.
  void synchronizeStream(const c10::Stream& stream) const override {
    check_sync("torch.tpu.Stream.synchronize()");
    TPU_CHECK_STATUS(tpu_stream_synchronize(c_stream(stream)));
  }

  void synchronizeEvent(void* event) const override {
    if (event == nullptr) return;
    TPU_CHECK_STATUS(tpu_event_synchronize(as_event(event)));
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    const c10::DeviceIndex index = device_index < 0 ? current_chip() : device_index;
    check_chip_index(index, "synchronize");
    TPU_CHECK_STATUS(tpu_chip_synchronize(index));
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    if (data_ptr.get() == nullptr) return;
    TPU_CHECK_STATUS(tpu_mem_record_stream(data_ptr.get(), c_stream(stream)));
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(start && end, "elapsed_time: both events must be recorded first");
    double ms = 0;
    TPU_CHECK_STATUS(tpu_event_elapsed_ms(as_event(start), as_event(end), &ms));
    return ms;
  }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace torch_tpu
