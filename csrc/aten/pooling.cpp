// Max pooling on PyTorch's structured metas (sizes, ceil_mode, argument
// checks as on CPU): forward as one WINDOW MAX_POOL record (values and the
// flat position h * W + w of each maximum), backward as a scatter-add of
// the gradient into those positions (INDEX SCATTER_ADD, in window order).
#include <ATen/ops/max_pool2d_with_indices_backward_meta.h>
#include <ATen/ops/max_pool2d_with_indices_meta.h>
#include <torch/library.h>

#include "core/glue.h"
#include "core/structured.h"

namespace torch_tpu {
namespace {

// PyTorch's convention: one value for both dims, or one per dim; an empty
// stride means the kernel size.
int64_t pick(at::IntArrayRef v, int k, at::IntArrayRef fallback) {
  if (v.empty()) return pick(fallback, k, fallback);
  return v.size() == 1 ? v[0] : v[k];
}

void max_pool_kernel(Structured<at::meta::structured_max_pool2d_with_indices>& op, const at::Tensor& self,
                     at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
                     at::IntArrayRef dilation, bool) {
  const char* name = "aten::max_pool2d_with_indices";
  const at::Tensor& out = op.outputs_[0];
  const at::Tensor& indices = op.outputs_[1];
  if (out.numel() == 0) return;
  check_in_storage(self, name);
  const bool batched = self.dim() == 4;
  const at::Tensor x = batched ? self : self.unsqueeze(0);
  const at::Tensor o = batched ? out : out.unsqueeze(0), ix = batched ? indices : indices.unsqueeze(0);
  tpu_op rec{};
  rec.code = TPU_OP_WINDOW;
  rec.fn = TPU_WINDOW_MAX_POOL;
  rec.n_in = 1;
  rec.n_aux = 1;
  rec.in[0] = describe(x, name);
  rec.out = describe(o, name);
  rec.aux[0] = describe(ix, name);
  rec.p.window = {pick(kernel, 0, kernel),  pick(kernel, 1, kernel),  pick(stride, 0, kernel),
                  pick(stride, 1, kernel),  pick(padding, 0, padding), pick(padding, 1, padding),
                  pick(dilation, 0, dilation), pick(dilation, 1, dilation)};
  submit(self.device().index(), rec, name);
}

void max_pool_backward_kernel(Structured<at::meta::structured_max_pool2d_with_indices_backward>& op,
                              const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef,
                              at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, bool, const at::Tensor& indices) {
  const at::Tensor& grad_input = op.output_;
  check_same_device("max_pool2d_with_indices_backward", self.device(),
                    {{"grad_output", &grad_output}, {"indices", &indices}});
  // Each (n, c) plane: grad_input[h * W + w] += grad at every window whose
  // maximum was there, in window order. A channels-last grad_input (the
  // meta follows the input's layout) is filled through a contiguous one.
  at::Tensor target = grad_input.is_contiguous() ? grad_input : at::empty(grad_input.sizes(), grad_input.options());
  target.zero_();
  if (grad_output.numel() > 0) {
    const int64_t plane = target.size(-1) * target.size(-2);
    const int64_t planes = plane == 0 ? 0 : target.numel() / plane;
    at::Tensor flat = target.view({planes, plane});
    flat.scatter_add_(1, indices.reshape({planes, -1}), grad_output.reshape({planes, -1}));
  }
  if (!target.is_same(grad_input)) grad_input.copy_(target);
}

using at::meta::structured_max_pool2d_with_indices;
using at::meta::structured_max_pool2d_with_indices_backward;
using T = const at::Tensor&;
using A = at::IntArrayRef;

std::tuple<at::Tensor, at::Tensor> max_pool2d_with_indices(T self, A kernel, A stride, A padding, A dilation,
                                                           bool ceil_mode) {
  Structured<structured_max_pool2d_with_indices> op(OutputKind::Functional, nullptr, "aten::max_pool2d_with_indices");
  op.meta(self, kernel, stride, padding, dilation, ceil_mode);
  max_pool_kernel(op, self, kernel, stride, padding, dilation, ceil_mode);
  return {std::move(op.outputs_[0]), std::move(op.outputs_[1])};
}

std::tuple<at::Tensor&, at::Tensor&> max_pool2d_with_indices_out(T self, A kernel, A stride, A padding, A dilation,
                                                                 bool ceil_mode, at::Tensor& out,
                                                                 at::Tensor& indices) {
  Structured<structured_max_pool2d_with_indices> op(OutputKind::Out, {out, indices}, "aten::max_pool2d_with_indices");
  op.meta(self, kernel, stride, padding, dilation, ceil_mode);
  max_pool_kernel(op, self, kernel, stride, padding, dilation, ceil_mode);
  return {out, indices};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("max_pool2d_with_indices", max_pool2d_with_indices);
  m.impl("max_pool2d_with_indices.out", max_pool2d_with_indices_out);
  m.impl("max_pool2d_with_indices_backward",
         structured_functional<structured_max_pool2d_with_indices_backward, &max_pool_backward_kernel,
                               "aten::max_pool2d_with_indices_backward", T, T, A, A, A, A, bool, T>);
  m.impl("max_pool2d_with_indices_backward.grad_input",
         structured_out<structured_max_pool2d_with_indices_backward, &max_pool_backward_kernel,
                        "aten::max_pool2d_with_indices_backward", T, T, A, A, A, A, bool, T>);
}

}  // namespace torch_tpu
