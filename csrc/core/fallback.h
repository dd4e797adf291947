// The global CPU fallback for ops without a native tpu kernel.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torch_tpu {

// Boxed fallback: counts the op, warns once per op (or raises when
// fallbacks are errors), then runs PyTorch's CPU kernel on copies and
// writes results back. Random ops draw from a CPU generator seeded from
// the tpu generator, so tpu seeding governs them too.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// op name -> calls since the last reset, sorted by name.
std::vector<std::pair<std::string, int64_t>> fallback_stats();
void reset_fallback_stats();

// Whether a fallback raises instead (initially TORCH_TPU_FALLBACK=error).
void set_fallback_error(bool on);
bool fallback_error();

}  // namespace torch_tpu
