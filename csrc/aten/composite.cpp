// Ops composed of native ones in the glue: each is a few calls to ops that
// have kernels, written the way PyTorch's CPU kernel computes it, so that
// nothing reaches the CPU fallback. A composed op that turns out hot gets a
// record of its own later.
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ScalarOps.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/addbmm_ops.h>
#include <ATen/ops/baddbmm_ops.h>
#include <ATen/core/Reduction.h>
#include <torch/library.h>

#include <cmath>

#include "core/fallback.h"
#include "core/glue.h"
#include "core/sync_debug.h"

namespace torch_tpu {
namespace {

using T = const at::Tensor&;
using S = const c10::Scalar&;

// out= of a composed op: resized as PyTorch resizes out=, then filled.
at::Tensor& assign_out(at::Tensor& out, const at::Tensor& result) {
  at::native::resize_output(out, result.sizes());
  out.copy_(result);
  return out;
}

// ---- element-wise compositions.

at::Tensor rsub(T self, T other, S alpha) { return at::sub(other, self, alpha); }

at::Tensor rsub_scalar(T self, S other, S alpha) {
  return at::sub(at::native::wrapped_scalar_tensor(other), self, alpha);
}

// logaddexp(a, b) = max + log1p(exp(-|a - b|)), and a itself where a == b
// is infinite (inf - inf is NaN); PyTorch's formula.
template <bool Base2>
at::Tensor& logaddexp_out(T self, T other, at::Tensor& out) {
  const at::ScalarType type = at::result_type(self, other);
  TORCH_CHECK(at::isFloatingType(type), Base2 ? "logaddexp2" : "logaddexp", " expects floating inputs, got ", type);
  const at::Tensor a = self.to(type), b = other.to(type);
  const at::Tensor m = at::maximum(a, b), d = (a - b).abs().neg();
  at::Tensor r = Base2 ? m + d.exp2().log1p().mul(1.0 / std::log(2.0)) : m + d.exp().log1p();
  r = at::where(a.eq(b).logical_and(a.isinf()), a, r);
  return assign_out(out, r);
}

template <bool Base2>
at::Tensor logaddexp(T self, T other) {
  at::Tensor out = at::empty({0}, self.options().dtype(at::result_type(self, other)));
  return logaddexp_out<Base2>(self, other, out);
}

// round(x, decimals) as PyTorch's CPU kernel: nearbyint(x * 10^d) / 10^d,
// or nearbyint(x / 10^-d) * 10^-d for negative d, in x's precision.
at::Tensor& round_decimals_out(T self, int64_t decimals, at::Tensor& out) {
  at::Tensor r;
  if (decimals == 0) {
    r = self.round();
  } else {
    TORCH_CHECK(at::isFloatingType(self.scalar_type()), "round_cpu not implemented for '", self.scalar_type(),
                "' with decimals");
    const double ten_pow = std::pow(10.0, static_cast<double>(std::abs(decimals)));
    // 10^|d| rounded to x's dtype, as a host scalar operand.
    const at::Tensor p = at::scalar_tensor(ten_pow, at::TensorOptions().dtype(self.scalar_type()));
    r = decimals > 0 ? self.mul(p).round().div(p) : self.div(p).round().mul(p);
  }
  return assign_out(out, r);
}

at::Tensor round_decimals(T self, int64_t decimals) {
  at::Tensor out = at::empty({0}, self.options());
  return round_decimals_out(self, decimals, out);
}

at::Tensor& round_decimals_(at::Tensor& self, int64_t decimals) { return round_decimals_out(self, decimals, self); }

// log_sigmoid = min(x, 0) - log1p(exp(-|x|)); its backward needs only x
// (the buffer is empty, as CUDA's).
std::tuple<at::Tensor, at::Tensor> log_sigmoid_forward(T self) {
  const at::Tensor out = at::clamp_max(self, 0) - self.abs().neg().exp().log1p();
  return {out, at::empty({0}, self.options())};
}

at::Tensor log_sigmoid_backward(T grad, T self, T) { return grad * self.neg().sigmoid(); }

// nansum: NaN counts as 0.
at::Tensor nansum(T self, at::OptionalIntArrayRef dim, bool keepdim, std::optional<at::ScalarType> dtype) {
  const at::Tensor x = at::isFloatingType(self.scalar_type()) ? at::where(self.isnan(), 0, self) : self;
  return x.sum(dim, keepdim, dtype);
}

// clamp with tensor bounds: maximum, then minimum (both propagate NaN from
// either side, as PyTorch's clamp kernel does).
at::Tensor& clamp_tensor_out(T self, const std::optional<at::Tensor>& min, const std::optional<at::Tensor>& max,
                             at::Tensor& out) {
  const bool has_min = min.has_value() && min->defined(), has_max = max.has_value() && max->defined();
  TORCH_CHECK(has_min || has_max, "torch.clamp: At least one of 'min' or 'max' must not be None");
  at::Tensor r = self;
  if (has_min) r = at::maximum(r, *min);
  if (has_max) r = at::minimum(r, *max);
  return assign_out(out, r);
}

at::Tensor clamp_tensor(T self, const std::optional<at::Tensor>& min, const std::optional<at::Tensor>& max) {
  at::ScalarType type = self.scalar_type();
  if (min.has_value() && min->defined()) type = at::promote_types(type, at::result_type(self, *min));
  if (max.has_value() && max->defined()) type = at::promote_types(type, at::result_type(self, *max));
  at::Tensor out = at::empty({0}, self.options().dtype(type));
  return clamp_tensor_out(self, min, max, out);
}

at::Tensor& clamp_tensor_(at::Tensor& self, const std::optional<at::Tensor>& min,
                          const std::optional<at::Tensor>& max) {
  return clamp_tensor_out(self, min, max, self);
}

// scalar ** tensor: the scalar as a host operand of the native pow.
at::Tensor pow_scalar(S base, T exponent) { return at::pow(at::native::wrapped_scalar_tensor(base), exponent); }

at::Tensor& pow_scalar_out(S base, T exponent, at::Tensor& out) {
  const at::Tensor r = pow_scalar(base, exponent);
  return assign_out(out, r);
}

// norm (the legacy name): linalg_vector_norm, p defaulting to 2.
at::Tensor norm_dims(T self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                     std::optional<at::ScalarType> dtype) {
  return at::linalg_vector_norm(self, p.value_or(2), dim, keepdim, dtype);
}

at::Tensor& norm_out(T self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                     at::Tensor& out) {
  const at::Tensor r = norm_dims(self, p, dim, keepdim, std::nullopt);
  return assign_out(out, r);
}

at::Tensor& norm_dtype_out(T self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                           at::ScalarType dtype, at::Tensor& out) {
  const at::Tensor r = norm_dims(self, p, dim, keepdim, dtype);
  return assign_out(out, r);
}

// baddbmm / addbmm on bmm: beta * self + alpha * (the batched products, or
// their sum over the batch), in f32 for f16/bf16 and rounded once, as
// PyTorch's CPU kernel; beta == 0 ignores self, NaN included. Integer
// batches take the CPU kernel (its integer alpha and beta), as mm's.
at::Tensor bmm_combine(T self, const at::Tensor& prod, at::ScalarType out_type, S beta, S alpha) {
  at::Tensor r = alpha.toComplexDouble() != 1.0 ? prod.mul(alpha) : prod;
  if (beta.toComplexDouble() != 0.0) r = r.add(self.to(r.scalar_type()).mul(beta));
  return r.to(out_type);
}

at::ScalarType compute_type(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 ? at::kFloat : t;
}

at::Tensor baddbmm_impl(T self, T b1, T b2, S beta, S alpha) {
  if (!at::isFloatingType(b1.scalar_type()))
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::baddbmm>::call(self, b1, b2, beta, alpha);
  const at::ScalarType ct = compute_type(b1.scalar_type());
  const at::Tensor prod = at::bmm(b1.to(ct), b2.to(ct));
  return bmm_combine(self, prod, b1.scalar_type(), beta, alpha).expand(prod.sizes()).contiguous();
}

at::Tensor& baddbmm_out(T self, T b1, T b2, S beta, S alpha, at::Tensor& out) {
  const at::Tensor r = baddbmm_impl(self, b1, b2, beta, alpha);
  return assign_out(out, r);
}

at::Tensor addbmm_impl(T self, T b1, T b2, S beta, S alpha) {
  if (!at::isFloatingType(b1.scalar_type()))
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::addbmm>::call(self, b1, b2, beta, alpha);
  const at::ScalarType ct = compute_type(b1.scalar_type());
  const at::Tensor prod = at::bmm(b1.to(ct), b2.to(ct)).sum(0);
  return bmm_combine(self, prod, b1.scalar_type(), beta, alpha).expand(prod.sizes()).contiguous();
}

at::Tensor& addbmm_out(T self, T b1, T b2, S beta, S alpha, at::Tensor& out) {
  const at::Tensor r = addbmm_impl(self, b1, b2, beta, alpha);
  return assign_out(out, r);
}

// The other distributions, from the chip's uniform draws (inverse CDFs)
// or its normal ones: same seed, same numbers, like every tpu random op.
at::Tensor& exponential_(at::Tensor& self, double lambd, std::optional<at::Generator> gen) {
  TORCH_CHECK(lambd > 0.0, "exponential_ expects lambda > 0.0, but found lambda=", lambd);
  self.uniform_(0.0, 1.0, gen);
  return self.copy_(self.neg().log1p().div(-lambd));  // -log(1 - u) / lambda
}

at::Tensor& cauchy_(at::Tensor& self, double median, double sigma, std::optional<at::Generator> gen) {
  TORCH_CHECK(sigma > 0.0, "cauchy_ expects sigma > 0.0, but found sigma=", sigma);
  self.uniform_(0.0, 1.0, gen);
  return self.copy_(self.sub(0.5).mul(M_PI).tan().mul(sigma).add(median));
}

at::Tensor& log_normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  TORCH_CHECK(std > 0.0, "log_normal_ expects std > 0.0, but found std=", std);
  self.normal_(mean, std, gen);
  return self.exp_();
}

at::Tensor& geometric_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  TORCH_CHECK(0 < p && p < 1, "geometric_ expects p to be in (0, 1), but got p=", p);
  at::Tensor u = at::empty(self.sizes(), self.options().dtype(at::kDouble));
  u.uniform_(0.0, 1.0, gen);
  return self.copy_(u.neg().log1p().div(std::log1p(-p)).ceil().clamp_min(1));  // ceil(log(1-u) / log(1-p))
}

