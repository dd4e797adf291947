// Pooling on PyTorch's structured metas (sizes, ceil_mode, argument checks
// as on CPU). Max pooling: forward as one WINDOW MAX_POOL record (values
// and the flat position h * W + w of each maximum), backward as a
// scatter-add of the gradient into those positions (INDEX SCATTER_ADD, in
// window order). Average pooling: the windows from WINDOW IM2COL summed,
// over each window's divisor; backward spreads grad / divisor back with
// WINDOW COL2IM.
#include <ATen/ops/avg_pool2d_backward_meta.h>
#include <ATen/ops/avg_pool2d_meta.h>
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

// ---- average pooling.

struct AvgWindow {
  int64_t kh, kw, sh, sw, ph, pw;
};

AvgWindow avg_window(at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding) {
  return {pick(kernel, 0, kernel),   pick(kernel, 1, kernel),   pick(stride, 0, kernel),
          pick(stride, 1, kernel),   pick(padding, 0, padding), pick(padding, 1, padding)};
}

// Each window's divisor [OH, OW], as PyTorch's CPU kernel counts it: the
// override; or the window clipped to the padded image (count_include_pad);
// or clipped to the image. In f64 for float x, int64 for integer x.
at::Tensor avg_divisors(const AvgWindow& w, int64_t h, int64_t wd, int64_t oh, int64_t ow, bool count_include_pad,
                        std::optional<int64_t> divisor_override, const at::Tensor& like) {
  at::Tensor d = at::empty({oh, ow}, at::TensorOptions().dtype(at::kDouble));
  double* p = d.data_ptr<double>();
  for (int64_t i = 0; i < oh; i++) {
    for (int64_t j = 0; j < ow; j++) {
      int64_t h0 = i * w.sh - w.ph, w0 = j * w.sw - w.pw;
      int64_t h1 = std::min(h0 + w.kh, h + w.ph), w1 = std::min(w0 + w.kw, wd + w.pw);
      const int64_t padded = (h1 - h0) * (w1 - w0);
      h0 = std::max<int64_t>(h0, 0);
      w0 = std::max<int64_t>(w0, 0);
      h1 = std::min(h1, h);
      w1 = std::min(w1, wd);
      const int64_t inside = std::max<int64_t>(h1 - h0, 0) * std::max<int64_t>(w1 - w0, 0);
      const int64_t f = divisor_override.has_value() ? *divisor_override : count_include_pad ? padded : inside;
      p[i * ow + j] = static_cast<double>(f == 0 ? 1 : f);  // an empty window sums to 0
    }
  }
  const bool integral = at::isIntegralType(like.scalar_type(), /*includeBool=*/false);
  return d.to(like.device(), integral ? at::kLong : at::kDouble);
}

// One WINDOW record (IM2COL or COL2IM) with a stride-w, dilation-1 window.
void submit_window(tpu_window_fn fn, const at::Tensor& in, const at::Tensor& out, const AvgWindow& w,
                   const char* name) {
  check_in_storage(in, name);
  tpu_op rec{};
  rec.code = TPU_OP_WINDOW;
  rec.fn = fn;
  rec.n_in = 1;
  rec.in[0] = describe(in, name);
  rec.out = describe(out, name);
  rec.p.window = {w.kh, w.kw, w.sh, w.sw, w.ph, w.pw, 1, 1};
  submit(out.device().index(), rec, name);
}

// The window sums [N, OH, OW, C] of x [N, C, H, W] (f32 for f16/bf16).
at::Tensor window_sums(const at::Tensor& x, const AvgWindow& w, int64_t oh, int64_t ow, const char* name) {
  const int64_t n = x.size(0), c = x.size(1);
  at::Tensor cols = at::empty({n, oh, ow, c, w.kh, w.kw}, x.options());
  if (cols.numel() > 0) submit_window(TPU_WINDOW_IM2COL, x, cols, w, name);
  const bool reduced = at::isReducedFloatingType(x.scalar_type());
  return reduced ? cols.sum({4, 5}, false, at::kFloat) : cols.sum({4, 5});
}

