// mm, addmm and bmm (functional, out= and in-place) as TPU_OP_MATMUL
// records. f32 operands follow torch.set_float32_matmul_precision: highest
// is full f32, high and medium use the matrix unit's bf16 passes.
// Integer matrices have no native kernel and take the CPU fallback.
#include <ATen/MemoryOverlap.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/addmv_meta.h>
#include <ATen/ops/addr_native.h>
#include <ATen/ops/addmv_ops.h>
#include <ATen/ops/dot_ops.h>
#include <ATen/ops/bmm_meta.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/mm_ops.h>
#include <torch/library.h>

#include "core/fallback.h"
#include "core/glue.h"
#include "core/structured.h"

namespace torch_tpu {
namespace {

bool native_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

tpu_precision current_precision() {
  switch (at::globalContext().float32MatmulPrecision()) {
    case at::Float32MatmulPrecision::HIGH: return TPU_PRECISION_HIGH;
    case at::Float32MatmulPrecision::MEDIUM: return TPU_PRECISION_MEDIUM;
    default: return TPU_PRECISION_HIGHEST;
  }
}

void check_mm(const char* name, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 2, name, ": self must be a matrix, got ", a.dim(), "-D");
  TORCH_CHECK(b.dim() == 2, name, ": mat2 must be a matrix, got ", b.dim(), "-D");
  TORCH_CHECK(a.size(1) == b.size(0), name, ": mat1 and mat2 shapes cannot be multiplied (", a.size(0), "x",
              a.size(1), " and ", b.size(0), "x", b.size(1), ")");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), name, ": expected mat1 and mat2 to have the same dtype, but got: ",
              a.scalar_type(), " != ", b.scalar_type());
  TORCH_CHECK(a.device() == b.device(), "Expected all tensors to be on the same device, but found at least two devices, ",
              a.device(), " and ", b.device(), "! (when checking arguments for ", name, ")");
}

// out = beta * bias + alpha * (a @ b); bias may be undefined (plain mm).
void run(const char* name, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias,
         const c10::Scalar& beta, const c10::Scalar& alpha) {
  if (out.numel() == 0) return;
  at::assert_no_internal_overlap(out);
  tpu_op op{};
  op.code = TPU_OP_MATMUL;
  op.fn = bias.defined() ? TPU_MATMUL_ADDMM : TPU_MATMUL_MM;
  op.n_in = bias.defined() ? 3 : 2;
  op.out = describe(out, name);
  op.in[0] = describe(a, name);
  op.in[1] = describe(b, name);
  if (bias.defined()) op.in[2] = describe(bias.expand(out.sizes()), name);
  // Products of every dtype but double finish in float: alpha and beta
  // become floats as on PyTorch's CPU (an error if one overflows; one
  // that rounds to 0 counts as 0, so a NaN bias or product stays unread).
  const bool wide = out.scalar_type() == at::kDouble;
  op.p.mm.alpha = wide ? alpha.toDouble() : static_cast<double>(alpha.to<float>());
  op.p.mm.beta = wide ? beta.toDouble() : static_cast<double>(beta.to<float>());
  op.p.mm.precision = current_precision();
  submit(out.device().index(), op, name);
}

// Writes into `out`; through a temporary when out aliases an input, since
// the kernel reads inputs while writing out.
void run_checked(const char* name, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                 const at::Tensor& bias, const c10::Scalar& beta, const c10::Scalar& alpha) {
  const bool aliased = out.is_alias_of(a) || out.is_alias_of(b) || (bias.defined() && out.is_alias_of(bias));
  if (!aliased) {
    run(name, out, a, b, bias, beta, alpha);
    return;
  }
  at::Tensor tmp = at::empty(out.sizes(), out.options());
  run(name, tmp, a, b, bias, beta, alpha);
  copy_tensor(out, tmp, false);
}

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  check_mm("mm", a, b);
  if (!native_dtype(a.scalar_type()))
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::mm>::call(a, b);
  at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options());
  run("aten::mm", out, a, b, at::Tensor(), 0, 1);
  return out;
}

at::Tensor& mm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  check_mm("mm", a, b);
  if (!native_dtype(a.scalar_type()))
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::mm_out>::call(a, b, out);
  TORCH_CHECK(out.scalar_type() == a.scalar_type(), "mm: expected out dtype ", a.scalar_type(), " but got ",
              out.scalar_type());
  TORCH_CHECK(out.device() == a.device(), "mm: expected out on ", a.device(), ", got ", out.device());
  at::native::resize_output(out, {a.size(0), b.size(1)});
  run_checked("aten::mm.out", out, a, b, at::Tensor(), 0, 1);
  return out;
}

