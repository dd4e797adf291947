// Interpolation (upsample_linear1d, bilinear2d, bicubic2d, trilinear3d,
// the antialiased _upsample_bilinear2d_aa / _upsample_bicubic2d_aa, and
// nearest / nearest-exact in 1 to 3 dims, each with its backward) and
// adaptive max pooling, on PyTorch's structured metas (output sizes and
// argument checks exactly as on CPU).
//
// Interpolation is separable: one INDEX INTERP record per spatial dim,
// the last dim first as PyTorch's CPU kernels nest their sums, each with
// a small table (tpu_interp_table: taps and weights computed as CPU
// computes them) that goes to the device in one copy. f16/bf16 keep the
// passes between in f32, so the result is rounded once. The backward runs
// the adjoint (INTERP_BACKWARD) dim by dim into f32 (f64) sums. uint8
// images, which CPU resizes with its own fixed-point arithmetic, take the
// CPU fallback.
//
// Adaptive max pooling: one WINDOW ADAPTIVE_MAX_POOL record over the input
// seen as [N, C, D, H, W]; its backward scatters the gradient into the
// recorded positions (INDEX SCATTER_ADD, in bin order), as max pooling's.
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_upsample_bicubic2d_aa_backward_meta.h>
#include <ATen/ops/_upsample_bicubic2d_aa_meta.h>
#include <ATen/ops/_upsample_bicubic2d_aa_ops.h>
#include <ATen/ops/_upsample_bilinear2d_aa_backward_meta.h>
#include <ATen/ops/_upsample_bilinear2d_aa_meta.h>
#include <ATen/ops/_upsample_bilinear2d_aa_ops.h>
#include <ATen/ops/_upsample_nearest_exact1d_backward_meta.h>
#include <ATen/ops/_upsample_nearest_exact1d_meta.h>
#include <ATen/ops/_upsample_nearest_exact2d_backward_meta.h>
#include <ATen/ops/_upsample_nearest_exact2d_meta.h>
#include <ATen/ops/_upsample_nearest_exact3d_backward_meta.h>
#include <ATen/ops/_upsample_nearest_exact3d_meta.h>
#include <ATen/ops/upsample_nearest1d_backward_meta.h>
#include <ATen/ops/upsample_nearest1d_meta.h>
#include <ATen/ops/upsample_nearest2d_backward_meta.h>
#include <ATen/ops/upsample_nearest2d_meta.h>
#include <ATen/ops/upsample_nearest3d_backward_meta.h>
#include <ATen/ops/upsample_nearest3d_meta.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/adaptive_max_pool2d_backward_meta.h>
#include <ATen/ops/adaptive_max_pool2d_meta.h>
#include <ATen/ops/adaptive_max_pool3d_backward_meta.h>
#include <ATen/ops/adaptive_max_pool3d_meta.h>
#include <ATen/ops/upsample_bicubic2d_backward_meta.h>
#include <ATen/ops/upsample_bicubic2d_meta.h>
#include <ATen/ops/upsample_bicubic2d_ops.h>
#include <ATen/ops/upsample_bilinear2d_backward_meta.h>
#include <ATen/ops/upsample_bilinear2d_meta.h>
#include <ATen/ops/upsample_bilinear2d_ops.h>
#include <ATen/ops/upsample_linear1d_backward_meta.h>
#include <ATen/ops/upsample_linear1d_meta.h>
#include <ATen/ops/upsample_trilinear3d_backward_meta.h>
#include <ATen/ops/upsample_trilinear3d_meta.h>
#include <torch/library.h>

#include <type_traits>
#include <vector>

#include "core/fallback.h"
#include "core/glue.h"
#include "core/structured.h"