// linalg.cross along dim: (a1 b2 - a2 b1, a2 b0 - a0 b2, a0 b1 - a1 b0).
at::Tensor linalg_cross_impl(T self, T other, int64_t dim) {
  TORCH_CHECK(self.dim() == other.dim(), "linalg.cross: inputs must have the same number of dimensions.");
  const auto [a, b] = at::expand_outplace(self, other);
  const int64_t d = at::maybe_wrap_dim(dim, a->dim());
  TORCH_CHECK(a->size(d) == 3, "linalg.cross: inputs dimension ", dim, " must have length 3. Got ", a->size(d),
              " and ", b->size(d));
  const auto at = [&](const at::Tensor& t, int64_t i) { return t.narrow(d, i, 1); };
  return at::cat({at(*a, 1) * at(*b, 2) - at(*a, 2) * at(*b, 1), at(*a, 2) * at(*b, 0) - at(*a, 0) * at(*b, 2),
                  at(*a, 0) * at(*b, 1) - at(*a, 1) * at(*b, 0)}, d);
}

at::Tensor& linalg_cross_out(T self, T other, int64_t dim, at::Tensor& out) {
  const at::Tensor r = linalg_cross_impl(self, other, dim);
  return assign_out(out, r);
}

// ---- small reductions.

at::Tensor trace(T self) {
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kBool, "\"trace\" not implemented for 'Bool'");
  return self.diagonal().sum();
}

