// Per-chip Philox generators and their registration with PyTorch.
#include "core/generator.h"

#include <ATen/Utils.h>
#include <c10/core/TensorImpl.h>

#include <cstring>
#include <deque>

#include "core/glue.h"

namespace torch_tpu {

TpuGeneratorImpl::TpuGeneratorImpl(c10::DeviceIndex index)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(c10::default_rng_seed_val) {}

void TpuGeneratorImpl::set_current_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = seed;
  offset_ = 0;
}

void TpuGeneratorImpl::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(mutex_);
  offset_ = offset;
}

uint64_t TpuGeneratorImpl::get_offset() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return offset_;
}

uint64_t TpuGeneratorImpl::current_seed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return seed_;
}

uint64_t TpuGeneratorImpl::seed() {
  const uint64_t s = c10::detail::getNonDeterministicRandom();
  set_current_seed(s);
  return s;
}

void TpuGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK_TYPE(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() &&
                       new_state.device().is_cpu(),
                   "set_rng_state: expected a CPU torch.ByteTensor, got ", new_state.dtype(), " on ",
                   new_state.device());
  TORCH_CHECK_VALUE(new_state.numel() == 16, "set_rng_state: a tpu generator state has 16 bytes, got ",
                    new_state.numel());
  uint64_t words[2];
  std::memcpy(words, new_state.data(), sizeof words);
  std::lock_guard<std::mutex> lock(mutex_);
  seed_ = words[0];
  offset_ = words[1];
}

c10::intrusive_ptr<c10::TensorImpl> TpuGeneratorImpl::get_state() const {
  auto state = at::detail::empty_cpu({16}, at::kByte, std::nullopt, std::nullopt, std::nullopt,
                                     std::nullopt);
  uint64_t words[2];
  {
    std::lock_guard<std::mutex> lock(mutex_);
    words[0] = seed_;
    words[1] = offset_;
  }
  std::memcpy(state.data_ptr(), words, sizeof words);
  return state.getIntrusivePtr();
}

uint64_t TpuGeneratorImpl::take_offset() {
  std::lock_guard<std::mutex> lock(mutex_);
  return offset_++;
}

TpuGeneratorImpl* TpuGeneratorImpl::clone_impl() const {
  auto* g = new TpuGeneratorImpl(device().index());
  std::lock_guard<std::mutex> lock(mutex_);
  g->seed_ = seed_;
  g->offset_ = offset_;
  return g;
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  // One per chip, created on first use and never destroyed (like CUDA's).
  static std::mutex mutex;
  static std::deque<at::Generator> generators;
  if (index < 0) index = current_chip();
  check_chip_index(index, "default_generator");
  std::lock_guard<std::mutex> lock(mutex);
  while (generators.size() < static_cast<size_t>(chip_count()))
    generators.push_back(at::make_generator<TpuGeneratorImpl>(static_cast<c10::DeviceIndex>(generators.size())));
  return generators[static_cast<size_t>(index)];
}

TpuGeneratorImpl* get_generator(const std::optional<at::Generator>& gen, c10::DeviceIndex index) {
  if (gen.has_value() && gen->defined()) {
    TORCH_CHECK(gen->device().type() == c10::DeviceType::PrivateUse1,
                "expected a tpu generator for a tpu tensor, got a generator on ", gen->device());
    return at::check_generator<TpuGeneratorImpl>(gen);
  }
  return at::check_generator<TpuGeneratorImpl>(default_generator(index));
}

}  // namespace torch_tpu