namespace torch_tpu {
namespace {

using T = const at::Tensor&;
using A = at::IntArrayRef;
using O = std::optional<double>;

bool is_aa(tpu_interp_mode mode) { return mode == TPU_INTERP_LINEAR_AA || mode == TPU_INTERP_CUBIC_AA; }

// The dtypes CPU interpolates: floats (not f16/bf16 when antialiased);
// anything else is CPU's NotImplementedError, naming the op.
void check_interp_dtype(at::ScalarType type, tpu_interp_mode mode, const char* op) {
  const bool ok = is_aa(mode) ? (type == at::kFloat || type == at::kDouble) : at::isFloatingType(type);
  TORCH_CHECK_NOT_IMPLEMENTED(ok, "\"", op, "\" not implemented for '", at::toString(type), "'");
}

// The table of one dim on the device: idx [O, T] int64 and w [O, T] of the
// compute dtype, sent in one copy (the weights follow the indices in one
// byte buffer, 8-byte aligned).
std::pair<at::Tensor, at::Tensor> device_table(const tpu_interp_spec& spec, const at::Device& device) {
  const int64_t taps = tpu_interp_taps(&spec);
  TORCH_INTERNAL_ASSERT(taps > 0, "interpolation: invalid table spec");
  const int64_t n = spec.out_size * taps;
  const bool wide = spec.dtype == TPU_DTYPE_F64;
  const int64_t wbytes = n * (wide ? 8 : 4);
  at::Tensor host = at::empty({n * 8 + (wbytes + 7) / 8 * 8}, at::TensorOptions().dtype(at::kByte));
  uint8_t* base = host.data_ptr<uint8_t>();
  TPU_CHECK_STATUS(tpu_interp_table(&spec, taps, reinterpret_cast<int64_t*>(base), base + n * 8));
  const at::Tensor dev = host.to(device);
  const at::Tensor idx = dev.narrow(0, 0, n * 8).view(at::kLong).view({spec.out_size, taps});
  const at::Tensor w =
      dev.narrow(0, n * 8, wbytes).view(wide ? at::kDouble : at::kFloat).view({spec.out_size, taps});
  return {idx, w};
}

// One INTERP or INTERP_BACKWARD record along `dim`.
void submit_interp(tpu_index_fn fn, const at::Tensor& in, const at::Tensor& out, int64_t dim,
                   const std::pair<at::Tensor, at::Tensor>& table, const char* name) {
  tpu_op rec{};
  rec.code = TPU_OP_INDEX;
  rec.fn = fn;
  rec.n_in = 3;
  rec.in[0] = describe(in, name);
  rec.in[1] = describe(table.first, name);
  rec.in[2] = describe(table.second, name);
  rec.out = describe(out, name);
  rec.p.index.dim = static_cast<int32_t>(dim);
  submit(out.device().index(), rec, name);
}

tpu_interp_spec make_spec(tpu_interp_mode mode, int64_t in_size, int64_t out_size, bool align_corners, O scale,
                          at::ScalarType type, bool round_weights, bool backward) {
  tpu_interp_spec spec{};
  spec.mode = mode;
  spec.in_size = in_size;
  spec.out_size = out_size;
  spec.align_corners = align_corners;
  spec.scale = scale.has_value() ? *scale : 0.0;
  TORCH_INTERNAL_ASSERT(to_tpu_dtype(type, &spec.dtype));
  spec.round_weights = round_weights;
  spec.backward = backward;
  return spec;
}

// Whether CPU's forward stores f16/bf16 weights in the dtype: its generic
// kernel does; the channels-last kernel it picks for bilinear and
// trilinear images (channels-last with more than 3 channels, or a 2-d
// output of at most 128 rows plus columns) keeps them in float.
bool cpu_rounds_weights(T input, const at::Tensor& out, tpu_interp_mode mode) {
  if (is_aa(mode)) return false;  // float32 and float64 only: nothing to round
  if (mode == TPU_INTERP_CUBIC || input.dim() == 3) return true;
  if (input.dim() == 4)
    return !((input.is_contiguous(at::MemoryFormat::ChannelsLast) && input.size(1) > 3) ||
             out.size(2) + out.size(3) <= 128);
  return !(input.is_contiguous(at::MemoryFormat::ChannelsLast3d) && input.size(1) > 3);
}

// out = interpolation of input [N, C, spatial...] to out's sizes, one
// pass per spatial dim from the last. The antialiased modes skip dims
// whose size does not change (CPU does; the plain modes run them, and
// their weights 1 and 0 turn an infinity into NaN there, as on CPU).
void interp_forward(T input, const at::Tensor& out, tpu_interp_mode mode, bool align_corners,
                    const std::vector<O>& scales, const char* name) {
  check_interp_dtype(input.scalar_type(), mode, name);
  if (out.numel() == 0) return;
  check_in_storage(input, name);
  const int64_t n = static_cast<int64_t>(scales.size());
  std::vector<int64_t> dims;
  for (int64_t k = n - 1; k >= 0; k--)
    if (!is_aa(mode) || input.size(2 + k) != out.size(2 + k)) dims.push_back(2 + k);
  if (dims.empty()) {
    out.copy_(input);
    return;
  }
  const at::ScalarType type = input.scalar_type();
  const at::ScalarType between = at::isReducedFloatingType(type) ? at::kFloat : type;
  const bool round_weights = cpu_rounds_weights(input, out, mode);
  at::Tensor cur = input;
  for (size_t i = 0; i < dims.size(); i++) {
    const int64_t d = dims[i];
    at::Tensor next = out;
    if (i + 1 < dims.size()) {
      std::vector<int64_t> sizes(cur.sizes().begin(), cur.sizes().end());
      sizes[static_cast<size_t>(d)] = out.size(d);
      next = at::empty(sizes, cur.options().dtype(between).memory_format(input.suggest_memory_format()));
    }
    const tpu_interp_spec spec = make_spec(mode, cur.size(d), out.size(d), align_corners,
                                           scales[static_cast<size_t>(d - 2)], type, round_weights, false);
    submit_interp(TPU_INDEX_INTERP, cur, next, d, device_table(spec, out.device()), name);
    cur = next;
  }
}

// grad_input = the adjoint of the forward applied to grad_output, dim by
// dim (each dim's table as CPU's backward computes it), summed in f32
// (f64); every dim runs, as CPU's backward does not skip any. CPU's
// bicubic backward copies when no size changes.
void interp_backward(T grad_output, const at::Tensor& grad_input, tpu_interp_mode mode, bool align_corners,
                     const std::vector<O>& scales, const char* name) {
  check_interp_dtype(grad_output.scalar_type(), mode, name);
  if (grad_input.numel() == 0) return;
  check_in_storage(grad_output, name);
  const int64_t n = static_cast<int64_t>(scales.size());
  bool same = true;
  for (int64_t k = 0; k < n; k++) same = same && grad_output.size(2 + k) == grad_input.size(2 + k);
  if (same && mode == TPU_INTERP_CUBIC) {
    grad_input.copy_(grad_output);
    return;
  }
  const at::ScalarType type = grad_output.scalar_type();
  const at::ScalarType sums = type == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor cur = grad_output;
  for (int64_t k = 0; k < n; k++) {
    const int64_t d = 2 + k;
    at::Tensor next;
    if (k + 1 == n && grad_input.scalar_type() == sums) {
      next = grad_input;
    } else {
      std::vector<int64_t> sizes(cur.sizes().begin(), cur.sizes().end());
      sizes[static_cast<size_t>(d)] = grad_input.size(d);
      next = at::empty(sizes, cur.options().dtype(sums).memory_format(grad_output.suggest_memory_format()));
    }
    const tpu_interp_spec spec = make_spec(mode, grad_input.size(d), grad_output.size(d), align_corners,
                                           scales[static_cast<size_t>(k)], type, false, true);
    submit_interp(TPU_INDEX_INTERP_BACKWARD, cur, next, d, device_table(spec, grad_input.device()), name);
    cur = next;
  }
  if (!cur.is_same(grad_input)) grad_input.copy_(cur);
}

// The registrations: Meta is the op's structured meta, Mode its
// interpolation, Fallback the op CPU runs for uint8 input (void: none).
template <class Meta, tpu_interp_mode Mode, OpName Name, class Fallback, class... Scales>
struct Interp {
  static at::Tensor forward(T self, A output_size, bool align_corners, Scales... scales) {
    if constexpr (!std::is_void_v<Fallback>) {
      if (self.scalar_type() == at::kByte)
        return at::native::call_fallback_fn_symint<&cpu_fallback, Fallback>::call(
            self, c10::fromIntArrayRefSlow(output_size), align_corners, scales...);
    }
    Structured<Meta> op(OutputKind::Functional, nullptr, Name.str);
    op.meta(self, output_size, align_corners, scales...);
    interp_forward(self, op.output_, Mode, align_corners, {scales...}, Name.str);
    return std::move(op.output_);
  }
};

template <class Meta, tpu_interp_mode Mode, OpName Name, class Fallback, class... Scales>
struct InterpOut {
  static at::Tensor& forward(T self, A output_size, bool align_corners, Scales... scales, at::Tensor& out) {
    if constexpr (!std::is_void_v<Fallback>) {
      if (self.scalar_type() == at::kByte)
        return at::native::call_fallback_fn_symint<&cpu_fallback, Fallback>::call(
            self, c10::fromIntArrayRefSlow(output_size), align_corners, scales..., out);
    }
    Structured<Meta> op(OutputKind::Out, &out, Name.str);
    op.meta(self, output_size, align_corners, scales...);
    interp_forward(self, out, Mode, align_corners, {scales...}, Name.str);
    return out;
  }
};

template <class Meta, tpu_interp_mode Mode, OpName Name, class... Scales>
struct InterpBackward {
  static at::Tensor backward(T grad, A output_size, A input_size, bool align_corners, Scales... scales) {
    Structured<Meta> op(OutputKind::Functional, nullptr, Name.str);
    op.meta(grad, output_size, input_size, align_corners, scales...);
    interp_backward(grad, op.output_, Mode, align_corners, {scales...}, Name.str);
    return std::move(op.output_);
  }
  static at::Tensor& backward_out(T grad, A output_size, A input_size, bool align_corners, Scales... scales,
                                  at::Tensor& grad_input) {
    Structured<Meta> op(OutputKind::Out, &grad_input, Name.str);
    op.meta(grad, output_size, input_size, align_corners, scales...);
    interp_backward(grad, grad_input, Mode, align_corners, {scales...}, Name.str);
    return grad_input;
  }
};

// ---- nearest and nearest-exact.
//
// Output position i of a dim reads input min(floor((i + offset) * scale),
// in - 1), offset 0 (nearest) or 0.5 (nearest-exact), computed in float
// as CPU computes it (scale = 1 / scale_factor if given, else in / out).
// The forward is one gather (index_select) per spatial dim; the backward
// adds grad_output into grad_input through one index over all spatial
// dims at once, in output order, which is the order CPU's backward adds
// in, into f32 sums for f16/bf16 as CPU keeps them.

at::Tensor nearest_source(int64_t in_size, int64_t out_size, O scale, bool exact, const at::Device& device) {
  const float s = scale.has_value() && *scale > 0 ? static_cast<float>(1.0 / *scale)
                                                  : static_cast<float>(in_size) / static_cast<float>(out_size);
  at::Tensor pos = at::arange(out_size, at::TensorOptions().dtype(at::kFloat).device(device));
  if (exact) pos = pos.add(0.5);
  return pos.mul(s).floor().clamp_max(static_cast<double>(in_size - 1)).to(at::kLong);
}

void check_nearest_dtype(at::ScalarType type, bool backward, const char* name) {
  const bool ok = at::isFloatingType(type) || (!backward && type == at::kByte);
  TORCH_CHECK_NOT_IMPLEMENTED(ok, "\"", name, "\" not implemented for '", at::toString(type), "'");
}

void nearest_forward(T input, const at::Tensor& out, bool exact, const std::vector<O>& scales, const char* name) {
  check_nearest_dtype(input.scalar_type(), false, name);
  if (out.numel() == 0) return;
  const int64_t n = static_cast<int64_t>(scales.size());
  at::Tensor cur = input;
  for (int64_t k = n - 1; k >= 0; k--) {
    const int64_t d = 2 + k;
    const at::Tensor src = nearest_source(input.size(d), out.size(d), scales[static_cast<size_t>(k)], exact,
                                          out.device());
    if (k == 0) {
      at::index_select_out(const_cast<at::Tensor&>(out), cur, d, src);
    } else {
      cur = cur.index_select(d, src);
    }
  }
}

void nearest_backward(T grad_output, const at::Tensor& grad_input, bool exact, const std::vector<O>& scales,
                      const char* name) {
  check_nearest_dtype(grad_output.scalar_type(), true, name);
  if (grad_input.numel() == 0) return;
  const int64_t n = static_cast<int64_t>(scales.size());
  // flat[o] = the input cell (over the spatial dims, row-major) output cell o reads.
  at::Tensor flat;
  for (int64_t k = 0; k < n; k++) {
    const int64_t d = 2 + k;
    at::Tensor src = nearest_source(grad_input.size(d), grad_output.size(d), scales[static_cast<size_t>(k)], exact,
                                    grad_input.device());
    flat = k == 0 ? src : (flat.unsqueeze(-1) * grad_input.size(d) + src).flatten();
  }
  const at::ScalarType type = grad_output.scalar_type();
  const at::ScalarType sums = at::isReducedFloatingType(type) ? at::kFloat : type;
  const int64_t batch = grad_input.size(0), channels = grad_input.size(1);
  const bool direct = grad_input.is_contiguous() && grad_input.scalar_type() == sums;
  at::Tensor acc = direct ? grad_input : at::empty(grad_input.sizes(), grad_input.options().dtype(sums));
  acc.zero_();
  acc.view({batch, channels, -1}).index_add_(2, flat, grad_output.to(sums).reshape({batch, channels, -1}));
  if (!direct) grad_input.copy_(acc);
}

template <class Meta, bool Exact, OpName Name, class... Scales>
struct Nearest {
  static at::Tensor forward(T self, A output_size, Scales... scales) {
    Structured<Meta> op(OutputKind::Functional, nullptr, Name.str);
    op.meta(self, output_size, scales...);
    nearest_forward(self, op.output_, Exact, {scales...}, Name.str);
    return std::move(op.output_);
  }
  static at::Tensor& forward_out(T self, A output_size, Scales... scales, at::Tensor& out) {
    Structured<Meta> op(OutputKind::Out, &out, Name.str);
    op.meta(self, output_size, scales...);
    nearest_forward(self, out, Exact, {scales...}, Name.str);
    return out;
  }
};

template <class Meta, bool Exact, OpName Name, class... Scales>
struct NearestBackward {
  static at::Tensor backward(T grad, A output_size, A input_size, Scales... scales) {
    Structured<Meta> op(OutputKind::Functional, nullptr, Name.str);
    op.meta(grad, output_size, input_size, scales...);
    nearest_backward(grad, op.output_, Exact, {scales...}, Name.str);
    return std::move(op.output_);
  }
  static at::Tensor& backward_out(T grad, A output_size, A input_size, Scales... scales, at::Tensor& grad_input) {
    Structured<Meta> op(OutputKind::Out, &grad_input, Name.str);
    op.meta(grad, output_size, input_size, scales...);
    nearest_backward(grad, grad_input, Exact, {scales...}, Name.str);
    return grad_input;
  }
};

// ---- adaptive max pooling.

// t [.., D?, H, W] (2-d pooling: no D) as [N, C, D, H, W].
at::Tensor as_5d(const at::Tensor& t, int pooled_dims, int64_t batched_rank) {
  at::Tensor r = t.dim() == batched_rank ? t : t.unsqueeze(0);
  return pooled_dims == 2 ? r.unsqueeze(2) : r;
}

template <int Dims>
void adaptive_max_kernel(T self, const at::Tensor& out, const at::Tensor& indices, const char* name) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()), "\"", name, "\" not implemented for '",
                              at::toString(self.scalar_type()), "'");
  if (out.numel() == 0) return;
  check_in_storage(self, name);
  const int64_t batched = Dims + 2;
  tpu_op rec{};
  rec.code = TPU_OP_WINDOW;
  rec.fn = TPU_WINDOW_ADAPTIVE_MAX_POOL;
  rec.n_in = 1;
  rec.n_aux = 1;
  rec.in[0] = describe(as_5d(self, Dims, batched), name);
  rec.out = describe(as_5d(out, Dims, batched), name);
  rec.aux[0] = describe(as_5d(indices, Dims, batched), name);
  submit(self.device().index(), rec, name);
}