at::Tensor count_nonzero(T self, at::IntArrayRef dims) { return (self != 0).sum(dims); }

// aminmax: PyTorch's meta checks the dim and empty reductions; the two
// results are amin and amax.
std::tuple<at::Tensor, at::Tensor> aminmax_impl(T self, std::optional<int64_t> dim, bool keepdim) {
  if (dim.has_value()) {
    const int64_t d = at::maybe_wrap_dim(*dim, self.dim());
    TORCH_CHECK(self.dim() == 0 || self.size(d) != 0, "aminmax(): Expected reduction dim ", d,
                " to have non-zero size.");
    return {self.amin(d, keepdim), self.amax(d, keepdim)};
  }
  TORCH_CHECK(self.numel() > 0, "aminmax(): cannot compute aminmax over an empty dimension as the operation has ",
              "no identity.");
  at::Tensor mn = self.amin(), mx = self.amax();
  if (keepdim) {
    const std::vector<int64_t> ones(self.dim(), 1);
    mn = mn.reshape(ones);
    mx = mx.reshape(ones);
  }
  return {mn, mx};
}

std::tuple<at::Tensor&, at::Tensor&> aminmax_out(T self, std::optional<int64_t> dim, bool keepdim, at::Tensor& min,
                                                 at::Tensor& max) {
  auto [mn, mx] = aminmax_impl(self, dim, keepdim);
  assign_out(min, mn);
  assign_out(max, mx);
  return {min, max};
}