void avg_pool_kernel(Structured<at::meta::structured_avg_pool2d>& op, const at::Tensor& self, at::IntArrayRef kernel,
                     at::IntArrayRef stride, at::IntArrayRef padding, bool, bool count_include_pad,
                     std::optional<int64_t> divisor_override) {
  const char* name = "aten::avg_pool2d";
  const at::Tensor& out = op.output_;
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()) || self.scalar_type() == at::kLong,
                              "\"avg_pool2d\" not implemented for '", self.scalar_type(), "'");
  if (out.numel() == 0) return;
  const at::Tensor x = self.dim() == 4 ? self : self.unsqueeze(0);
  const AvgWindow w = avg_window(kernel, stride, padding);
  const int64_t oh = out.size(-2), ow = out.size(-1);
  const at::Tensor sums = window_sums(x, w, oh, ow, name).permute({0, 3, 1, 2});
  const at::Tensor div = avg_divisors(w, x.size(2), x.size(3), oh, ow, count_include_pad, divisor_override, x);
  const at::Tensor avg = at::isIntegralType(x.scalar_type(), false) ? at::div(sums, div, "trunc") : sums / div;
  out.copy_(self.dim() == 4 ? avg : avg.squeeze(0));
}

void avg_pool_backward_kernel(Structured<at::meta::structured_avg_pool2d_backward>& op, const at::Tensor& grad_output,
                              const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                              at::IntArrayRef padding, bool, bool count_include_pad,
                              std::optional<int64_t> divisor_override) {
  const char* name = "aten::avg_pool2d_backward";
  const at::Tensor& grad_input = op.output_;
  check_same_device(name, self.device(), {{"grad_output", &grad_output}});
  if (grad_input.numel() == 0) return;
  const bool batched = self.dim() == 4;
  const at::Tensor x = batched ? self : self.unsqueeze(0), g = batched ? grad_output : grad_output.unsqueeze(0);
  const AvgWindow w = avg_window(kernel, stride, padding);
  const int64_t oh = g.size(2), ow = g.size(3);
  at::Tensor dx = at::zeros(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  if (g.numel() > 0) {
    const at::Tensor div = avg_divisors(w, x.size(2), x.size(3), oh, ow, count_include_pad, divisor_override, x);
    // grad / divisor at every element of its window: [N, OH, OW, C, kh, kw]
    // with stride 0 over the window (no copy).
    const at::Tensor share = (g / div).to(x.scalar_type()).permute({0, 2, 3, 1}).unsqueeze(4).unsqueeze(5);
    submit_window(TPU_WINDOW_COL2IM, share.expand({x.size(0), oh, ow, x.size(1), w.kh, w.kw}), dx, w, name);
  }
  grad_input.copy_(batched ? dx : dx.squeeze(0));
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
  using O = std::optional<int64_t>;
  m.impl("avg_pool2d", structured_functional<at::meta::structured_avg_pool2d, &avg_pool_kernel, "aten::avg_pool2d",
                                             T, A, A, A, bool, bool, O>);
  m.impl("avg_pool2d.out", structured_out<at::meta::structured_avg_pool2d, &avg_pool_kernel, "aten::avg_pool2d", T,
                                          A, A, A, bool, bool, O>);
  m.impl("avg_pool2d_backward",
         structured_functional<at::meta::structured_avg_pool2d_backward, &avg_pool_backward_kernel,
                               "aten::avg_pool2d_backward", T, T, A, A, A, bool, bool, O>);
  m.impl("avg_pool2d_backward.grad_input",
         structured_out<at::meta::structured_avg_pool2d_backward, &avg_pool_backward_kernel,
                        "aten::avg_pool2d_backward", T, T, A, A, A, bool, bool, O>);
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