template <class Meta, int Dims, OpName Name>
std::tuple<at::Tensor, at::Tensor> adaptive_max_pool(T self, A output_size) {
  Structured<Meta> op(OutputKind::Functional, nullptr, Name.str);
  op.meta(self, output_size);
  adaptive_max_kernel<Dims>(self, op.outputs_[0], op.outputs_[1], Name.str);
  return {std::move(op.outputs_[0]), std::move(op.outputs_[1])};
}

template <class Meta, int Dims, OpName Name>
std::tuple<at::Tensor&, at::Tensor&> adaptive_max_pool_out(T self, A output_size, at::Tensor& out,
                                                           at::Tensor& indices) {
  Structured<Meta> op(OutputKind::Out, {out, indices}, Name.str);
  op.meta(self, output_size);
  adaptive_max_kernel<Dims>(self, out, indices, Name.str);
  return {out, indices};
}

// Each plane (the last Dims dims of grad_input): grad_input[index] +=
// grad at every bin whose maximum was there, in bin order. A grad_input
// that is not contiguous (the meta follows the input's layout) is filled
// through a contiguous one.
template <int Dims>
void adaptive_max_backward_kernel(T grad_output, T self, T indices, const at::Tensor& grad_input,
                                  const char* name) {
  check_same_device(name, self.device(), {{"grad_output", &grad_output}, {"indices", &indices}});
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(grad_output.scalar_type()), "\"", name,
                              "\" not implemented for '", at::toString(grad_output.scalar_type()), "'");
  at::Tensor target = grad_input.is_contiguous() ? grad_input : at::empty(grad_input.sizes(), grad_input.options());
  target.zero_();
  if (grad_output.numel() > 0 && target.numel() > 0) {
    int64_t plane = 1;
    for (int k = 1; k <= Dims; k++) plane *= target.size(-k);
    const int64_t planes = target.numel() / plane;
    target.view({planes, plane}).scatter_add_(1, indices.reshape({planes, -1}), grad_output.reshape({planes, -1}));
  }
  if (!target.is_same(grad_input)) grad_input.copy_(target);
}

