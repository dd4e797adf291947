// Convolutions. PyTorch routes convolution on a backend it does not know
// to the "overrideable" ops, which have no CPU kernel, so the global
// fallback cannot serve them directly. Until a native kernel exists they
// run as the generic `convolution` / `convolution_backward` ops through the
// counted CPU fallback (`aten::convolution` in torch.tpu.fallback_stats()).
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/convolution_backward_ops.h>
#include <ATen/ops/convolution_ops.h>
#include <torch/library.h>

#include "core/fallback.h"
#include "core/glue.h"

namespace torch_tpu {
namespace {

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
                                    c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  return at::native::call_fallback_fn_symint<&cpu_fallback, at::_ops::convolution>::call(
      input, weight, bias, stride, padding, dilation, transposed, output_padding, std::move(groups));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask) {
  at::Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0] || output_mask[1]) {
    std::tie(grad_input, grad_weight, std::ignore) =
        at::native::call_fallback_fn_symint<&cpu_fallback, at::_ops::convolution_backward>::call(
            grad_output, input, weight, std::nullopt, stride, padding, dilation, transposed, output_padding,
            std::move(groups), {output_mask[0], output_mask[1], false});
  }
  if (output_mask[2]) {
    // The bias gradient sums grad_output over every dim but channels (dim
    // 1, for plain and transposed convolutions alike): a native reduction.
    std::vector<int64_t> dims{0};
    for (int64_t d = 2; d < grad_output.dim(); d++) dims.push_back(d);
    grad_bias = grad_output.sum(dims);
  }
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", convolution_overrideable);
  m.impl("convolution_backward_overrideable", convolution_backward_overrideable);
}

}  // namespace torch_tpu