// angle of a real tensor: pi below 0, else 0, NaN kept (integers give the
// default float dtype).
at::Tensor angle_impl(T self) {
  const at::Tensor x = at::isIntegralType(self.scalar_type(), /*includeBool=*/true)
                           ? self.to(c10::typeMetaToScalarType(c10::get_default_dtype()))
                           : self;
  TORCH_CHECK(!x.is_complex(), "angle: complex tensors are not supported on tpu");
  const at::Tensor pi = at::scalar_tensor(M_PI, x.options()), zero = at::scalar_tensor(0.0, x.options());
  return at::where(x.isnan(), x, at::where(x < 0, pi, zero));
}

at::Tensor& angle_out(T self, at::Tensor& out) { return assign_out(out, angle_impl(self)); }

// mvlgamma's out= form (the functional one is PyTorch's composite of lgamma).
at::Tensor& mvlgamma_out(T self, int64_t p, at::Tensor& out) { return assign_out(out, at::mvlgamma(self, p)); }

// ---- losses of element-wise differences (PyTorch's Reduction: 0 none,
// 1 mean, 2 sum), with their backwards.

at::Tensor reduce_loss(const at::Tensor& l, int64_t reduction) {
  if (reduction == at::Reduction::Mean) return l.mean();
  if (reduction == at::Reduction::Sum) return l.sum();
  return l;
}

// d(loss)/d(element): the incoming gradient, divided by N for a mean.
at::Tensor loss_grad_scale(T grad, T self, int64_t reduction) {
  return reduction == at::Reduction::Mean ? grad / static_cast<double>(std::max<int64_t>(self.numel(), 1)) : grad;
}

at::Tensor mse_loss_impl(T self, T target, int64_t reduction) {
  const at::Tensor d = self - target;
  return reduce_loss(d * d, reduction);
}

at::Tensor mse_loss_backward_impl(T grad, T self, T target, int64_t reduction) {
  return loss_grad_scale(grad, self, reduction) * 2 * (self - target);
}

// smooth L1: 0.5 d^2 / beta below beta, |d| - 0.5 beta above (L1 at beta 0).
at::Tensor smooth_l1_loss_impl(T self, T target, int64_t reduction, double beta) {
  TORCH_CHECK(beta >= 0, "smooth_l1_loss does not support negative values for beta.");
  const at::Tensor d = (self - target).abs();
  const at::Tensor l = beta == 0 ? d : at::where(d < beta, d * d * (0.5 / beta), d - 0.5 * beta);
  return reduce_loss(l, reduction);
}

at::Tensor smooth_l1_loss_backward_impl(T grad, T self, T target, int64_t reduction, double beta) {
  const at::Tensor x = self - target;
  const at::Tensor slope = beta == 0 ? x.sign() : at::where(x.abs() < beta, x / beta, x.sign());
  return loss_grad_scale(grad, self, reduction) * slope;
}