template <class Meta, int Dims, OpName Name>
at::Tensor adaptive_max_pool_backward(T grad_output, T self, T indices) {
  Structured<Meta> op(OutputKind::Functional, nullptr, Name.str);
  op.meta(grad_output, self, indices);
  adaptive_max_backward_kernel<Dims>(grad_output, self, indices, op.output_, Name.str);
  return std::move(op.output_);
}

template <class Meta, int Dims, OpName Name>
at::Tensor& adaptive_max_pool_backward_out(T grad_output, T self, T indices, at::Tensor& grad_input) {
  Structured<Meta> op(OutputKind::Out, &grad_input, Name.str);
  op.meta(grad_output, self, indices);
  adaptive_max_backward_kernel<Dims>(grad_output, self, indices, grad_input, Name.str);
  return grad_input;
}

namespace am = at::meta;

using Linear1d = Interp<am::structured_upsample_linear1d, TPU_INTERP_LINEAR, "upsample_linear1d", void, O>;
using Linear1dOut = InterpOut<am::structured_upsample_linear1d, TPU_INTERP_LINEAR, "upsample_linear1d", void, O>;
using Linear1dBack =
    InterpBackward<am::structured_upsample_linear1d_backward, TPU_INTERP_LINEAR, "upsample_linear1d_backward", O>;
