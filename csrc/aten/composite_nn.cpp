// Neural-network functions composed of native ops, each written as
// PyTorch's CPU kernel computes it: glu, prelu and the Huber loss, with
// their backwards.
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Reduction.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "core/glue.h"

namespace torch_tpu {
namespace {

using T = const at::Tensor&;

// The dtypes PyTorch's CPU kernels take: floating point only.
void check_float(const char* kernel, T t) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(t.scalar_type()), "\"", kernel, "\" not implemented for '",
                              t.scalar_type(), "'");
}

// ---- glu: a * sigmoid(b), a and b the halves of dim.

std::pair<at::Tensor, at::Tensor> glu_halves(T self, int64_t dim) {
  check_float("glu_cpu", self);
  TORCH_CHECK(self.dim() > 0, "glu does not support scalars because halving size must be even");
  dim = at::maybe_wrap_dim(dim, self.dim());
  const int64_t n = self.size(dim);
  TORCH_CHECK(n % 2 == 0, "Halving dimension must be even, but dimension ", dim, " is size ", n);
  return {self.narrow(dim, 0, n / 2), self.narrow(dim, n / 2, n / 2)};
}

at::Tensor glu_fwd(T self, int64_t dim) {
  auto [a, b] = glu_halves(self, dim);
  return a * b.sigmoid();
}

at::Tensor& glu_fwd_out(T self, int64_t dim, at::Tensor& out) {
  const at::Tensor r = glu_fwd(self, dim);
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}

// d/da = sigmoid(b), d/db = a sigmoid(b) (1 - sigmoid(b)).
at::Tensor glu_bwd(T grad, T self, int64_t dim) {
  auto [a, b] = glu_halves(self, dim);
  const at::Tensor s = b.sigmoid();
  const at::Tensor ga = grad * s;
  return at::cat({ga, ga * a * (1 - s)}, at::maybe_wrap_dim(dim, self.dim()));
}

at::Tensor& glu_bwd_out(T grad, T self, int64_t dim, at::Tensor& grad_input) {
  const at::Tensor r = glu_bwd(grad, self, dim);
  at::native::resize_output(grad_input, r.sizes());
  return grad_input.copy_(r);
}

// ---- prelu (the weight already broadcast by the caller's view).

at::Tensor prelu_kernel(T self, T weight) {
  check_float("prelu_cpu", self);
  return at::where(self > 0, self, weight * self);
}

// Both gradients have the broadcast shape; autograd sums the weight's.
std::tuple<at::Tensor, at::Tensor> prelu_kernel_backward(T grad, T self, T weight) {
  const at::Tensor pos = self > 0;
  return {at::where(pos, grad, weight * grad), at::where(pos, at::zeros_like(self), self * grad)};
}

// ---- Huber loss: 0.5 z^2 below delta, delta (z - delta / 2) above.

at::Tensor huber_fwd(T self, T target, int64_t reduction, double delta) {
  TORCH_CHECK(delta > 0, "huber_loss does not support non-positive values for delta.");
  check_float("huber_cpu", self);
  const at::Tensor z = (self - target).abs();
  const at::Tensor l = at::where(z < delta, 0.5 * z * z, delta * (z - 0.5 * delta));
  if (reduction == at::Reduction::Mean) return l.mean();
  if (reduction == at::Reduction::Sum) return l.sum();
  return l;
}

at::Tensor& huber_fwd_out(T self, T target, int64_t reduction, double delta, at::Tensor& out) {
  const at::Tensor r = huber_fwd(self, target, reduction, delta);
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}

// d/dx: x clamped to [-delta, delta], x = self - target, times the
// gradient (over N for a mean).
at::Tensor huber_bwd(T grad, T self, T target, int64_t reduction, double delta) {
  const at::Tensor x = self - target;
  const at::Tensor g =
      reduction == at::Reduction::Mean ? grad / static_cast<double>(std::max<int64_t>(self.numel(), 1)) : grad;
  return at::where(x < -delta, -delta * g, at::where(x > delta, delta * g, x * g));
}

at::Tensor& huber_bwd_out(T grad, T self, T target, int64_t reduction, double delta,
                                    at::Tensor& grad_input) {
  const at::Tensor r = huber_bwd(grad, self, target, reduction, delta);
  at::native::resize_output(grad_input, r.sizes());
  return grad_input.copy_(r);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("glu", glu_fwd);
  m.impl("glu.out", glu_fwd_out);
  m.impl("glu_backward", glu_bwd);
  m.impl("glu_backward.grad_input", glu_bwd_out);
  m.impl("_prelu_kernel", prelu_kernel);
  m.impl("_prelu_kernel_backward", prelu_kernel_backward);
  m.impl("huber_loss", huber_fwd);
  m.impl("huber_loss.out", huber_fwd_out);
  m.impl("huber_loss_backward", huber_bwd);
  m.impl("huber_loss_backward.out", huber_bwd_out);
}

}  // namespace torch_tpu
