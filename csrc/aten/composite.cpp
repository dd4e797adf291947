// Ops composed of native ones in the glue: each is a few calls to ops that
// have kernels, written the way PyTorch's CPU kernel computes it, so that
// nothing reaches the CPU fallback. A composed op that turns out hot gets a
// record of its own later.
#include <ATen/ExpandUtils.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/Resize.h>
#include <ATen/ScalarOps.h>
#include <torch/library.h>

#include <bitset>
#include <cmath>

#include "core/glue.h"

namespace torch_tpu {
namespace {

using T = const at::Tensor&;
using S = const c10::Scalar&;

// ---- variance and standard deviation: in f64 (PyTorch's CPU kernels
// accumulate float in double), divided by max(N - correction, 0).

std::tuple<at::Tensor, at::Tensor> var_mean_impl(T self, at::OptionalIntArrayRef dim,
                                                 const std::optional<c10::Scalar>& correction, bool keepdim,
                                                 bool take_sqrt, const char* name) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), name,
              " only supports floating-point dtypes on tpu, got ", self.scalar_type());
  const int64_t ndim = self.dim();
  std::vector<int64_t> dims;
  if (dim.has_value() && !dim->empty()) {
    const std::bitset<64> bits = at::dim_list_to_bitset(*dim, ndim);
    for (int64_t d = 0; d < ndim; d++)
      if (bits[d]) dims.push_back(d);
  } else {
    for (int64_t d = 0; d < ndim; d++) dims.push_back(d);
  }
  int64_t n = 1;
  for (int64_t d : dims) n *= self.size(d);
  const double corr = correction.has_value() ? correction->toDouble() : 1.0;
  const double divisor = std::max(0.0, static_cast<double>(n) - corr);
  const at::Tensor x = self.to(at::kDouble);
  const at::Tensor mean = x.mean(dims, /*keepdim=*/true);
  const at::Tensor centered = x - mean;
  at::Tensor var = (centered * centered).sum(dims, keepdim).div(divisor);
  if (take_sqrt) var = var.sqrt();
  at::Tensor m = keepdim ? mean : mean.sum(dims, false);  // drops the kept dims (sizes 1)
  return {var.to(self.scalar_type()), m.to(self.scalar_type())};
}

at::Tensor var(T self, at::OptionalIntArrayRef dim, const std::optional<c10::Scalar>& correction, bool keepdim) {
  return std::get<0>(var_mean_impl(self, dim, correction, keepdim, false, "var"));
}

at::Tensor std_(T self, at::OptionalIntArrayRef dim, const std::optional<c10::Scalar>& correction, bool keepdim) {
  return std::get<0>(var_mean_impl(self, dim, correction, keepdim, true, "std"));
}

std::tuple<at::Tensor, at::Tensor> var_mean(T self, at::OptionalIntArrayRef dim,
                                            const std::optional<c10::Scalar>& correction, bool keepdim) {
  return var_mean_impl(self, dim, correction, keepdim, false, "var_mean");
}

std::tuple<at::Tensor, at::Tensor> std_mean(T self, at::OptionalIntArrayRef dim,
                                            const std::optional<c10::Scalar>& correction, bool keepdim) {
  return var_mean_impl(self, dim, correction, keepdim, true, "std_mean");
}

template <bool Sqrt>
at::Tensor& var_out(T self, at::OptionalIntArrayRef dim, const std::optional<c10::Scalar>& correction, bool keepdim,
                    at::Tensor& out) {
  const at::Tensor r = std::get<0>(var_mean_impl(self, dim, correction, keepdim, Sqrt, Sqrt ? "std" : "var"));
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
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
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
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
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
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
  return s->index({*m});
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("var.correction", var);
  m.impl("std.correction", std_);
  m.impl("var_mean.correction", var_mean);
  m.impl("std_mean.correction", std_mean);
  m.impl("var.correction_out", var_out<false>);
  m.impl("std.correction_out", var_out<true>);
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
}

}  // namespace torch_tpu