using Bilinear2d = Interp<am::structured_upsample_bilinear2d, TPU_INTERP_LINEAR, "upsample_bilinear2d",
                          at::_ops::upsample_bilinear2d, O, O>;
using Bilinear2dOut = InterpOut<am::structured_upsample_bilinear2d, TPU_INTERP_LINEAR, "upsample_bilinear2d",
                                at::_ops::upsample_bilinear2d_out, O, O>;
using Bilinear2dBack = InterpBackward<am::structured_upsample_bilinear2d_backward, TPU_INTERP_LINEAR,
                                      "upsample_bilinear2d_backward", O, O>;
using Bicubic2d = Interp<am::structured_upsample_bicubic2d, TPU_INTERP_CUBIC, "upsample_bicubic2d",
                         at::_ops::upsample_bicubic2d, O, O>;
using Bicubic2dOut = InterpOut<am::structured_upsample_bicubic2d, TPU_INTERP_CUBIC, "upsample_bicubic2d",
                               at::_ops::upsample_bicubic2d_out, O, O>;
using Bicubic2dBack = InterpBackward<am::structured_upsample_bicubic2d_backward, TPU_INTERP_CUBIC,
                                     "upsample_bicubic2d_backward", O, O>;
using Trilinear3d = Interp<am::structured_upsample_trilinear3d, TPU_INTERP_LINEAR, "upsample_trilinear3d", void, O, O, O>;
using Trilinear3dOut =
    InterpOut<am::structured_upsample_trilinear3d, TPU_INTERP_LINEAR, "upsample_trilinear3d", void, O, O, O>;
