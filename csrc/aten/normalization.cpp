// Layer norm, forward and backward, as TPU_OP_NORM records over the
// [M, N] rows of the input (N = the normalized shape's elements), with
// PyTorch's own argument checks and its CPU backend's dtypes: mean and
// rstd in the input's dtype, or float32 when a float16/bfloat16 input
// comes with float32 parameters (mixed precision).
//
// Batch norm. `native_batch_norm` updates its running statistics in place,
// but its schema does not mark them as written, so the generic CPU
// fallback (which copies back only arguments marked as written) would lose
// the update. It runs instead as `_native_batch_norm_legit`, whose schema
// says so, through the same counted fallback.
#include <ATen/native/CPUFallback.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/_native_batch_norm_legit_ops.h>
#include <torch/library.h>

#include "core/fallback.h"
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
    // device scratch, taken for the current stream (see reduce.cpp).
    at::Tensor scratch;
    if (const int64_t bytes = tpu_op_scratch_bytes(&op); bytes > 0) {
      scratch = at::empty({bytes}, input.options().dtype(at::kByte));
      op.scratch = scratch.data_ptr();
      op.scratch_nbytes = bytes;
    }
    submit(input.device().index(), op, name);
  }
  return {mask[0] ? dx : at::Tensor(), dw, db};
}

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

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_batch_norm", native_batch_norm);
  m.impl("native_layer_norm", native_layer_norm);
  m.impl("native_layer_norm_backward", native_layer_norm_backward);
}

}  // namespace torch_tpu
