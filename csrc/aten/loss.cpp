// nll_loss forward and backward (cross_entropy's last step) as TPU_OP_LOSS
// records, on PyTorch's structured metas: shapes, the reduction, the
// weight's size and every argument check as on CPU. A target out of range
// is an IndexError at the next sync.
#include <ATen/ops/nll_loss_backward_meta.h>
#include <ATen/ops/nll_loss_forward_meta.h>
#include <torch/library.h>

#include "core/glue.h"
#include "core/structured.h"

namespace torch_tpu {
namespace {

// An optional weight as the record's in[2]: absent when not given.
tpu_tensor describe_weight(at::OptionalTensorRef weight, const char* name) {
  if (!weight.has_value() || !weight->defined()) return tpu_tensor{};
  check_in_storage(*weight, name);
  return describe(*weight, name);
}

tpu_loss_reduction to_reduction(int64_t reduction, const char* name) {
  TORCH_CHECK(reduction >= 0 && reduction <= 2, name, ": invalid reduction ", reduction);
  return static_cast<tpu_loss_reduction>(reduction);
}

void forward_kernel(Structured<at::meta::structured_nll_loss_forward>& op, const at::Tensor& self,
                    const at::Tensor& target, at::OptionalTensorRef weight, int64_t reduction, int64_t ignore_index) {
  const char* name = "aten::nll_loss_forward";
  const at::Tensor w = weight.has_value() ? *weight : at::Tensor();
  check_same_device("nll_loss_forward", self.device(), {{"target", &target}, {"weight", &w}});
  check_in_storage(self, name);
  check_in_storage(target, name);
  tpu_op rec{};
  rec.code = TPU_OP_LOSS;
  rec.fn = TPU_LOSS_NLL_FORWARD;
  rec.n_in = 3;
  rec.n_aux = 1;
  rec.out = describe(op.outputs_[0], name);
  rec.aux[0] = describe(op.outputs_[1], name);
  rec.in[0] = describe(self, name);
  rec.in[1] = describe(target, name);
  rec.in[2] = describe_weight(weight, name);
  rec.p.loss.reduction = to_reduction(reduction, name);
  rec.p.loss.ignore_index = ignore_index;
  submit(self.device().index(), rec, name);
}

void backward_kernel(Structured<at::meta::structured_nll_loss_backward>& op, const at::Tensor& grad_output,
                     const at::Tensor& self, const at::Tensor& target, at::OptionalTensorRef weight, int64_t reduction,
                     int64_t ignore_index, const at::Tensor& total_weight) {
  const char* name = "aten::nll_loss_backward";
  const at::Tensor& grad_input = op.output_;
  const at::Tensor w = weight.has_value() ? *weight : at::Tensor();
  check_same_device("nll_loss_backward", self.device(),
                    {{"grad_output", &grad_output}, {"target", &target}, {"weight", &w}, {"total_weight", &total_weight}});
  if (grad_input.numel() == 0) return;
  for (const at::Tensor* t : {&grad_output, &target, &total_weight}) check_in_storage(*t, name);
  tpu_op rec{};
  rec.code = TPU_OP_LOSS;
  rec.fn = TPU_LOSS_NLL_BACKWARD;
  rec.n_in = 4;
  rec.out = describe(grad_input, name);
  rec.in[0] = describe(grad_output, name);
  rec.in[1] = describe(target, name);
  rec.in[2] = describe_weight(weight, name);
  rec.in[3] = describe(total_weight, name);
  rec.p.loss.reduction = to_reduction(reduction, name);
  rec.p.loss.ignore_index = ignore_index;
  submit(self.device().index(), rec, name);
}

using T = const at::Tensor&;
using W = at::OptionalTensorRef;
using at::meta::structured_nll_loss_backward;
using at::meta::structured_nll_loss_forward;

std::tuple<at::Tensor, at::Tensor> nll_loss_forward(T self, T target, const std::optional<at::Tensor>& weight,
                                                    int64_t reduction, int64_t ignore_index) {
  Structured<structured_nll_loss_forward> op(OutputKind::Functional, nullptr, "aten::nll_loss_forward");
  const W w = weight.has_value() && weight->defined() ? W(*weight) : W();
  op.meta(self, target, w, reduction, ignore_index);
  forward_kernel(op, self, target, w, reduction, ignore_index);
  return {std::move(op.outputs_[0]), std::move(op.outputs_[1])};
}

std::tuple<at::Tensor&, at::Tensor&> nll_loss_forward_out(T self, T target, const std::optional<at::Tensor>& weight,
                                                          int64_t reduction, int64_t ignore_index, at::Tensor& output,
                                                          at::Tensor& total_weight) {
  Structured<structured_nll_loss_forward> op(OutputKind::Out, {output, total_weight}, "aten::nll_loss_forward");
  const W w = weight.has_value() && weight->defined() ? W(*weight) : W();
  op.meta(self, target, w, reduction, ignore_index);
  forward_kernel(op, self, target, w, reduction, ignore_index);
  return {output, total_weight};
}

at::Tensor nll_loss_backward(T grad_output, T self, T target, const std::optional<at::Tensor>& weight,
                             int64_t reduction, int64_t ignore_index, T total_weight) {
  Structured<structured_nll_loss_backward> op(OutputKind::Functional, nullptr, "aten::nll_loss_backward");
  const W w = weight.has_value() && weight->defined() ? W(*weight) : W();
  op.meta(grad_output, self, target, w, reduction, ignore_index, total_weight);
  backward_kernel(op, grad_output, self, target, w, reduction, ignore_index, total_weight);
  return std::move(op.output_);
}

at::Tensor& nll_loss_backward_out(T grad_output, T self, T target, const std::optional<at::Tensor>& weight,
                                  int64_t reduction, int64_t ignore_index, T total_weight, at::Tensor& grad_input) {
  Structured<structured_nll_loss_backward> op(OutputKind::Out, &grad_input, "aten::nll_loss_backward");
  const W w = weight.has_value() && weight->defined() ? W(*weight) : W();
  op.meta(grad_output, self, target, w, reduction, ignore_index, total_weight);
  backward_kernel(op, grad_output, self, target, w, reduction, ignore_index, total_weight);
  return grad_input;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("nll_loss_forward", nll_loss_forward);
  m.impl("nll_loss_forward.output", nll_loss_forward_out);
  m.impl("nll_loss_backward", nll_loss_backward);
  m.impl("nll_loss_backward.grad_input", nll_loss_backward_out);
}

}  // namespace torch_tpu
