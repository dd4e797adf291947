// Layer norm, forward and backward, as TPU_OP_NORM records over the
// [M, N] rows of the input (N = the normalized shape's elements), with
// PyTorch's own argument checks and its CPU backend's dtypes: mean and
// rstd in the input's dtype, or float32 when a float16/bfloat16 input
// comes with float32 parameters (mixed precision).
//
// Batch norm (native_batch_norm, _native_batch_norm_legit and its backward)
// and group norm (native_group_norm and its backward) are composed of
// native reductions and element-wise ops. Their statistics come in the
// dtype of the running statistics (or the weight, or the input); they
// compute in that dtype, or in float32 for float16/bfloat16, rounding the
// result once as PyTorch's CPU kernels do, and batch norm updates the
// running statistics in place as PyTorch does.
#include <ATen/native/layer_norm.h>
#include <torch/library.h>

#include "core/glue.h"

namespace torch_tpu {
namespace {

bool is_reduced_float(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

// The dtype of the parameters and statistics, after checking that weight
// and bias agree with the input.
at::ScalarType param_dtype(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias) {
  const at::ScalarType x = input.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(x), "\"LayerNormKernelImpl\" not "
                              "implemented for '", x, "'");
  at::ScalarType p = x;
  for (const at::Tensor* t : {&weight, &bias}) {
    if (!t->defined()) continue;
    if (t->scalar_type() != x) {
      TORCH_CHECK(is_reduced_float(x) && t->scalar_type() == at::kFloat,
                  "native_layer_norm: expected weight and bias of dtype ", x,
                  " (or float32 with a float16 or bfloat16 input), got ", t->scalar_type());
      p = at::kFloat;
    }
  }
  for (const at::Tensor* t : {&weight, &bias})
    TORCH_CHECK(!t->defined() || t->scalar_type() == p, "native_layer_norm: weight and bias must share a dtype, "
                "got ", weight.scalar_type(), " and ", bias.scalar_type());
  return p;
}

// An optional tensor as a record slot: absent when undefined. `flat` keeps
// its 1-d form alive until the record is submitted (a reshape may copy).
tpu_tensor describe_optional(const at::Tensor& t, at::Tensor& flat, const char* name) {
  if (!t.defined()) return tpu_tensor{};
  check_in_storage(t, name);
  flat = t.reshape({-1});
  return describe(flat, name);
}

// mean and rstd's shape: the input's leading dims, then 1 per normalized dim.
std::vector<int64_t> stat_shape(const at::Tensor& input, size_t normalized_ndim) {
  std::vector<int64_t> shape(input.sizes().begin(), input.sizes().end() - normalized_ndim);
  shape.resize(input.dim(), 1);
  return shape;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(const at::Tensor& input,
                                                                 at::IntArrayRef normalized_shape,
                                                                 const std::optional<at::Tensor>& weight_opt,
                                                                 const std::optional<at::Tensor>& bias_opt,
                                                                 double eps) {
  const char* name = "aten::native_layer_norm";
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  const auto [m, n] = at::native::_check_layer_norm_inputs(input, normalized_shape, weight, bias);
  check_same_device("native_layer_norm", input.device(), {{"weight", &weight}, {"bias", &bias}});
  const at::ScalarType p = param_dtype(input, weight, bias);
  at::Tensor y = at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
  at::Tensor mean = at::empty({m}, input.options().dtype(p));
  at::Tensor rstd = at::empty({m}, input.options().dtype(p));
  if (m > 0) {
    check_in_storage(input, name);
    tpu_op op{};
    op.code = TPU_OP_NORM;
    op.fn = TPU_NORM_LAYER_FORWARD;
    op.n_in = 3;
    op.n_aux = 2;
    // Reshapes may copy: the copies live until the record is submitted.
    const at::Tensor x = input.reshape({m, n});
    at::Tensor w, b;
    op.in[0] = describe(x, name);
    op.in[1] = describe_optional(weight, w, name);
    op.in[2] = describe_optional(bias, b, name);
    op.out = describe(y.view({m, n}), name);
    op.aux[0] = describe(mean, name);
    op.aux[1] = describe(rstd, name);
    op.p.norm.eps = eps;
    submit(input.device().index(), op, name);
  }
  const std::vector<int64_t> stats = stat_shape(input, normalized_shape.size());
  return {y, mean.view(stats), rstd.view(stats)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, at::IntArrayRef normalized_shape, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight_opt, const std::optional<at::Tensor>& bias_opt,
    std::array<bool, 3> mask) {
  const char* name = "aten::native_layer_norm_backward";
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  const auto [m, n] = at::native::_check_layer_norm_inputs(input, normalized_shape, weight, bias);
  check_same_device("native_layer_norm_backward", input.device(),
                    {{"grad_out", &grad_out}, {"mean", &mean}, {"rstd", &rstd}, {"weight", &weight}, {"bias", &bias}});
  const at::ScalarType p = param_dtype(input, weight, bias);
  TORCH_CHECK(grad_out.sizes() == input.sizes(), name, ": grad_out has sizes ", grad_out.sizes(),
              " but input has ", input.sizes());
  TORCH_CHECK(mean.numel() == m && rstd.numel() == m, name, ": mean and rstd need ", m, " elements, got ",
              mean.numel(), " and ", rstd.numel());
  TORCH_CHECK(mean.scalar_type() == p && rstd.scalar_type() == p, name, ": mean and rstd must be ", p, ", got ",
              mean.scalar_type(), " and ", rstd.scalar_type());
  TORCH_CHECK(grad_out.scalar_type() == input.scalar_type(), name, ": grad_out is ", grad_out.scalar_type(),
              " but input is ", input.scalar_type());
  // dx is computed even when not wanted (the record always writes it).
  at::Tensor dx = at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
  at::Tensor dw, db;
  if (mask[1] && weight.defined()) dw = at::empty(weight.sizes(), weight.options());
  if (mask[2] && bias.defined()) db = at::empty(bias.sizes(), bias.options());
  if (m == 0 || n == 0) {
    // No rows: the parameter gradients are sums over nothing.
    if (dw.defined()) dw.zero_();
    if (db.defined()) db.zero_();
  } else {
    for (const at::Tensor* t : {&grad_out, &input, &mean, &rstd}) check_in_storage(*t, name);
    tpu_op op{};
    op.code = TPU_OP_NORM;
    op.fn = TPU_NORM_LAYER_BACKWARD;
    op.n_in = 5;
    op.n_aux = 2;
    // Reshapes may copy: the copies live until the record is submitted.
    const at::Tensor g = grad_out.reshape({m, n}), x = input.reshape({m, n});
    const at::Tensor mean1 = mean.reshape({m}), rstd1 = rstd.reshape({m});
    at::Tensor w;
    op.in[0] = describe(g, name);
    op.in[1] = describe(x, name);
    op.in[2] = describe(mean1, name);
    op.in[3] = describe(rstd1, name);
    op.in[4] = describe_optional(weight, w, name);
    op.out = describe(dx.view({m, n}), name);
    if (dw.defined()) op.aux[0] = describe(dw.view({n}), name);
    if (db.defined()) op.aux[1] = describe(db.view({n}), name);
    // The parameter gradients' column sums keep per-block partials in
    // device scratch (attach_scratch).
    const at::Tensor scratch = attach_scratch(op, input);
    submit(input.device().index(), op, name);
  }
  return {mask[0] ? dx : at::Tensor(), dw, db};
}

// ---- batch norm, composed of native reductions and element-wise ops in
// the statistics' dtype (float32 for a half input with float32
// parameters, as on CPU).

// [1, C, 1, ...]: a per-channel tensor broadcast against the input.
at::Tensor per_channel(const at::Tensor& t, const at::Tensor& input) {
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = t.numel();
  return t.view(shape);
}

std::vector<int64_t> reduce_dims(const at::Tensor& input) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); d++) dims.push_back(d);
  return dims;
}

// The sum of t over every dim but 1 ([C], f64): a contiguous t as a sum
// over its trailing dims and then over N, which the reductions' fast paths
// take (one reduction over dims 0, 2, ... walks every element through the
// reference: batch norm took 5x the CPU's time); anything else as one.
at::Tensor channel_sum_f64(const at::Tensor& t) {
  if (t.dim() > 2 && t.numel() > 0 && t.is_contiguous())
    return t.reshape({t.size(0), t.size(1), -1}).sum(2, false, at::kDouble).sum(0);
  return t.sum(reduce_dims(t), false, at::kDouble);
}

// The dtype the composed norms compute in: float32 for half dtypes.
at::ScalarType compute_dtype(at::ScalarType st) { return is_reduced_float(st) ? at::kFloat : st; }

at::ScalarType stats_dtype(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& running_mean) {
  if (running_mean.defined()) return running_mean.scalar_type();
  if (weight.defined()) return weight.scalar_type();
  return input.scalar_type();
}

void check_batch_norm(const at::Tensor& input, const char* name) {
  TORCH_CHECK(input.dim() >= 2, name, ": expected an input of at least 2 dims, got ", input.dim());
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(input.scalar_type()), "\"batch_norm\" not implemented for '",
                              input.scalar_type(), "'");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_impl(const at::Tensor& input, const at::Tensor& weight,
                                                               const at::Tensor& bias, const at::Tensor& running_mean,
                                                               const at::Tensor& running_var, bool training,
                                                               double momentum, double eps) {
  check_batch_norm(input, "native_batch_norm");
  const at::ScalarType st = stats_dtype(input, weight, running_mean), ct = compute_dtype(st);
  const at::Tensor x = input.to(ct);
  const int64_t channels = input.size(1);
  for (const at::Tensor* t : {&weight, &bias, &running_mean, &running_var})
    TORCH_CHECK(!t->defined() || t->numel() == channels, "native_batch_norm: expected ", channels,
                " per-channel values, got a tensor of ", t->numel());
  at::Tensor mean, invstd, save_mean, save_invstd;
  if (training) {
    const int64_t count = input.numel() / std::max<int64_t>(channels, 1);
    TORCH_CHECK(count > 1 || !running_mean.defined(), "Expected more than 1 value per channel when training, got "
                "input size ", input.sizes());
    const double n = static_cast<double>(count);
    mean = channel_sum_f64(x).div(n).to(ct);
    const at::Tensor centered = x - per_channel(mean, input);
    const at::Tensor var = channel_sum_f64(centered * centered).div(n).to(ct);
    invstd = (var + eps).rsqrt();
    save_mean = mean.to(st);
    save_invstd = invstd.to(st);
    if (running_mean.defined()) {
      at::NoGradGuard no_grad;
      running_mean.mul_(1 - momentum).add_(mean.to(running_mean.scalar_type()), momentum);
      const double unbias = count > 1 ? static_cast<double>(count) / static_cast<double>(count - 1) : 1.0;
      running_var.mul_(1 - momentum).add_(var.to(running_var.scalar_type()), momentum * unbias);
    }
  } else {
    TORCH_CHECK(running_mean.defined() && running_var.defined(), "running_mean and running_var must be defined "
                "in evaluation mode");
    mean = running_mean.to(ct);
    invstd = (running_var.to(ct) + eps).rsqrt();
    save_mean = at::empty({0}, input.options().dtype(st));
    save_invstd = at::empty({0}, input.options().dtype(st));
  }
  at::Tensor scale = weight.defined() ? invstd * weight.to(ct) : invstd;
  at::Tensor y = (x - per_channel(mean, input)) * per_channel(scale, input);
  if (bias.defined()) y = y + per_channel(bias.to(ct), input);
  return {y.to(input.scalar_type()), save_mean, save_invstd};
}

at::Tensor value_or_undefined(const std::optional<at::Tensor>& t) { return t.value_or(at::Tensor()); }

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
  const at::Tensor rm = value_or_undefined(running_mean), rv = value_or_undefined(running_var);
  TORCH_CHECK(rm.defined() == rv.defined(), "native_batch_norm: running_mean and running_var must be given together");
  return batch_norm_impl(input, value_or_undefined(weight), value_or_undefined(bias), rm, rv, training, momentum,
                         eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, bool training, double momentum, double eps) {
  return batch_norm_impl(input, value_or_undefined(weight), value_or_undefined(bias), running_mean, running_var,
                         training, momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit_no_stats(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    bool training, double momentum, double eps) {
  return batch_norm_impl(input, value_or_undefined(weight), value_or_undefined(bias), at::Tensor(), at::Tensor(),
                         training, momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight_opt,
    const std::optional<at::Tensor>& running_mean_opt, const std::optional<at::Tensor>& running_var_opt,
    const std::optional<at::Tensor>& save_mean_opt, const std::optional<at::Tensor>& save_invstd_opt, bool train,
    double eps, std::array<bool, 3> mask) {
  check_batch_norm(input, "native_batch_norm_backward");
  const at::Tensor weight = value_or_undefined(weight_opt), rm = value_or_undefined(running_mean_opt);
  const at::Tensor rv = value_or_undefined(running_var_opt);
  const at::ScalarType st = stats_dtype(input, weight, rm), ct = compute_dtype(st);
  const at::Tensor x = input.to(ct), g = grad_out.to(ct);
  at::Tensor mean, invstd;
  if (train) {
    mean = value_or_undefined(save_mean_opt).to(ct);
    invstd = value_or_undefined(save_invstd_opt).to(ct);
  } else {
    mean = rm.to(ct);
    invstd = (rv.to(ct) + eps).rsqrt();
  }
  const at::Tensor xhat = (x - per_channel(mean, input)) * per_channel(invstd, input);
  const at::Tensor db = channel_sum_f64(g).to(ct), dw = channel_sum_f64(g * xhat).to(ct);
  at::Tensor dx;
  if (mask[0]) {
    const at::Tensor scale = weight.defined() ? invstd * weight.to(ct) : invstd;
    if (train) {
      const double count = static_cast<double>(input.numel() / std::max<int64_t>(input.size(1), 1));
      dx = (g - per_channel(db / count, input) - xhat * per_channel(dw / count, input)) * per_channel(scale, input);
    } else {
      dx = g * per_channel(scale, input);
    }
    dx = dx.to(input.scalar_type());
  }
  const at::ScalarType pt = weight.defined() ? weight.scalar_type() : st;
  return {dx, mask[1] ? dw.to(pt) : at::Tensor(), mask[2] ? db.to(pt) : at::Tensor()};
}

// ---- group norm: the [N, group, C / group * HxW] rows normalized, then the
// per-channel affine, in one pass of element-wise ops in the compute dtype.
// mean and rstd [N, group] come in the input's dtype (float32 for a half
// input with float32 weight), as on CPU.

at::ScalarType group_stats_dtype(const at::Tensor& input, const at::Tensor& weight) {
  const bool mixed = is_reduced_float(input.scalar_type()) && weight.defined() && weight.scalar_type() == at::kFloat;
  return mixed ? at::kFloat : input.scalar_type();
}

void check_group_norm(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& bias, int64_t n,
                      int64_t c, int64_t hxw, int64_t group) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(input.scalar_type()), "\"group_norm\" not implemented for '",
                              input.scalar_type(), "'");
  TORCH_CHECK(group > 0 && c % group == 0, "Expected number of channels in input to be divisible by num_groups, ",
              "but got input of shape ", input.sizes(), " and num_groups=", group);
  TORCH_CHECK(input.numel() == n * c * hxw, "native_group_norm: input of ", input.numel(), " elements is not N * C",
              " * HxW = ", n, " * ", c, " * ", hxw);
  for (const at::Tensor* t : {&weight, &bias})
    TORCH_CHECK(!t->defined() || t->numel() == c, "Expected weight and bias to have ", c, " elements, got ",
                t->numel());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm(const at::Tensor& input,
                                                                 const std::optional<at::Tensor>& weight_opt,
                                                                 const std::optional<at::Tensor>& bias_opt, int64_t n,
                                                                 int64_t c, int64_t hxw, int64_t group, double eps) {
  const at::Tensor weight = value_or_undefined(weight_opt), bias = value_or_undefined(bias_opt);
  check_group_norm(input, weight, bias, n, c, hxw, group);
  const at::ScalarType st = group_stats_dtype(input, weight), ct = compute_dtype(st);
  if (input.numel() == 0) {  // no rows, or empty rows: mean 0-sized or NaN, as CPU's
    const at::Tensor nan = at::full({n, group}, NAN, input.options().dtype(st));
    return {at::empty_like(input), nan, nan.clone()};
  }
  const at::Tensor x = input.to(ct).reshape({n, group, -1});
  const at::Tensor mean = x.mean(-1, /*keepdim=*/true);
  const at::Tensor centered = x - mean;
  const at::Tensor rstd = ((centered * centered).mean(-1, /*keepdim=*/true) + eps).rsqrt();
  at::Tensor y = (centered * rstd).view({n, c, hxw});
  if (weight.defined()) y = y * weight.to(ct).view({1, c, 1});
  if (bias.defined()) y = y + bias.to(ct).view({1, c, 1});
  return {y.view(input.sizes()).to(input.scalar_type()), mean.view({n, group}).to(st), rstd.view({n, group}).to(st)};
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)) per row, g = dy * weight;
// dweight and dbias sum over N and HxW.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight_opt, int64_t n, int64_t c, int64_t hxw, int64_t group,
    std::array<bool, 3> mask) {
  const at::Tensor weight = value_or_undefined(weight_opt);
  check_group_norm(input, weight, at::Tensor(), n, c, hxw, group);
  const at::ScalarType ct = compute_dtype(group_stats_dtype(input, weight));
  if (input.numel() == 0) {
    const at::ScalarType pt = weight.defined() ? weight.scalar_type() : input.scalar_type();
    return {mask[0] ? at::empty_like(input) : at::Tensor(), mask[1] ? at::zeros({c}, input.options().dtype(pt)) : at::Tensor(),
            mask[2] ? at::zeros({c}, input.options().dtype(pt)) : at::Tensor()};
  }
  const at::Tensor dy = grad_out.to(ct).reshape({n, c, hxw});
  const at::Tensor m = mean.to(ct).view({n, group, 1}), r = rstd.to(ct).view({n, group, 1});
  const at::Tensor xhat = ((input.to(ct).reshape({n, group, -1}) - m) * r).view({n, c, hxw});
  at::Tensor dx, dw, db;
  if (mask[0]) {
    const at::Tensor g = (weight.defined() ? dy * weight.to(ct).view({1, c, 1}) : dy).view({n, group, -1});
    const at::Tensor xh = xhat.view({n, group, -1});
    dx = r * (g - g.mean(-1, true) - xh * (g * xh).mean(-1, true));
    dx = dx.view(input.sizes()).to(input.scalar_type());
  }
  const at::ScalarType pt = weight.defined() ? weight.scalar_type() : input.scalar_type();
  if (mask[1]) dw = (dy * xhat).sum({0, 2}).to(pt);
  if (mask[2]) db = dy.sum({0, 2}).to(pt);
  return {dx, dw, db};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_group_norm", native_group_norm);
  m.impl("native_group_norm_backward", native_group_norm_backward);
  m.impl("native_batch_norm", native_batch_norm);
  m.impl("_native_batch_norm_legit", batch_norm_legit);
  m.impl("_native_batch_norm_legit.no_stats", batch_norm_legit_no_stats);
  m.impl("native_batch_norm_backward", native_batch_norm_backward);
  m.impl("native_layer_norm", native_layer_norm);
  m.impl("native_layer_norm_backward", native_layer_norm_backward);
}

}  // namespace torch_tpu
