// softmax, log_softmax, _safe_softmax and the backwards as TPU_OP_SOFTMAX records,
// on PyTorch's structured metas (shape, dtype and argument checks as for
// CPU and CUDA). half_to_float (an f16 input with an f32 result, which
// CUDA supports and PyTorch's CPU backend does not) works.
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/_log_softmax_backward_data_meta.h>
#include <ATen/ops/_log_softmax_meta.h>
#include <ATen/ops/_softmax_backward_data_meta.h>
#include <ATen/ops/_softmax_meta.h>
#include <torch/library.h>

#include "core/glue.h"
#include "core/structured.h"

namespace torch_tpu {
namespace {

// Submits fn along `dim` of `in` (and `in2` for backward) into out; a
// 0-dim tensor is a row of one element.
void run(tpu_softmax_fn fn, const char* name, const at::Tensor& out, const at::Tensor& in, const at::Tensor* in2,
         int64_t dim) {
  for (const at::Tensor* t : {&in, in2})
    if (t != nullptr)
      TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(t->scalar_type()), "\"", name, "\" not implemented for '",
                                  t->scalar_type(), "'");
  if (out.numel() == 0) return;
  if (out.is_alias_of(in) || (in2 != nullptr && out.is_alias_of(*in2))) {
    // out= an input (as PyTorch allows): compute aside, then store.
    at::Tensor tmp = at::empty(out.sizes(), out.options());
    run(fn, name, tmp, in, in2, dim);
    out.copy_(tmp);
    return;
  }
  auto as_row = [](const at::Tensor& t) { return t.dim() == 0 ? t.view({1}) : t; };
  const at::Tensor o = as_row(out), x = as_row(in);
  const int64_t d = at::maybe_wrap_dim(dim, x.dim());
  if (x.stride(d) != 1 && x.size(d) > 1) {
    // The kernel's rows are fastest when contiguous: move the dim last
    // (a blocked transpose copy), run there, and copy the result back.
    at::Tensor xt = x.movedim(d, -1).contiguous();
    at::Tensor yt = in2 != nullptr ? as_row(*in2).movedim(d, -1).contiguous() : at::Tensor();
    at::Tensor ot = at::empty(xt.sizes(), o.options());
    run(fn, name, ot, xt, in2 != nullptr ? &yt : nullptr, -1);
    o.copy_(ot.movedim(-1, d));  // a transposed source: the copy's blocked path
    return;
  }
  tpu_op op{};
  op.code = TPU_OP_SOFTMAX;
  op.fn = fn;
  op.n_in = in2 != nullptr ? 2 : 1;
  op.out = describe(o, name);
  op.in[0] = describe(x, name);
  if (in2 != nullptr) op.in[1] = describe(as_row(*in2), name);
  op.p.softmax.dim = static_cast<int32_t>(d);
  submit(out.device().index(), op, name);
}

template <tpu_softmax_fn Fn>
void forward_kernel(at::impl::MetaBase& meta, const at::Tensor& self, int64_t dim, bool half_to_float) {
  // As CUDA, the one backend that has it.
  TORCH_CHECK(!half_to_float || self.scalar_type() == at::kHalf, "conversion is supported for Half type only");
  run(Fn, Fn == TPU_SOFTMAX_LOG ? "aten::_log_softmax" : "aten::_softmax", meta.maybe_get_output(0), self, nullptr,
      dim);
}

template <tpu_softmax_fn Fn>
void backward_kernel(at::impl::MetaBase& meta, const at::Tensor& grad, const at::Tensor& output, int64_t dim,
                     at::ScalarType) {
  run(Fn, Fn == TPU_SOFTMAX_LOG_BACKWARD ? "aten::_log_softmax_backward_data" : "aten::_softmax_backward_data",
      meta.maybe_get_output(0), grad, &output, dim);
}

// _safe_softmax (what scaled_dot_product_attention's math path uses on a
// masked score matrix): softmax, but 0 for a row that is all -inf, in one
// record instead of CPU's composite of softmax, eq, all and where. As
// there, `dtype` converts the input first and names the result's dtype.
at::Tensor safe_softmax(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  const at::Tensor x = dtype.has_value() && *dtype != self.scalar_type() ? self.to(*dtype) : self;
  at::Tensor out = at::empty_like(x);
  run(TPU_SOFTMAX_SAFE, "aten::_safe_softmax", out, x, nullptr, dim);
  return out;
}

using T = const at::Tensor&;

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_safe_softmax", safe_softmax);
  m.impl("_softmax", structured_functional<at::meta::structured__softmax, &forward_kernel<TPU_SOFTMAX_FORWARD>,
                                           "aten::_softmax", T, int64_t, bool>);
  m.impl("_softmax.out", structured_out<at::meta::structured__softmax, &forward_kernel<TPU_SOFTMAX_FORWARD>,
                                        "aten::_softmax", T, int64_t, bool>);
  m.impl("_log_softmax", structured_functional<at::meta::structured__log_softmax, &forward_kernel<TPU_SOFTMAX_LOG>,
                                               "aten::_log_softmax", T, int64_t, bool>);
  m.impl("_log_softmax.out", structured_out<at::meta::structured__log_softmax, &forward_kernel<TPU_SOFTMAX_LOG>,
                                            "aten::_log_softmax", T, int64_t, bool>);
  m.impl("_softmax_backward_data",
         structured_functional<at::meta::structured__softmax_backward_data, &backward_kernel<TPU_SOFTMAX_BACKWARD>,
                               "aten::_softmax_backward_data", T, T, int64_t, at::ScalarType>);
  m.impl("_softmax_backward_data.out",
         structured_out<at::meta::structured__softmax_backward_data, &backward_kernel<TPU_SOFTMAX_BACKWARD>,
                        "aten::_softmax_backward_data", T, T, int64_t, at::ScalarType>);
  m.impl("_log_softmax_backward_data",
         structured_functional<at::meta::structured__log_softmax_backward_data,
                               &backward_kernel<TPU_SOFTMAX_LOG_BACKWARD>, "aten::_log_softmax_backward_data", T, T,
                               int64_t, at::ScalarType>);
  m.impl("_log_softmax_backward_data.out",
         structured_out<at::meta::structured__log_softmax_backward_data, &backward_kernel<TPU_SOFTMAX_LOG_BACKWARD>,
                        "aten::_log_softmax_backward_data", T, T, int64_t, at::ScalarType>);
}

}  // namespace torch_tpu