void check_bias(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(bias.scalar_type() == a.scalar_type(), "addmm: self and mat2 must have the same dtype, but got ",
              bias.scalar_type(), " and ", a.scalar_type());
  TORCH_CHECK(bias.device() == a.device(), "Expected all tensors to be on the same device, but found at least two devices, ",
              a.device(), " and ", bias.device(), "! (when checking arguments for addmm)");
  const std::vector<int64_t> shape{a.size(0), b.size(1)};
  TORCH_CHECK(bias.dim() <= 2 && at::is_expandable_to(bias.sizes(), shape), "addmm: the bias of shape ",
              bias.sizes(), " cannot be broadcast to the product's shape ", c10::IntArrayRef(shape));
}

at::Tensor addmm(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                 const c10::Scalar& alpha) {
  check_mm("addmm", a, b);
  check_bias(bias, a, b);
  if (!native_dtype(a.scalar_type()))
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::addmm>::call(bias, a, b, beta, alpha);
  at::Tensor out = at::empty({a.size(0), b.size(1)}, a.options());
  run("aten::addmm", out, a, b, bias, beta, alpha);
  return out;
}

at::Tensor& addmm_out(const at::Tensor& bias, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                      const c10::Scalar& alpha, at::Tensor& out) {
  check_mm("addmm", a, b);
  check_bias(bias, a, b);
  if (!native_dtype(a.scalar_type()))
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::addmm_out>::call(bias, a, b, beta, alpha, out);
  TORCH_CHECK(out.scalar_type() == a.scalar_type(), "addmm: expected out dtype ", a.scalar_type(), " but got ",
              out.scalar_type());
  TORCH_CHECK(out.device() == a.device(), "addmm: expected out on ", a.device(), ", got ", out.device());
  at::native::resize_output(out, {a.size(0), b.size(1)});
  run_checked("aten::addmm.out", out, a, b, bias, beta, alpha);
  return out;
}

at::Tensor& addmm_(at::Tensor& self, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                   const c10::Scalar& alpha) {
  check_mm("addmm_", a, b);
  check_bias(self, a, b);
  TORCH_CHECK(self.sizes() == c10::IntArrayRef({a.size(0), b.size(1)}), "addmm_: self has shape ", self.sizes(),
              " but the product has shape [", a.size(0), ", ", b.size(1), "]");
  if (!native_dtype(a.scalar_type()))
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::addmm_>::call(self, a, b, beta, alpha);
  run_checked("aten::addmm_", self, a, b, self, beta, alpha);
  return self;
}

// bmm: PyTorch's structured meta checks the operands and allocates (or
// resizes) out; each batch is one MATMUL record (a batched record with a
// batch dim in the kernel is future work). Through a temporary when out
// aliases an input.
void bmm_batches(const char* name, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  if (out.numel() == 0) return;
  if (a.size(2) == 0) {  // an empty inner dim: the product is zero
    out.zero_();
    return;
  }
  const bool aliased = out.is_alias_of(a) || out.is_alias_of(b);
  at::Tensor dst = aliased ? at::empty(out.sizes(), out.options()) : out;
  for (int64_t i = 0; i < a.size(0); i++) run(name, dst[i], a[i], b[i], at::Tensor(), 0, 1);
  if (aliased) copy_tensor(out, dst, false);
}

at::Tensor bmm(const at::Tensor& a, const at::Tensor& b) {
  if (!native_dtype(a.scalar_type()))
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::bmm>::call(a, b);
  Structured<at::meta::structured_bmm> op(OutputKind::Functional, nullptr, "aten::bmm");
  op.meta(a, b);
  bmm_batches("aten::bmm", op.output_, a, b);
  return std::move(op.output_);
}

at::Tensor& bmm_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  if (!native_dtype(a.scalar_type()))
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::bmm_out>::call(a, b, out);
  Structured<at::meta::structured_bmm> op(OutputKind::Out, &out, "aten::bmm");
  op.meta(a, b);
  bmm_batches("aten::bmm.out", out, a, b);
  return out;
}

// addmv (and mv, matrix @ vector, through it): an [n, 1] matrix product,
// with the bias only when beta != 0 (PyTorch ignores self then, NaN too).
void addmv_kernel(Structured<at::meta::structured_addmv>& op, const at::Tensor& self, const at::Tensor& mat,
                  const at::Tensor& vec, const c10::Scalar& beta, const c10::Scalar& alpha) {
  const char* name = "aten::addmv";
  const at::Tensor& out = op.output_;
  if (out.numel() == 0) return;
  const bool use_bias = beta.toComplexDouble() != 0.0;
  if (mat.size(1) == 0) {  // an empty inner dim: only the bias remains
    if (use_bias)
      copy_tensor(out, self.expand(out.sizes()) * beta, false);
    else
      out.zero_();
    return;
  }
  const at::Tensor out2 = out.unsqueeze(1), vec2 = vec.unsqueeze(1);
  const at::Tensor bias = use_bias ? self.expand(out.sizes()).unsqueeze(1) : at::Tensor();
  run_checked(name, out2, mat, vec2, bias, beta, use_bias ? alpha : c10::Scalar(1));
  if (!use_bias && alpha.toComplexDouble() != 1.0) out.mul_(alpha);
}

