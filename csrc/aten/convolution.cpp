// Convolutions. PyTorch routes convolution on a backend it does not know to
// the "overrideable" ops. 1-d and 2-d convolutions (stride, padding,
// dilation, groups) run natively as im2col and matrix products:
//   patches [N*OH*OW, C*kh*kw] = WINDOW IM2COL of the input (channels last),
//   out[:, group] = patches[:, group] @ weight[group]^T (+ bias: ADDMM),
// and backward as the matching products plus WINDOW COL2IM for the input
// gradient. Transposed and 3-d convolutions still run as the generic
// `convolution` / `convolution_backward` through the counted CPU fallback.
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/convolution_backward_ops.h>
#include <ATen/ops/convolution_ops.h>
#include <torch/library.h>

#include "core/fallback.h"
#include "core/glue.h"

namespace torch_tpu {
namespace {

// A convolution described as a 2-d one: 1-d inputs get H = 1.
struct ConvShape {
  at::Tensor input, weight;  // 4-d views
  int64_t sh, sw, ph, pw, dh, dw, groups;
  int64_t oh, ow;
  bool was_1d;
};

bool native_conv(const at::Tensor& input, bool transposed, int64_t groups) {
  return !transposed && (input.dim() == 3 || input.dim() == 4) && groups >= 1 &&
         at::isFloatingType(input.scalar_type());
}

ConvShape conv_shape(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
                     at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  ConvShape s;
  s.was_1d = input.dim() == 3;
  s.input = s.was_1d ? input.unsqueeze(2) : input;
  s.weight = s.was_1d ? weight.unsqueeze(2) : weight;
  const auto at2 = [&](at::IntArrayRef v, int64_t k) { return s.was_1d ? (k == 0 ? int64_t{0} : v[0]) : v[k]; };
  s.sh = s.was_1d ? 1 : stride[0];
  s.sw = at2(stride, 1);
  s.ph = at2(padding, 0);
  s.pw = at2(padding, 1);
  s.dh = s.was_1d ? 1 : dilation[0];
  s.dw = at2(dilation, 1);
  s.groups = groups;
  const int64_t kh = s.weight.size(2), kw = s.weight.size(3);
  s.oh = (s.input.size(2) + 2 * s.ph - s.dh * (kh - 1) - 1) / s.sh + 1;
  s.ow = (s.input.size(3) + 2 * s.pw - s.dw * (kw - 1) - 1) / s.sw + 1;
  return s;
}

// patches [N*OH*OW, C*kh*kw] (rows: output pixels in n, oh, ow order).
at::Tensor im2col(const ConvShape& s) {
  const char* name = "aten::convolution";
  const int64_t n = s.input.size(0), c = s.input.size(1), kh = s.weight.size(2), kw = s.weight.size(3);
  at::Tensor cols = at::empty({n, s.oh, s.ow, c, kh, kw}, s.input.options());
  if (cols.numel() == 0) return cols.view({n * s.oh * s.ow, c * kh * kw});
  check_in_storage(s.input, name);
  tpu_op op{};
  op.code = TPU_OP_WINDOW;
  op.fn = TPU_WINDOW_IM2COL;
  op.n_in = 1;
  op.in[0] = describe(s.input, name);
  op.out = describe(cols, name);
  op.p.window = {kh, kw, s.sh, s.sw, s.ph, s.pw, s.dh, s.dw};
  submit(s.input.device().index(), op, name);
  return cols.view({n * s.oh * s.ow, c * kh * kw});
}

// The input gradient from d(patches), the adjoint of im2col.
at::Tensor col2im(const ConvShape& s, const at::Tensor& dcols) {
  const char* name = "aten::convolution_backward";
  const int64_t n = s.input.size(0), c = s.input.size(1), kh = s.weight.size(2), kw = s.weight.size(3);
  at::Tensor dx = at::empty(s.input.sizes(), s.input.options());
  if (dx.numel() == 0) return dx;
  const at::Tensor cols6 = dcols.view({n, s.oh, s.ow, c, kh, kw});
  tpu_op op{};
  op.code = TPU_OP_WINDOW;
  op.fn = TPU_WINDOW_COL2IM;
  op.n_in = 1;
  op.in[0] = describe(cols6, name);
  op.out = describe(dx, name);
  op.p.window = {kh, kw, s.sh, s.sw, s.ph, s.pw, s.dh, s.dw};
  submit(s.input.device().index(), op, name);
  return dx;
}

// [N*OH*OW, O] (channels last) as the [N, O, OH, OW] (or [N, O, OW]) result,
// in the input's memory format as PyTorch's CPU convolution gives it (the
// rows already are a channels-last tensor).
at::Tensor from_rows(const ConvShape& s, const at::Tensor& rows) {
  const int64_t n = s.input.size(0), o = rows.size(1);
  at::Tensor out = rows.view({n, s.oh, s.ow, o}).permute({0, 3, 1, 2});
  if (s.was_1d) return out.squeeze(2).contiguous();
  return s.input.suggest_memory_format() == at::MemoryFormat::ChannelsLast ? out : out.contiguous();
}

// grad_output [N, O, OH, OW] as rows [N*OH*OW, O].
at::Tensor to_rows(const ConvShape& s, const at::Tensor& grad_output) {
  const at::Tensor g = s.was_1d ? grad_output.unsqueeze(2) : grad_output;
  return g.permute({0, 2, 3, 1}).reshape({-1, g.size(1)});
}

at::Tensor conv_forward(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                        at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  const ConvShape s = conv_shape(input, weight, stride, padding, dilation, groups);
  const at::Tensor cols = im2col(s);
  const int64_t o = s.weight.size(0), og = o / groups, kg = cols.size(1) / groups;
  const at::Tensor w = s.weight.reshape({o, -1});
  at::Tensor rows = at::empty({cols.size(0), o}, input.options());
  const bool has_bias = bias.has_value() && bias->defined();
  for (int64_t g = 0; g < groups; g++) {
    at::Tensor out_g = rows.narrow(1, g * og, og);
    const at::Tensor a = cols.narrow(1, g * kg, kg), b = w.narrow(0, g * og, og).t();
    if (has_bias)
      at::addmm_out(out_g, bias->narrow(0, g * og, og).expand({cols.size(0), og}), a, b);
    else
      at::mm_out(out_g, a, b);
  }
  return from_rows(s, rows);
}

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
                                    c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  if (native_conv(input, transposed, groups.expect_int()))
    return conv_forward(input, weight, bias, C10_AS_INTARRAYREF_SLOW(stride), C10_AS_INTARRAYREF_SLOW(padding),
                        C10_AS_INTARRAYREF_SLOW(dilation), groups.expect_int());
  return at::native::call_fallback_fn_symint<&cpu_fallback, at::_ops::convolution>::call(
      input, weight, bias, stride, padding, dilation, transposed, output_padding, std::move(groups));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask) {
  at::Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[2]) {
    // The bias gradient sums grad_output over every dim but channels (dim
    // 1, for plain and transposed convolutions alike): a native reduction.
    std::vector<int64_t> dims{0};
    for (int64_t d = 2; d < grad_output.dim(); d++) dims.push_back(d);
    grad_bias = grad_output.sum(dims);
  }
  if (!output_mask[0] && !output_mask[1]) return {grad_input, grad_weight, grad_bias};
  const int64_t groups_i = groups.expect_int();
  if (!native_conv(input, transposed, groups_i)) {
    std::tie(grad_input, grad_weight, std::ignore) =
        at::native::call_fallback_fn_symint<&cpu_fallback, at::_ops::convolution_backward>::call(
            grad_output, input, weight, std::nullopt, stride, padding, dilation, transposed, output_padding,
            std::move(groups), {output_mask[0], output_mask[1], false});
    return {grad_input, grad_weight, grad_bias};
  }
  const ConvShape s = conv_shape(input, weight, C10_AS_INTARRAYREF_SLOW(stride), C10_AS_INTARRAYREF_SLOW(padding),
                                 C10_AS_INTARRAYREF_SLOW(dilation), groups_i);
  const at::Tensor go = to_rows(s, grad_output);  // [N*OH*OW, O]
  const int64_t o = s.weight.size(0), og = o / groups_i;
  const at::Tensor w = s.weight.reshape({o, -1});
  const int64_t kg = w.size(1);
  if (output_mask[1]) {
    const at::Tensor cols = im2col(s);
    at::Tensor gw = at::empty({o, kg}, weight.options());
    for (int64_t g = 0; g < groups_i; g++) {
      at::Tensor gw_g = gw.narrow(0, g * og, og);
      at::mm_out(gw_g, go.narrow(1, g * og, og).t(), cols.narrow(1, g * kg, kg));
    }
    grad_weight = gw.view(weight.sizes());
  }
  if (output_mask[0]) {
    at::Tensor dcols = at::empty({go.size(0), kg * groups_i}, input.options());
    for (int64_t g = 0; g < groups_i; g++) {
      at::Tensor dcols_g = dcols.narrow(1, g * kg, kg);
      at::mm_out(dcols_g, go.narrow(1, g * og, og), w.narrow(0, g * og, og));
    }
    at::Tensor dx = col2im(s, dcols);
    grad_input = s.was_1d ? dx.squeeze(2) : dx;
  }
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", convolution_overrideable);
  m.impl("convolution_backward_overrideable", convolution_backward_overrideable);
}

}  // namespace torch_tpu