using Trilinear3dBack = InterpBackward<am::structured_upsample_trilinear3d_backward, TPU_INTERP_LINEAR,
                                       "upsample_trilinear3d_backward", O, O, O>;
using BilinearAA = Interp<am::structured__upsample_bilinear2d_aa, TPU_INTERP_LINEAR_AA, "_upsample_bilinear2d_aa",
                          at::_ops::_upsample_bilinear2d_aa, O, O>;
using BilinearAAOut = InterpOut<am::structured__upsample_bilinear2d_aa, TPU_INTERP_LINEAR_AA,
                                "_upsample_bilinear2d_aa", at::_ops::_upsample_bilinear2d_aa_out, O, O>;
using BilinearAABack = InterpBackward<am::structured__upsample_bilinear2d_aa_backward, TPU_INTERP_LINEAR_AA,
                                      "_upsample_bilinear2d_aa_backward", O, O>;
using BicubicAA = Interp<am::structured__upsample_bicubic2d_aa, TPU_INTERP_CUBIC_AA, "_upsample_bicubic2d_aa",
                         at::_ops::_upsample_bicubic2d_aa, O, O>;
using BicubicAAOut = InterpOut<am::structured__upsample_bicubic2d_aa, TPU_INTERP_CUBIC_AA, "_upsample_bicubic2d_aa",
                               at::_ops::_upsample_bicubic2d_aa_out, O, O>;