// binary cross entropy with PyTorch's log clamp at -100.
at::Tensor binary_cross_entropy_impl(T self, T target, const std::optional<at::Tensor>& weight, int64_t reduction) {
  TORCH_CHECK(self.sizes() == target.sizes(), "Using a target size (", target.sizes(), ") that is different to the "
              "input size (", self.sizes(), ") is deprecated. Please ensure they have the same size.");
  const SyncSite site("binary_cross_entropy: checks on the host that its input lies in [0, 1]");
  TORCH_CHECK(self.numel() == 0 || !self.lt(0).logical_or(self.gt(1)).any().item<bool>(),
              "all elements of input should be between 0 and 1");
  at::Tensor l = (target * self.log().clamp_min(-100) + (1 - target) * (1 - self).log().clamp_min(-100)).neg();
  if (weight.has_value() && weight->defined()) l = l * *weight;
  return reduce_loss(l, reduction);
}

at::Tensor binary_cross_entropy_backward_impl(T grad, T self, T target, const std::optional<at::Tensor>& weight,
                                         int64_t reduction) {
  at::Tensor g = loss_grad_scale(grad, self, reduction) * (self - target) / ((1 - self) * self).clamp_min(1e-12);
  if (weight.has_value() && weight->defined()) g = g * *weight;
  return g;
}

// ---- GradScaler's ops, without a host sync: found_inf becomes 1 if any
// gradient holds a non-finite value, and every gradient is multiplied by
// inv_scale; the scale update is a few where()s on the device.
void amp_unscale_(at::TensorList grads, at::Tensor& found_inf, T inv_scale) {
  for (const at::Tensor& g : grads) {
    const at::Tensor bad = g.isfinite().logical_not().any().to(found_inf.scalar_type());
    found_inf.copy_(at::maximum(found_inf, bad.reshape(found_inf.sizes())));
    at::Tensor(g).mul_(inv_scale);
  }
}

at::Tensor& amp_update_scale_(at::Tensor& scale, at::Tensor& growth_tracker, T found_inf, double growth,
                              double backoff, int64_t interval) {
  const at::Tensor found = found_inf.gt(0);
  const at::Tensor successes = growth_tracker + 1;
  const at::Tensor grow = found.logical_not().logical_and(successes.eq(interval));
  const at::Tensor grown = scale * growth;
  const at::Tensor new_scale =
      at::where(found, scale * backoff, at::where(grow.logical_and(grown.isfinite()), grown, scale));
  const at::Tensor new_tracker = at::where(found.logical_or(grow), at::zeros_like(successes), successes);
  scale.copy_(new_scale);
  growth_tracker.copy_(new_tracker);
  return scale;
}

// ---- shape compositions.

// roll: each dim as two copies (the tail, then the head).
at::Tensor roll_impl(T self, at::IntArrayRef shifts, at::IntArrayRef dims) {
  if (dims.empty()) {
    TORCH_CHECK(shifts.size() == 1, "roll: shifts and dims must align. shifts: ", shifts.size(), ", dims:",
                dims.size());
    return roll_impl(self.flatten(), shifts, at::IntArrayRef{0}).view(self.sizes());
  }
  TORCH_CHECK(shifts.size() == dims.size(), "shifts and dimensions must align. shifts: ", shifts.size(),
              ", dims:", dims.size());
  at::Tensor out = self;
  for (size_t i = 0; i < dims.size(); i++) {
    const int64_t d = at::maybe_wrap_dim(dims[i], self.dim());
    const int64_t size = out.size(d);
    if (size == 0) continue;
    const int64_t s = ((shifts[i] % size) + size) % size;
    if (s == 0) continue;
    out = at::cat({out.narrow(d, size - s, s), out.narrow(d, 0, size - s)}, d);
  }
  return out.is_same(self) ? self.clone() : out;
}

bool equal(T self, T other) {
  TORCH_CHECK(self.device() == other.device(), "Cannot compare two tensors on different devices. Got: ",
              self.device(), " and ", other.device());
  if (self.sizes() != other.sizes()) return false;
  if (self.numel() == 0) return true;
  const SyncSite site("torch.equal: its result is a host bool");
  return self.eq(other).all().item<bool>();
}

at::Tensor& eye_m_out(int64_t n, int64_t m, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  at::native::resize_output(out, {n, m});
  out.zero_();
  if (n > 0 && m > 0) out.diagonal().fill_(1);
  return out;
}

at::Tensor& eye_out(int64_t n, at::Tensor& out) { return eye_m_out(n, n, out); }

