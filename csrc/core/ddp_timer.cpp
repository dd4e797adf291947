// DDP's timer for the tpu device (c10d::TimerRegistry): the reducer times
// forward, backward compute and backward communication of sampled
// iterations (DDP's logging data, `_get_ddp_logging_data`). Without one it
// warns "Time stats are currently only collected for CPU and CUDA
// devices". As CUDA's timer does, it records events on the current stream
// and measures between them, so the times are the device's, not the host's
// issue times.
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <optional>

// In c10d's namespace, where the registry's macro looks for it.
namespace c10d {
namespace {

class TpuTimer : public c10d::Timer {
 public:
  explicit TpuTimer(c10::Device device) : device_(device) {}

  void record(Event event) override {
    // The host time too: the reducer also reads it (getTimestamp).
    c10d::Timer::record(event);
    event_of(event).record(c10::impl::getDeviceGuardImpl(device_.type())->getStream(device_));
  }

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    c10::Event& a = event_of(start);
    c10::Event& b = event_of(end);
    if (!a.was_marked_for_recording() || !b.was_marked_for_recording()) return std::nullopt;
    a.synchronize();
    b.synchronize();
    double ms = a.elapsedTime(b);
    // Events of different iterations can come out of order (as on CUDA).
    if (ms < 0) return std::nullopt;
    return static_cast<int64_t>(ms * 1e6);
  }

 private:
  c10::Event& event_of(Event event) {
    switch (event) {
      case Event::kForwardStart: return forward_start_;
      case Event::kBackwardComputeStart: return backward_compute_start_;
      case Event::kBackwardComputeEnd: return backward_compute_end_;
      case Event::kBackwardCommStart: return backward_comm_start_;
      case Event::kBackwardCommEnd: return backward_comm_end_;
    }
    TORCH_INTERNAL_ASSERT(false, "TpuTimer: unknown event");
  }

  c10::Device device_;
  c10::Event forward_start_{c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT};
  c10::Event backward_compute_start_{c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT};
  c10::Event backward_compute_end_{c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT};
  c10::Event backward_comm_start_{c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT};
  c10::Event backward_comm_end_{c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT};
};

C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, TpuTimer)

}  // namespace
}  // namespace c10d