using BicubicAABack = InterpBackward<am::structured__upsample_bicubic2d_aa_backward, TPU_INTERP_CUBIC_AA,
                                     "_upsample_bicubic2d_aa_backward", O, O>;

using Nearest1d = Nearest<am::structured_upsample_nearest1d, false, "upsample_nearest1d", O>;
using Nearest1dBack = NearestBackward<am::structured_upsample_nearest1d_backward, false, "upsample_nearest1d_backward", O>;
using Nearest2d = Nearest<am::structured_upsample_nearest2d, false, "upsample_nearest2d", O, O>;
using Nearest2dBack = NearestBackward<am::structured_upsample_nearest2d_backward, false, "upsample_nearest2d_backward", O, O>;
using Nearest3d = Nearest<am::structured_upsample_nearest3d, false, "upsample_nearest3d", O, O, O>;
using Nearest3dBack = NearestBackward<am::structured_upsample_nearest3d_backward, false, "upsample_nearest3d_backward", O, O, O>;
using Exact1d = Nearest<am::structured__upsample_nearest_exact1d, true, "_upsample_nearest_exact1d", O>;
using Exact1dBack = NearestBackward<am::structured__upsample_nearest_exact1d_backward, true, "_upsample_nearest_exact1d_backward", O>;
using Exact2d = Nearest<am::structured__upsample_nearest_exact2d, true, "_upsample_nearest_exact2d", O, O>;
using Exact2dBack = NearestBackward<am::structured__upsample_nearest_exact2d_backward, true, "_upsample_nearest_exact2d_backward", O, O>;
using Exact3d = Nearest<am::structured__upsample_nearest_exact3d, true, "_upsample_nearest_exact3d", O, O, O>;
using Exact3dBack = NearestBackward<am::structured__upsample_nearest_exact3d_backward, true, "_upsample_nearest_exact3d_backward", O, O, O>;

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
#define TPU_INTERP(op, Fwd, FwdOut, Back)                             \
  m.impl(op, Fwd::forward);                                           \
  m.impl(op ".out", FwdOut::forward);                                 \
  m.impl(op "_backward", Back::backward);                             \
  m.impl(op "_backward.grad_input", Back::backward_out)
  TPU_INTERP("upsample_linear1d", Linear1d, Linear1dOut, Linear1dBack);
  TPU_INTERP("upsample_bilinear2d", Bilinear2d, Bilinear2dOut, Bilinear2dBack);
  TPU_INTERP("upsample_bicubic2d", Bicubic2d, Bicubic2dOut, Bicubic2dBack);
  TPU_INTERP("upsample_trilinear3d", Trilinear3d, Trilinear3dOut, Trilinear3dBack);
  TPU_INTERP("_upsample_bilinear2d_aa", BilinearAA, BilinearAAOut, BilinearAABack);
  TPU_INTERP("_upsample_bicubic2d_aa", BicubicAA, BicubicAAOut, BicubicAABack);