// linspace as PyTorch computes it: start + step * i for the first half,
// end - step * (steps - 1 - i) for the rest (so both ends are exact).
at::Tensor& linspace_out(S start, S end, int64_t steps, at::Tensor& out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  at::native::resize_output(out, {steps});
  if (steps == 0) return out;
  if (steps == 1) return out.fill_(start);
  const at::ScalarType type = out.scalar_type();
  const bool fp = at::isFloatingType(type);
  const at::ScalarType compute = fp ? type : at::kDouble;
  const double a = start.toDouble(), b = end.toDouble(), step = (b - a) / static_cast<double>(steps - 1);
  const at::Tensor idx = at::arange(steps, out.options().dtype(compute));
  const int64_t halfway = steps / 2;
  const at::Tensor head = idx.mul(step).add(a), tail = idx.sub(steps - 1).mul(step).add(b);
  const at::Tensor r = at::where(idx.lt(halfway), head, tail);
  out.copy_(fp ? r : r.trunc());
  return out;
}

at::Tensor& logspace_out(S start, S end, int64_t steps, double base, at::Tensor& out) {
  at::Tensor exponents = at::empty({0}, out.options().dtype(at::isFloatingType(out.scalar_type())
                                                                ? out.scalar_type() : at::kDouble));
  linspace_out(start, end, steps, exponents);
  at::native::resize_output(out, exponents.sizes());
  out.copy_(at::pow(base, exponents));
  return out;
}

at::Tensor masked_select(T self, T mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  const auto [s, m] = at::expand_outplace(self, mask);
  const SyncSite site("torch.masked_select: its output size needs the mask's data");
  return s->index({*m});
}

// ---- spatial versions of 1-d ops.

// nll_loss2d: the [N, C, H, W] scores as [N*H*W, C] rows for nll_loss.
at::Tensor scores_as_rows(T self) { return self.permute({0, 2, 3, 1}).reshape({-1, self.size(1)}); }

void check_nll2d(T self, T target) {
  TORCH_CHECK(target.dim() == 3, "only batches of spatial targets supported (3D tensors) but got targets of "
              "dimension: ", target.dim());
  TORCH_CHECK(self.dim() == 4, "only batches of spatial inputs supported (4D tensors), but got input of dimension: ",
              self.dim());
  TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) && self.size(3) == target.size(2),
              "input and target batch or spatial sizes don't match: target ", target.sizes(), ", input ",
              self.sizes());
}

std::tuple<at::Tensor, at::Tensor> nll_loss2d_forward(T self, T target, const std::optional<at::Tensor>& weight,
                                                      int64_t reduction, int64_t ignore_index) {
  check_nll2d(self, target);
  auto [out, total] = at::nll_loss_forward(scores_as_rows(self), target.reshape({-1}), weight, reduction,
                                           ignore_index);
  if (reduction == at::Reduction::None) out = out.view(target.sizes());
  return {out, total};
}

at::Tensor nll_loss2d_backward(T grad, T self, T target, const std::optional<at::Tensor>& weight, int64_t reduction,
                               int64_t ignore_index, T total_weight) {
  check_nll2d(self, target);
  const at::Tensor g = reduction == at::Reduction::None ? grad.reshape({-1}) : grad;
  const at::Tensor rows = at::nll_loss_backward(g, scores_as_rows(self), target.reshape({-1}), weight, reduction,
                                                ignore_index, total_weight);
  return rows.view({self.size(0), self.size(2), self.size(3), self.size(1)}).permute({0, 3, 1, 2}).contiguous();
}

