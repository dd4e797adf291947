// Batch norm. `native_batch_norm` updates its running statistics in place,
// but its schema does not mark them as written, so the generic CPU
// fallback (which copies back only arguments marked as written) would lose
// the update. It runs instead as `_native_batch_norm_legit`, whose schema
// says so, through the same counted fallback.
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_native_batch_norm_legit_ops.h>
#include <torch/library.h>

#include "core/fallback.h"
#include "core/glue.h"

namespace torch_tpu {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
  const bool has_mean = running_mean.has_value() && running_mean->defined();
  const bool has_var = running_var.has_value() && running_var->defined();
  TORCH_CHECK(has_mean == has_var, "native_batch_norm: running_mean and running_var must be given together");
  if (!has_mean)
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::_native_batch_norm_legit_no_stats>::call(
        input, weight, bias, training, momentum, eps);
  // The legit op takes the statistics as mutable references; the caller's
  // tensors are the ones updated.
  at::Tensor mean = *running_mean, var = *running_var;
  return at::native::call_fallback_fn<&cpu_fallback, at::_ops::_native_batch_norm_legit>::call(
      input, weight, bias, mean, var, training, momentum, eps);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("native_batch_norm", native_batch_norm); }

}  // namespace torch_tpu
