// The per-chip random generator: a Philox key (the seed) and a counter
// offset. The host hands each random op a fresh offset, so the values an op
// draws depend only on (seed, offset, element index): not on threads,
// modes or strides.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <mutex>

namespace torch_tpu {

struct TpuGeneratorImpl final : c10::GeneratorImpl {
  explicit TpuGeneratorImpl(c10::DeviceIndex index);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  // State: 16 bytes as a CPU uint8 tensor, the seed then the offset.
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // Returns the offset for the next op and advances past it.
  uint64_t take_offset();

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  TpuGeneratorImpl* clone_impl() const override;
  mutable std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The default generator of a chip (raises for a bad index).
const at::Generator& default_generator(c10::DeviceIndex index);

// A tpu generator: `gen` if given (checked to be a tpu generator), else the
// default generator of `index`.
TpuGeneratorImpl* get_generator(const std::optional<at::Generator>& gen, c10::DeviceIndex index);

}  // namespace torch_tpu