// max_unpool: each value scattered to its flat position in an (n, c)
// plane of the output (zeros elsewhere).
at::Tensor max_unpool(T self, T indices, at::IntArrayRef output_size, int64_t spatial) {
  TORCH_CHECK(indices.scalar_type() == at::kLong, "elements in indices should be type int64 but got: ",
              indices.scalar_type());
  TORCH_CHECK(self.sizes() == indices.sizes(), "Expected shape of indices to be same as that of the input tensor (",
              self.sizes(), ") but got indices tensor with shape: ", indices.sizes());
  TORCH_CHECK(self.dim() == spatial + 1 || self.dim() == spatial + 2, "max_unpool: expected a ", spatial + 1,
              "-d or ", spatial + 2, "-d input, got ", self.dim(), "-d");
  const bool batched = self.dim() == spatial + 2;
  const at::Tensor x = batched ? self : self.unsqueeze(0), ix = batched ? indices : indices.unsqueeze(0);
  int64_t plane = 1;
  for (int64_t s : output_size) plane *= s;
  at::Tensor out = at::zeros({x.size(0), x.size(1), plane}, self.options());
  if (x.numel() > 0) out.scatter_(2, ix.reshape({x.size(0), x.size(1), -1}), x.reshape({x.size(0), x.size(1), -1}));
  std::vector<int64_t> shape{x.size(0), x.size(1)};
  shape.insert(shape.end(), output_size.begin(), output_size.end());
  out = out.view(shape);
  return batched ? out : out.squeeze(0);
}

at::Tensor max_unpool2d(T self, T indices, at::IntArrayRef output_size) {
  TORCH_CHECK(output_size.size() == 2, "There should be exactly two elements (height, width) in output_size");
  return max_unpool(self, indices, output_size, 2);
}

at::Tensor max_unpool3d(T self, T indices, at::IntArrayRef output_size, at::IntArrayRef, at::IntArrayRef) {
  TORCH_CHECK(output_size.size() == 3, "There should be exactly three elements (depth, height, width) in output_size");
  return max_unpool(self, indices, output_size, 3);
}

// adaptive average pooling: bin i of a dim of size n covers
// [floor(i n / k), ceil((i + 1) n / k)), as PyTorch's.
std::pair<int64_t, int64_t> bin(int64_t i, int64_t n, int64_t k) { return {(i * n) / k, ((i + 1) * n + k - 1) / k}; }

at::Tensor adaptive_avg_pool2d(T self, at::IntArrayRef output_size) {
  TORCH_CHECK(output_size.size() == 2, "adaptive_avg_pool2d: output_size must be 2");
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4, "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got ",
              self.sizes());
  for (int64_t d = self.dim() - 2; d < self.dim(); d++)
    TORCH_CHECK(self.size(d) > 0, "adaptive_avg_pool2d(): Expected input to have non-zero size for non-batch "
                "dimensions, but input has sizes ", self.sizes(), " with dimension ", d, " being empty");
  const int64_t kh = output_size[0], kw = output_size[1], h = self.size(-2), w = self.size(-1);
  if (kh == 0 || kw == 0 || self.numel() == 0) {
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end() - 2);
    shape.push_back(kh);
    shape.push_back(kw);
    return at::empty(shape, self.options());
  }
  std::vector<at::Tensor> rows;
  for (int64_t i = 0; i < kh; i++) {
    const auto [h0, h1] = bin(i, h, kh);
    rows.push_back(self.narrow(-2, h0, h1 - h0).mean(-2, /*keepdim=*/true));
  }
  const at::Tensor by_rows = at::cat(rows, -2);
  std::vector<at::Tensor> cols;
  for (int64_t j = 0; j < kw; j++) {
    const auto [w0, w1] = bin(j, w, kw);
    cols.push_back(by_rows.narrow(-1, w0, w1 - w0).mean(-1, /*keepdim=*/true));
  }
  return at::cat(cols, -1);
}

