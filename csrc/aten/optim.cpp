// The fused optimizer steps torch.optim calls with fused=True (Adam and
// AdamW), composed of native element-wise ops per parameter. The formula
// is PyTorch's fused CPU kernel's, computed in float32 for half parameters;
// the step count, learning rate and found_inf stay on the device (no host
// read), as on CUDA. With found_inf set nothing is written, grads included.
#include <torch/library.h>

#include "core/glue.h"

namespace torch_tpu {
namespace {

using L = at::TensorList;
using OptT = const std::optional<at::Tensor>&;

at::ScalarType compute_type(const at::Tensor& t) {
  return at::isReducedFloatingType(t.scalar_type()) ? at::kFloat : t.scalar_type();
}

// value, or (found_inf != 0) ? old : value.
at::Tensor unless_inf(const at::Tensor& found, const at::Tensor& old, const at::Tensor& value) {
  return found.defined() ? at::where(found, old, value) : value;
}

template <bool AdamW>
void fused_adam(L params, L grads, L exp_avgs, L exp_avg_sqs, L max_exp_avg_sqs, L steps, const at::Tensor& lr_in,
                double beta1, double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                OptT grad_scale, OptT found_inf) {
  const char* name = AdamW ? "_fused_adamw_" : "_fused_adam_";
  const size_t n = params.size();
  TORCH_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && steps.size() == n &&
                  (!amsgrad || max_exp_avg_sqs.size() == n),
              name, ": expected ", n, " tensors in every list");
  if (n == 0) return;
  const at::Device dev = params[0].device();
  const at::Tensor lr = lr_in.to(dev, at::kDouble);
  const at::Tensor found = found_inf.has_value() ? found_inf->to(dev) != 0 : at::Tensor();
  const at::Tensor scale = grad_scale.has_value() ? grad_scale->to(dev) : at::Tensor();
  for (size_t i = 0; i < n; i++) {
    const at::Tensor &p = params[i], &g = grads[i], &m = exp_avgs[i], &v = exp_avg_sqs[i];
    TORCH_CHECK(g.sizes() == p.sizes() && m.sizes() == p.sizes() && v.sizes() == p.sizes(), name,
                ": a parameter and its grad and state must have the same sizes");
    check_same_device(name, dev,
                      {{"param", &p}, {"grad", &g}, {"exp_avg", &m}, {"exp_avg_sq", &v}, {"state_step", &steps[i]}});
    const at::ScalarType ct = compute_type(p);
    const at::Tensor p0 = p.to(ct), m0 = m.to(ct), v0 = v.to(ct);
    at::Tensor grad = g.to(ct);
    if (scale.defined()) {
      grad = grad / scale;
      g.copy_(unless_inf(found, g, grad));  // the unscaled gradient is written back, as PyTorch's kernels do
    }
    if (maximize) grad = -grad;
    at::Tensor pn = p0;
    if (weight_decay != 0) {
      if (AdamW)
        pn = p0 * (1 - lr * weight_decay);  // as a product: an infinite parameter stays infinite
      else
        grad = grad + p0 * weight_decay;
    }
    const at::Tensor mn = m0.lerp(grad, 1 - beta1);
    const at::Tensor vn = v0 * beta2 + grad * grad * (1 - beta2);
    const at::Tensor step = steps[i].to(dev, at::kDouble);
    const at::Tensor bias_correction1 = 1 - at::pow(beta1, step);
    const at::Tensor bias_correction2_sqrt = (1 - at::pow(beta2, step)).sqrt();
    at::Tensor second = vn;
    if (amsgrad) {
      const at::Tensor& mx = max_exp_avg_sqs[i];
      second = at::maximum(mx.to(ct), vn);
      mx.copy_(unless_inf(found, mx, second));
    }
    const at::Tensor denom = second.sqrt() / bias_correction2_sqrt + eps;
    pn = pn - (lr / bias_correction1) * mn / denom;
    p.copy_(unless_inf(found, p, pn));
    m.copy_(unless_inf(found, m, mn));
    v.copy_(unless_inf(found, v, vn));
  }
}

template <bool AdamW>
void fused_adam_lr(L params, L grads, L exp_avgs, L exp_avg_sqs, L max_exp_avg_sqs, L steps, double lr, double beta1,
                   double beta2, double weight_decay, double eps, bool amsgrad, bool maximize, OptT grad_scale,
                   OptT found_inf) {
  const at::Tensor lr_t = at::scalar_tensor(lr, at::TensorOptions().dtype(at::kDouble));
  fused_adam<AdamW>(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr_t, beta1, beta2, weight_decay,
                    eps, amsgrad, maximize, grad_scale, found_inf);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_adamw_", fused_adam_lr<true>);
  m.impl("_fused_adamw_.tensor_lr", fused_adam<true>);
  m.impl("_fused_adam_", fused_adam_lr<false>);
  m.impl("_fused_adam_.tensor_lr", fused_adam<false>);
}

}  // namespace torch_tpu