// dot (and vdot, for real tensors): a [1, n] @ [n, 1] product.
at::Tensor dot(const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.dim() == 1 && b.dim() == 1, "1D tensors expected, but got ", a.dim(), "D and ", b.dim(),
              "D tensors");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "dot : expected both vectors to have same dtype, but found ",
              a.scalar_type(), " and ", b.scalar_type());
  TORCH_CHECK(a.numel() == b.numel(), "inconsistent tensor size, expected tensor [", a.numel(),
              "] and src [", b.numel(), "] to have the same number of elements, but got ", a.numel(), " and ",
              b.numel(), " elements respectively");
  if (!native_dtype(a.scalar_type()))  // integer vectors: the CPU kernel, as mm's
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::dot>::call(a, b);
  at::Tensor out = at::empty({}, a.options());
  if (a.numel() == 0) return out.zero_();
  run_checked("aten::dot", out.view({1, 1}), a.view({1, -1}), b.view({-1, 1}), at::Tensor(), 0, 1);
  return out;
}

using T = const at::Tensor&;
using S = const c10::Scalar&;

// addr: beta * self + alpha * outer(vec1, vec2) as one K = 1 product with
// the bias, so a float result is rounded once, as the CPU kernel computes
// it in the compute type. With beta == 0 self is ignored (NaN too), as in
// PyTorch. Mixed or integer dtypes, and alpha == 0 (whose 0 * NaN PyTorch
// keeps), take PyTorch's own composite form.
at::Tensor& addr_out(T self, T vec1, T vec2, S beta, S alpha, at::Tensor& out) {
  TORCH_CHECK(vec1.dim() == 1 && vec2.dim() == 1, "addr: Expected 1-D argument vec1 and vec2, but got ",
              vec1.dim(), "-D and ", vec2.dim(), "-D");
  const at::ScalarType st = self.scalar_type();
  if (!native_dtype(st) || vec1.scalar_type() != st || vec2.scalar_type() != st || out.scalar_type() != st ||
      alpha.toComplexDouble() == 0.0) {
    // (math_addr_out would dispatch back here through at::addr.)
    const at::Tensor r = at::native::math_addr(self, vec1, vec2, beta, alpha);
    at::native::resize_output(out, r.sizes());
    return out.copy_(r);
  }
  const int64_t m = vec1.size(0), n = vec2.size(0);
  const at::Tensor bias = beta.toComplexDouble() != 0.0 ? self.expand({m, n}) : at::zeros({}, self.options());
  at::native::resize_output(out, {m, n});
  run_checked("aten::addr", out, vec1.unsqueeze(1), vec2.unsqueeze(0), bias, beta, alpha);
  return out;
}

at::Tensor addr(T self, T vec1, T vec2, S beta, S alpha) {
  const at::ScalarType st = at::promote_types(at::promote_types(self.scalar_type(), vec1.scalar_type()), vec2.scalar_type());
  at::Tensor out = at::empty({0}, self.options().dtype(st));
  return addr_out(self, vec1, vec2, beta, alpha, out);
}

at::Tensor& addr_(at::Tensor& self, T vec1, T vec2, S beta, S alpha) {
  return addr_out(self, vec1, vec2, beta, alpha, self);
}

// Integer matrices take the CPU kernel, as mm's.
at::Tensor addmv(T self, T mat, T vec, S beta, S alpha) {
  if (!native_dtype(mat.scalar_type()))
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::addmv>::call(self, mat, vec, beta, alpha);
  return structured_functional<at::meta::structured_addmv, &addmv_kernel, "aten::addmv", T, T, T, S, S>(
      self, mat, vec, beta, alpha);
}

at::Tensor& addmv_out(T self, T mat, T vec, S beta, S alpha, at::Tensor& out) {
  if (!native_dtype(mat.scalar_type()))
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::addmv_out>::call(self, mat, vec, beta, alpha, out);
  return structured_out<at::meta::structured_addmv, &addmv_kernel, "aten::addmv", T, T, T, S, S>(
      self, mat, vec, beta, alpha, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("addr", addr);
  m.impl("addr_", addr_);
  m.impl("addr.out", addr_out);
  m.impl("addmv", addmv);
  m.impl("addmv.out", addmv_out);
  m.impl("dot", dot);
  m.impl("vdot", dot);
  m.impl("bmm", bmm);
  m.impl("bmm.out", bmm_out);
  m.impl("mm", mm);
  m.impl("mm.out", mm_out);
  m.impl("addmm", addmm);
  m.impl("addmm.out", addmm_out);
  m.impl("addmm_", addmm_);
}

}  // namespace torch_tpu