at::Tensor adaptive_avg_pool2d_backward(T grad, T self) {
  const int64_t kh = grad.size(-2), kw = grad.size(-1), h = self.size(-2), w = self.size(-1);
  at::Tensor out = at::zeros(self.sizes(), self.options());
  for (int64_t i = 0; i < kh; i++) {
    const auto [h0, h1] = bin(i, h, kh);
    for (int64_t j = 0; j < kw; j++) {
      const auto [w0, w1] = bin(j, w, kw);
      at::Tensor region = out.narrow(-2, h0, h1 - h0).narrow(-1, w0, w1 - w0);
      region.add_(grad.narrow(-2, i, 1).narrow(-1, j, 1), 1.0 / static_cast<double>((h1 - h0) * (w1 - w0)));
    }
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("norm.ScalarOpt_dim", [](T self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim, bool keepdim) {
    return norm_dims(self, p, dim, keepdim, std::nullopt);
  });
  m.impl("norm.ScalarOpt_dim_dtype", [](T self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim,
                                        bool keepdim, at::ScalarType dtype) {
    return norm_dims(self, p, dim, keepdim, dtype);
  });
  m.impl("norm.Scalar", [](T self, S p) { return at::linalg_vector_norm(self, p); });
  m.impl("norm.out", norm_out);
  m.impl("norm.dtype_out", norm_dtype_out);
  m.impl("baddbmm", baddbmm_impl);
  m.impl("baddbmm.out", baddbmm_out);
  m.impl("addbmm", addbmm_impl);
  m.impl("addbmm.out", addbmm_out);
  m.impl("exponential_", exponential_);
  m.impl("cauchy_", cauchy_);
  m.impl("log_normal_", log_normal_);
  m.impl("geometric_", geometric_);
  m.impl("linalg_cross", linalg_cross_impl);
  m.impl("linalg_cross.out", linalg_cross_out);
  m.impl("mse_loss", mse_loss_impl);
  m.impl("mse_loss.out", [](T self, T target, int64_t reduction, at::Tensor& out) -> at::Tensor& {
    return assign_out(out, mse_loss_impl(self, target, reduction));
  });
  m.impl("mse_loss_backward", mse_loss_backward_impl);
  m.impl("smooth_l1_loss", smooth_l1_loss_impl);
  m.impl("smooth_l1_loss.out", [](T self, T target, int64_t reduction, double beta, at::Tensor& out) -> at::Tensor& {
    return assign_out(out, smooth_l1_loss_impl(self, target, reduction, beta));
  });
  m.impl("smooth_l1_loss_backward", smooth_l1_loss_backward_impl);
  m.impl("binary_cross_entropy", binary_cross_entropy_impl);
  m.impl("binary_cross_entropy_backward", binary_cross_entropy_backward_impl);
  m.impl("_amp_foreach_non_finite_check_and_unscale_", amp_unscale_);
  m.impl("_amp_update_scale_", amp_update_scale_);
  m.impl("clamp.Tensor", clamp_tensor);
  m.impl("clamp.Tensor_out", clamp_tensor_out);
  m.impl("clamp_.Tensor", clamp_tensor_);
  m.impl("pow.Scalar", pow_scalar);
  m.impl("pow.Scalar_out", pow_scalar_out);
  m.impl("nll_loss2d_forward", nll_loss2d_forward);
  m.impl("nll_loss2d_backward", nll_loss2d_backward);
  m.impl("max_unpool2d", max_unpool2d);
  m.impl("max_unpool3d", max_unpool3d);
  m.impl("_adaptive_avg_pool2d", adaptive_avg_pool2d);
  m.impl("_adaptive_avg_pool2d_backward", adaptive_avg_pool2d_backward);
  m.impl("rsub.Tensor", rsub);
  m.impl("rsub.Scalar", rsub_scalar);
  m.impl("logaddexp", logaddexp<false>);
  m.impl("logaddexp.out", logaddexp_out<false>);
  m.impl("logaddexp2", logaddexp<true>);
  m.impl("logaddexp2.out", logaddexp_out<true>);
  m.impl("round.decimals", round_decimals);
  m.impl("round.decimals_out", round_decimals_out);
  m.impl("round_.decimals", round_decimals_);
  m.impl("log_sigmoid_forward", log_sigmoid_forward);
  m.impl("log_sigmoid_backward", log_sigmoid_backward);
  m.impl("nansum", nansum);
  m.impl("roll", roll_impl);
  m.impl("equal", equal);
  m.impl("eye.m_out", eye_m_out);
  m.impl("eye.out", eye_out);
  m.impl("linspace.out", linspace_out);
  m.impl("logspace.out", logspace_out);
  m.impl("masked_select", masked_select);
  m.impl("trace", trace);
  m.impl("count_nonzero.dim_IntList", count_nonzero);
  m.impl("aminmax", aminmax_impl);
  m.impl("aminmax.out", aminmax_out);
  m.impl("angle", angle_impl);
  m.impl("angle.out", angle_out);
  m.impl("mvlgamma.out", mvlgamma_out);
}

}  // namespace torch_tpu
