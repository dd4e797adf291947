// The global CPU fallback (see fallback.h): every op without a native
// kernel still works, and every such op is visible.
#include "core/fallback.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/op_registration/adaption.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>

#include "core/generator.h"
#include "core/glue.h"

namespace torch_tpu {
namespace {

std::mutex g_stats_mutex;
std::map<std::string, int64_t> g_stats;      // calls since reset
std::map<std::string, bool> g_warned;        // warned once per process

bool fallback_error_from_env() {
  const char* v = std::getenv("TORCH_TPU_FALLBACK");
  return v && std::string(v) == "error";
}
std::atomic<bool> g_fallback_error{fallback_error_from_env()};

bool is_generator_arg(const c10::Argument& arg) {
  const auto& type = arg.real_type();
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (type->kind() != c10::TypeKind::OptionalType) return false;
  return type->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

// The chip of the first tpu tensor among the op's arguments, else the
// current chip.
c10::DeviceIndex chip_of_args(const torch::jit::Stack& stack, size_t first, size_t count) {
  for (size_t i = first; i < first + count; i++) {
    const auto& iv = stack[i];
    if (iv.isTensor() && iv.toTensor().defined() && iv.toTensor().device().type() == c10::DeviceType::PrivateUse1)
      return iv.toTensor().device().index();
  }
  return current_chip();
}

// splitmix64: decorrelates CPU seeds derived from (seed, offset) pairs.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A CPU seed for one fallback call, from the tpu generator's seed and its
// next offset: each call draws a fresh, reproducible stream.
uint64_t derived_cpu_seed(TpuGeneratorImpl* gen) { return mix64(gen->current_seed() ^ mix64(gen->take_offset())); }

// Replaces a missing or tpu generator argument by a fresh CPU generator
// seeded from the tpu generator's (seed, next offset). A CPU generator
// given explicitly is kept.
void derive_cpu_generators(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const size_t first = stack->size() - args.size();
  for (size_t i = 0; i < args.size(); i++) {
    if (!is_generator_arg(args[i])) continue;
    c10::IValue& iv = (*stack)[first + i];
    std::optional<at::Generator> given;
    if (iv.isGenerator()) {
      if (iv.toGenerator().device().type() != c10::DeviceType::PrivateUse1) continue;  // a CPU generator: keep
      given = iv.toGenerator();
    }
    TpuGeneratorImpl* gen = get_generator(given, chip_of_args(*stack, first, args.size()));
    iv = c10::IValue(at::make_generator<at::CPUGeneratorImpl>(derived_cpu_seed(gen)));
  }
}

// The device rules of PyTorch's CUDA kernels, which the CPU fallback would
// otherwise not see (every operand is copied to the CPU): all tensor
// operands on one device, except 0-dim CPU tensors (scalars, as
// TensorIterator takes them) and CPU index tensors of the index ops
// (x[cpu_mask] works on CUDA). Raises PyTorch's own "Expected all tensors
// to be on the same device" error, naming the argument. Also refuses, naming
// the op, a tpu tensor that does not fit in its storage. Returns the one
// device of the non-scalar operands, if any.
std::optional<c10::Device> check_same_device(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const auto& args = op.schema().arguments();
  const size_t first = stack.size() - args.size();
  const std::string method = op.schema().name();
  std::optional<c10::Device> common;
  auto check = [&](const at::Tensor& t, const c10::Argument& arg, bool cpu_ok) {
    if (!t.defined() || (t.is_cpu() && (cpu_ok || t.dim() == 0))) return;
    c10::impl::check_and_update_common_device(common, t, method.c_str(), arg.name().c_str());
    if (t.device().type() == c10::DeviceType::PrivateUse1) check_in_storage(t, method.c_str());
  };
  for (size_t i = 0; i < args.size(); i++) {
    const c10::IValue& iv = stack[first + i];
    const bool cpu_indices = args[i].name() == "indices" && method.rfind("aten::", 0) == 0 &&
                             method.find("index") != std::string::npos;
    if (iv.isTensor()) {
      check(iv.toTensor(), args[i], false);
    } else if (iv.isTensorList()) {
      for (const at::Tensor& t : iv.toTensorList()) check(t, args[i], cpu_indices);
    } else if (iv.isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& t : iv.toOptionalTensorList())
        if (t.has_value()) check(*t, args[i], cpu_indices);
    }
  }
  return common;
}

// PyTorch's cpu_fallback returns new tensors on the device of the first
// tensor argument: with a 0-dim CPU scalar in front (1.5 // x) the result
// would land on the CPU. Fresh (non-aliasing) results are moved to the
// operands' device afterwards; the scalar itself stays as it was, so that
// it still promotes as a Python number.
void move_results_to(c10::Device device, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& returns = op.schema().returns();
  const size_t first = stack->size() - returns.size();
  for (size_t i = 0; i < returns.size(); i++) {
    if (returns[i].alias_info() != nullptr) continue;  // an argument, already where it belongs
    c10::IValue& iv = (*stack)[first + i];
    if (iv.isTensor() && iv.toTensor().defined() && iv.toTensor().device() != device) {
      iv = c10::IValue(iv.toTensor().to(device));
    } else if (iv.isTensorList()) {
      c10::List<at::Tensor> list = iv.toTensorList();
      for (size_t k = 0; k < list.size(); k++)
        if (list.get(k).defined() && list.get(k).device() != device) list.set(k, list.get(k).to(device));
    }
  }
}

}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::optional<c10::Device> device = check_same_device(op, *stack);
  const std::string name = c10::toString(op.schema().operator_name());
  bool warn = false;
  {
    std::lock_guard<std::mutex> lock(g_stats_mutex);
    g_stats[name]++;
    if (!g_warned[name]) warn = g_warned[name] = true;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(!g_fallback_error.load(), "tpu has no native kernel for ", name,
                              " and fallbacks are errors (TORCH_TPU_FALLBACK=error)");
  if (warn)
    TORCH_WARN(name, " has no native tpu kernel yet and runs on the CPU (copies in and out). "
               "torch.tpu.fallback_stats() counts these calls.");
  const bool on_tpu = device.has_value() && device->type() == c10::DeviceType::PrivateUse1;
  if (!op.hasTag(at::Tag::nondeterministic_seeded)) {
    at::native::cpu_fallback(op, stack);
    if (on_tpu) move_results_to(*device, op, stack);
    return;
  }
  // A random op: its randomness must come from the tpu generator. Explicit
  // generator arguments are replaced; ops that draw from the CPU default
  // generator internally (native_dropout, ...) get it seeded from the tpu
  // generator for the call, then restored, so the CPU stream is untouched.
  // (Another thread drawing CPU random numbers during this call would see
  // the borrowed state: the price of reusing PyTorch's CPU kernels.)
  const auto& args = op.schema().arguments();
  const c10::DeviceIndex chip = chip_of_args(*stack, stack->size() - args.size(), args.size());
  derive_cpu_generators(op, stack);
  at::Generator cpu_default = at::detail::getDefaultCPUGenerator();
  c10::intrusive_ptr<c10::TensorImpl> saved;
  {
    std::lock_guard<std::mutex> lock(cpu_default.mutex());
    saved = cpu_default.get_state().getIntrusivePtr();
    cpu_default.set_current_seed(derived_cpu_seed(get_generator(std::nullopt, chip)));
  }
  auto restore = [&] {
    std::lock_guard<std::mutex> lock(cpu_default.mutex());
    cpu_default.set_state(at::Tensor(saved));
  };
  try {
    at::native::cpu_fallback(op, stack);
  } catch (...) {
    restore();
    throw;
  }
  restore();
  if (on_tpu) move_results_to(*device, op, stack);
}

std::vector<std::pair<std::string, int64_t>> fallback_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  return {g_stats.begin(), g_stats.end()};
}

void reset_fallback_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  g_stats.clear();
}

void set_fallback_error(bool on) { g_fallback_error.store(on); }
bool fallback_error() { return g_fallback_error.load(); }

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace torch_tpu