#undef TPU_INTERP
  m.impl("upsample_nearest1d", Nearest1d::forward);
  m.impl("upsample_nearest1d.out", Nearest1d::forward_out);
  m.impl("upsample_nearest1d_backward", Nearest1dBack::backward);
  m.impl("upsample_nearest1d_backward.grad_input", Nearest1dBack::backward_out);
  m.impl("upsample_nearest2d", Nearest2d::forward);
  m.impl("upsample_nearest2d.out", Nearest2d::forward_out);
  m.impl("upsample_nearest2d_backward", Nearest2dBack::backward);
  m.impl("upsample_nearest2d_backward.grad_input", Nearest2dBack::backward_out);
  m.impl("upsample_nearest3d", Nearest3d::forward);
  m.impl("upsample_nearest3d.out", Nearest3d::forward_out);
  m.impl("upsample_nearest3d_backward", Nearest3dBack::backward);
  m.impl("upsample_nearest3d_backward.grad_input", Nearest3dBack::backward_out);
  m.impl("_upsample_nearest_exact1d", Exact1d::forward);
  m.impl("_upsample_nearest_exact1d.out", Exact1d::forward_out);
  m.impl("_upsample_nearest_exact1d_backward", Exact1dBack::backward);
  m.impl("_upsample_nearest_exact1d_backward.grad_input", Exact1dBack::backward_out);
  m.impl("_upsample_nearest_exact2d", Exact2d::forward);
  m.impl("_upsample_nearest_exact2d.out", Exact2d::forward_out);
  m.impl("_upsample_nearest_exact2d_backward", Exact2dBack::backward);
  m.impl("_upsample_nearest_exact2d_backward.grad_input", Exact2dBack::backward_out);
  m.impl("_upsample_nearest_exact3d", Exact3d::forward);
  m.impl("_upsample_nearest_exact3d.out", Exact3d::forward_out);
  m.impl("_upsample_nearest_exact3d_backward", Exact3dBack::backward);
  m.impl("_upsample_nearest_exact3d_backward.grad_input", Exact3dBack::backward_out);
  using am::structured_adaptive_max_pool2d;
  using am::structured_adaptive_max_pool2d_backward;
  using am::structured_adaptive_max_pool3d;
  using am::structured_adaptive_max_pool3d_backward;
  m.impl("adaptive_max_pool2d", adaptive_max_pool<structured_adaptive_max_pool2d, 2, "adaptive_max_pool2d">);
  m.impl("adaptive_max_pool2d.out", adaptive_max_pool_out<structured_adaptive_max_pool2d, 2, "adaptive_max_pool2d">);
  m.impl("adaptive_max_pool2d_backward",
         adaptive_max_pool_backward<structured_adaptive_max_pool2d_backward, 2, "adaptive_max_pool2d_backward">);
  m.impl("adaptive_max_pool2d_backward.grad_input",
         adaptive_max_pool_backward_out<structured_adaptive_max_pool2d_backward, 2, "adaptive_max_pool2d_backward">);
  m.impl("adaptive_max_pool3d", adaptive_max_pool<structured_adaptive_max_pool3d, 3, "adaptive_max_pool3d">);
  m.impl("adaptive_max_pool3d.out", adaptive_max_pool_out<structured_adaptive_max_pool3d, 3, "adaptive_max_pool3d">);
  m.impl("adaptive_max_pool3d_backward",
         adaptive_max_pool_backward<structured_adaptive_max_pool3d_backward, 3, "adaptive_max_pool3d_backward">);
  m.impl("adaptive_max_pool3d_backward.grad_input",
         adaptive_max_pool_backward_out<structured_adaptive_max_pool3d_backward, 3, "adaptive_max_pool3d_backward">);
}

}  // namespace torch_tpu
