// Element-wise ops as TPU_OP_UNARY / _BINARY / _TERNARY records, on PyTorch's
// own structured meta functions (csrc/core/structured.h): the meta builds
// a TensorIterator exactly as for CPU (broadcasting, type promotion, the
// result's layout, merged dims, argument checks), and submit_iterator
// turns it into one record whose common dtype is the iterator's. Ops that
// are not structured in PyTorch run PyTorch's own native function, which
// builds the iterator and calls the op's DispatchStub; the stub's
// PrivateUse1 slot (REGISTER_PRIVATEUSE1_DISPATCH) lands here too.
//
// A new element-wise op: a function row in src/kernels/op_table.c, its
// scalar body in src/kernels, and one line below.
#include <ATen/MemoryOverlap.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/Activation.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/abs_native.h>
#include <ATen/ops/hardswish_backward_native.h>
#include <ATen/ops/hardswish_native.h>
#include <ATen/ops/hardtanh_backward_native.h>
#include <ATen/ops/logical_and_native.h>
#include <ATen/ops/logical_not_native.h>
#include <ATen/ops/logical_or_native.h>
#include <ATen/ops/logical_xor_native.h>
#include <ATen/ops/nan_to_num_native.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/clamp_min_native.h>
#include <ATen/ops/clamp_max_meta.h>
#include <ATen/ops/clamp_max_native.h>
#include <ATen/ops/clamp_min_meta.h>
#include <ATen/ops/clamp_native.h>
#include <ATen/ops/exp_meta.h>
#include <ATen/ops/floor_divide_native.h>
#include <ATen/ops/mish_backward_native.h>
#include <ATen/ops/logit_native.h>
#include <ATen/ops/where_native.h>
#include <ATen/native/TensorCompare.h>
#include <torch/library.h>

#include <array>
#include <cfloat>
#include <functional>
#include <limits>
#include <string>

#include "core/glue.h"
#include "core/iterator.h"
#include "core/structured.h"

namespace torch_tpu {
namespace {

// "aten::<fn>" for messages, one static string per function.
template <tpu_op_code Code, int32_t Count>
const char* aten_name(int32_t fn) {
  static const auto names = [] {
    std::array<std::string, Count> n;
    for (int32_t i = 0; i < Count; i++) n[i] = std::string("aten::") + tpu_op_fn_name(Code, i);
    return n;
  }();
  return names[fn].c_str();
}

const char* op_label(tpu_op_code code, int32_t fn) {
  switch (code) {
    case TPU_OP_UNARY: return aten_name<TPU_OP_UNARY, TPU_UNARY_COUNT>(fn);
    case TPU_OP_BINARY: return aten_name<TPU_OP_BINARY, TPU_BINARY_COUNT>(fn);
    default: return aten_name<TPU_OP_TERNARY, TPU_TERNARY_COUNT>(fn);
  }
}

// The parameters of a record beyond its operands.
struct EwParams {
  tpu_scalar alpha{1.0, 1};
  std::array<tpu_scalar, 3> args{};
  tpu_rounding rounding = TPU_ROUND_NONE;
  // A second operand that is a host value, not an iterator operand (pow's
  // scalar exponent), already in the form the kernel reads.
  std::optional<tpu_scalar> other;
  bool b_opmath = false;  // see tpu_op.p.ew
  // The common dtype, where the iterator has none of its own (where).
  std::optional<at::ScalarType> common;
};

// Describes a built element-wise iterator (one output; up to three
// inputs) as a record of family `code`, function `fn`, and submits it.
void submit_iterator(at::TensorIteratorBase& iter, tpu_op_code code, int32_t fn, const EwParams& p = {}) {
  const char* name = op_label(code, fn);
  TORCH_INTERNAL_ASSERT(iter.noutputs() == 1 && iter.ninputs() >= 1 && iter.ninputs() <= 3);
  const at::ScalarType common = p.common.value_or(iter.maybe_common_dtype().value_or(iter.dtype(1)));
  tpu_dtype common_dt;
  for (int arg = 0; arg < iter.ntensors(); arg++) {
    tpu_dtype dt;
    TORCH_CHECK_NOT_IMPLEMENTED(to_tpu_dtype(iter.dtype(arg), &dt), name, ": tpu does not support dtype ",
                                iter.dtype(arg));
  }
  TORCH_CHECK_NOT_IMPLEMENTED(to_tpu_dtype(common, &common_dt), name, ": tpu does not support dtype ", common);
  // The CPU kernel refuses a dtype it has no loop for, with or without
  // elements; so does the device, with the same exception type.
  TORCH_CHECK_NOT_IMPLEMENTED(tpu_op_fn_takes(code, fn, common_dt), "\"", name, "\" not implemented for '", common,
                              "'");
  if (iter.numel() == 0) return;
  // A view outside its storage (one resized under it) is refused by the
  // record's own check at submit (tpu_op_check), as for every record.
  tpu_op op{};
  op.code = code;
  op.fn = fn;
  op.p.ew.common = common_dt;
  op.p.ew.alpha = p.alpha;
  op.p.ew.rounding = p.rounding;
  op.p.ew.b_opmath = p.b_opmath;
  for (int i = 0; i < 3; i++) op.p.ew.args[i] = p.args[i];
  const c10::Device device = iter.device(0);
  // The last operand of a BINARY or TERNARY record may be a host value:
  // a parameter the caller gives (p.other), or a host scalar tensor the
  // iterator holds, converted to the common dtype as TensorIterator would
  // convert it for CPU, or kept in the compute type where the CPU kernel
  // reads it that way (b_opmath).
  int n_tensors = 1 + iter.ninputs();
  const int last = iter.ninputs();
  if (p.other.has_value()) {
    TORCH_INTERNAL_ASSERT(code != TPU_OP_UNARY);
    op.p.ew.other = *p.other;
  } else if (code != TPU_OP_UNARY && last >= 2 && iter.is_cpu_scalar(last)) {
    const c10::Scalar value = at::Tensor(iter.tensor_base(last)).item();
    op.p.ew.other = to_tpu_scalar(value, p.b_opmath ? at::toOpMathType(common) : common, /*checked=*/false);
    n_tensors--;
  } else if (code == TPU_OP_BINARY && fn == TPU_BINARY_MUL && last == 2 && iter.is_cpu_scalar(1) &&
             !iter.is_cpu_scalar(2)) {
    // A host scalar first factor (PyTorch's in-place mul_(Scalar) is
    // mul_out(self, scalar, self)): products commute, so it rides in the
    // record as the second one, converted to the common dtype as the CPU
    // kernel converts a first operand.
    const c10::Scalar value = at::Tensor(iter.tensor_base(1)).item();
    op.p.ew.other = to_tpu_scalar(value, common, /*checked=*/false);
    op.n_in = 1;
    static const int kSwapped[] = {0, 2};
    submit_iterator_slices(iter, op, 2, device.index(), name, kSwapped);
    return;
  }
  op.n_in = n_tensors - 1;
  // Any other host scalar operand (torch.sub(cpu_0d, tpu)) is copied to
  // the chip and read with zero strides.
  bool any_host = false;
  for (int arg = 1; arg < n_tensors; arg++) any_host = any_host || iter.is_cpu_scalar(arg);
  if (!any_host) {
    submit_iterator_slices(iter, op, n_tensors, device.index(), name);
    return;
  }
  TORCH_CHECK(iter.ndim() <= TPU_MAX_DIMS, name, ": a host scalar operand with more than ", TPU_MAX_DIMS,
              " dims is not supported on tpu");
  std::vector<at::Tensor> moved;
  for (int arg = 0; arg < n_tensors; arg++) {
    if (!iter.is_cpu_scalar(arg)) {
      if (iter.data_ptr(arg) == nullptr) check_in_storage(iter.tensor(arg), name);  // as in submit_iterator_slices
      *iterator_slot(op, arg) = describe_iterator_operand(iter, arg, static_cast<char*>(iter.data_ptr(arg)), iter.ndim());
      continue;
    }
    moved.push_back(at::Tensor(iter.tensor_base(arg)).to(device));
    tpu_tensor t = describe(moved.back(), name);
    t.ndim = iter.ndim();
    for (int d = 0; d < iter.ndim(); d++) {
      t.sizes[d] = iter.shape()[iter.ndim() - 1 - d];
      t.strides[d] = 0;
    }
    *iterator_slot(op, arg) = t;
  }
  submit(device.index(), op, name);
}

// ------------------------------------------------------------- kernels
// Each kernel runs on the iterator its meta function built; the extra
// parameters are the meta's own arguments.

template <tpu_unary_fn Fn>
void unary_kernel(at::TensorIteratorBase& iter, const at::Tensor&) {
  submit_iterator(iter, TPU_OP_UNARY, Fn);
}

template <tpu_binary_fn Fn>
void binary_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const at::Tensor&) {
  submit_iterator(iter, TPU_OP_BINARY, Fn);
}

// Comparison with a Scalar `other`: the meta wraps it as a host 0-dim
// tensor operand, so it is the iterator's second input.
template <tpu_binary_fn Fn>
void compare_scalar_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const c10::Scalar&) {
  submit_iterator(iter, TPU_OP_BINARY, Fn);
}

// A parameter given in the compute ("opmath") type, as PyTorch's kernels
// read most activation parameters.
tpu_scalar opmath_arg(const c10::Scalar& s) { return tpu_scalar{s.toDouble(), s.isIntegral(true) ? s.toLong() : 0}; }

// A parameter converted to the common dtype first, as PyTorch's kernels
// read clamp bounds and threshold values (scalar_t, not opmath).
tpu_scalar common_arg(const at::TensorIteratorBase& iter, const c10::Scalar& s) {
  // Converted with PyTorch's overflow check (clamp(uint8, -5, 300) raises).
  return to_tpu_scalar(s, iter.common_dtype(), /*checked=*/true);
}

void softplus_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const c10::Scalar& beta,
                     const c10::Scalar& threshold) {
  EwParams p;
  p.args = {opmath_arg(beta), opmath_arg(threshold), {}};
  submit_iterator(iter, TPU_OP_UNARY, TPU_UNARY_SOFTPLUS, p);
}

void leaky_relu_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const c10::Scalar& slope) {
  EwParams p;
  p.args = {opmath_arg(slope), {}, {}};
  submit_iterator(iter, TPU_OP_UNARY, TPU_UNARY_LEAKY_RELU, p);
}

void elu_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const c10::Scalar& alpha, const c10::Scalar& scale,
                const c10::Scalar& input_scale) {
  EwParams p;
  p.args = {opmath_arg(alpha), opmath_arg(scale), opmath_arg(input_scale)};
  submit_iterator(iter, TPU_OP_UNARY, TPU_UNARY_ELU, p);
}

void gelu_kernel(at::TensorIteratorBase& iter, const at::Tensor&, c10::string_view approximate) {
  submit_iterator(iter, TPU_OP_UNARY, approximate == "tanh" ? TPU_UNARY_GELU_TANH : TPU_UNARY_GELU);
}

void gelu_backward_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const at::Tensor&,
                          c10::string_view approximate) {
  submit_iterator(iter, TPU_OP_BINARY,
                  approximate == "tanh" ? TPU_BINARY_GELU_TANH_BACKWARD : TPU_BINARY_GELU_BACKWARD);
}

// clamp and its one-sided forms: which bounds apply in args[2].
void clamp_with(at::TensorIteratorBase& iter, at::OptionalScalarRef min, at::OptionalScalarRef max) {
  EwParams p;
  if (min.has_value()) p.args[0] = common_arg(iter, min.get());
  if (max.has_value()) p.args[1] = common_arg(iter, max.get());
  p.args[2].i = (min.has_value() ? 1 : 0) | (max.has_value() ? 2 : 0);
  submit_iterator(iter, TPU_OP_UNARY, TPU_UNARY_CLAMP, p);
}

void clamp_min_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const c10::Scalar& min) {
  clamp_with(iter, at::OptionalScalarRef(&min), at::OptionalScalarRef());
}

void clamp_max_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const c10::Scalar& max) {
  clamp_with(iter, at::OptionalScalarRef(), at::OptionalScalarRef(&max));
}

void threshold_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const c10::Scalar& threshold,
                      const c10::Scalar& value) {
  EwParams p;
  p.args = {common_arg(iter, threshold), common_arg(iter, value), {}};
  submit_iterator(iter, TPU_OP_BINARY, TPU_BINARY_THRESHOLD, p);
}

void threshold_backward_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const at::Tensor&,
                               const c10::Scalar& threshold) {
  EwParams p;
  p.args = {common_arg(iter, threshold), common_arg(iter, 0), {}};
  submit_iterator(iter, TPU_OP_BINARY, TPU_BINARY_THRESHOLD, p);
}

void leaky_relu_backward_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const at::Tensor&,
                                const c10::Scalar& slope, bool) {
  EwParams p;
  p.args = {opmath_arg(slope), {}, {}};
  submit_iterator(iter, TPU_OP_BINARY, TPU_BINARY_LEAKY_RELU_BACKWARD, p);
}

void softplus_backward_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const at::Tensor&,
                              const c10::Scalar& beta, const c10::Scalar& threshold) {
  EwParams p;
  p.args = {opmath_arg(beta), opmath_arg(threshold), {}};
  submit_iterator(iter, TPU_OP_BINARY, TPU_BINARY_SOFTPLUS_BACKWARD, p);
}

// add and sub: a + alpha * b and a - alpha * b, alpha in the common dtype
// (the meta has checked that it fits).
// PyTorch converts alpha to the common dtype with an overflow check (int8
// alpha=1000 raises); the record keeps the unrounded value.
tpu_scalar alpha_param(const c10::Scalar& alpha, at::ScalarType common) {
  (void)to_tpu_scalar(alpha, common, /*checked=*/true);
  return to_tpu_scalar(alpha, common, /*checked=*/false);
}

template <tpu_binary_fn Fn>
void add_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const at::Tensor&, const c10::Scalar& alpha) {
  EwParams p;
  p.alpha = alpha_param(alpha, iter.common_dtype());
  submit_iterator(iter, TPU_OP_BINARY, Fn, p);
}

// mul and div: PyTorch's CPU kernels read a one-element second operand of
// f16/bf16 unrounded, in the compute type.
bool b_in_opmath(at::ScalarType common, bool b_is_one_element) {
  return at::isReducedFloatingType(common) && b_is_one_element;
}

void mul_div(at::TensorIteratorBase& iter, tpu_binary_fn fn, tpu_rounding rounding) {
  EwParams p;
  p.rounding = rounding;
  p.b_opmath = b_in_opmath(iter.common_dtype(), iter.is_scalar(2));
  submit_iterator(iter, TPU_OP_BINARY, fn, p);
}

void mul_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const at::Tensor&) {
  mul_div(iter, TPU_BINARY_MUL, TPU_ROUND_NONE);
}

void div_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const at::Tensor&) {
  mul_div(iter, TPU_BINARY_DIV, TPU_ROUND_NONE);
}

void div_mode_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const at::Tensor&,
                     std::optional<c10::string_view> mode) {
  // The meta has refused any other mode.
  const tpu_rounding r = !mode.has_value() ? TPU_ROUND_NONE : *mode == "trunc" ? TPU_ROUND_TRUNC : TPU_ROUND_FLOOR;
  mul_div(iter, TPU_BINARY_DIV, r);
}

// addcmul and addcdiv: value in the compute type, as the CPU kernels read it.
template <tpu_ternary_fn Fn>
void addc_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                 const c10::Scalar& value) {
  EwParams p;
  p.alpha = to_tpu_scalar(value, at::toOpMathType(iter.common_dtype()), /*checked=*/false);
  submit_iterator(iter, TPU_OP_TERNARY, Fn, p);
}

void lerp_scalar_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const at::Tensor&,
                        const c10::Scalar& weight) {
  EwParams p;  // the weight in the compute type, unrounded, as the CPU kernel reads it
  p.other = to_tpu_scalar(weight, at::toOpMathType(iter.common_dtype()), /*checked=*/false);
  p.b_opmath = true;
  submit_iterator(iter, TPU_OP_TERNARY, TPU_TERNARY_LERP, p);
}

void lerp_tensor_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  submit_iterator(iter, TPU_OP_TERNARY, TPU_TERNARY_LERP);
}

void pow_scalar_kernel(at::TensorIteratorBase& iter, const at::Tensor& self, const c10::Scalar& exponent) {
  // As PyTorch's pow_out: x ** 0 is a fill and x ** 1 a copy (for any
  // dtype, bool included); other exponents raise in the compute type.
  if (exponent.equal(0.0) || exponent.equal(false)) {
    iter.output(0).fill_(1);
    return;
  }
  if (exponent.equal(1.0) || exponent.equal(true)) {
    iter.output(0).copy_(self);
    return;
  }
  // The exponent must fit the common dtype, as PyTorch checks (int32 ** 2**40 raises).
  (void)to_tpu_scalar(exponent, iter.common_dtype(), /*checked=*/true);
  EwParams p;
  p.other = to_tpu_scalar(exponent, at::toOpMathType(iter.common_dtype()), /*checked=*/false);
  p.b_opmath = true;
  submit_iterator(iter, TPU_OP_BINARY, TPU_BINARY_POW, p);
}

// ------------------------------------------- DispatchStub slots
// For the ops PyTorch does not structure: its native function builds the
// iterator, then calls the stub for the iterator's device.

template <tpu_unary_fn Fn>
void unary_stub(at::TensorIteratorBase& iter) {
  submit_iterator(iter, TPU_OP_UNARY, Fn);
}

template <tpu_binary_fn Fn>
void binary_stub(at::TensorIterator& iter) {
  submit_iterator(iter, TPU_OP_BINARY, Fn);
}

// floor_divide: PyTorch's own native function builds the iterator.
void div_floor_stub(at::TensorIteratorBase& iter) { mul_div(iter, TPU_BINARY_DIV, TPU_ROUND_FLOOR); }

// where: PyTorch's where_self_out has already converted self and other
// to the result dtype (out's), which is the common one.
void where_stub(at::TensorIterator& iter) {
  EwParams p;
  p.common = iter.dtype(0);
  submit_iterator(iter, TPU_OP_TERNARY, TPU_TERNARY_WHERE, p);
}

void hardswish_stub(at::TensorIterator& iter) { submit_iterator(iter, TPU_OP_UNARY, TPU_UNARY_HARDSWISH); }

void nan_to_num_stub(at::TensorIteratorBase& iter, std::optional<double> nan, std::optional<double> posinf,
                     std::optional<double> neginf) {
  // PyTorch's defaults: 0, and the dtype's largest and lowest finite values.
  double big = DBL_MAX;
  switch (iter.common_dtype()) {
    case at::kFloat: big = FLT_MAX; break;
    case at::kHalf: big = 65504.0; break;
    case at::kBFloat16: big = static_cast<double>(std::numeric_limits<c10::BFloat16>::max()); break;
    default: break;
  }
  EwParams p;
  p.args = {common_arg(iter, nan.value_or(0.0)), common_arg(iter, posinf.value_or(big)),
            common_arg(iter, neginf.value_or(-big))};
  submit_iterator(iter, TPU_OP_UNARY, TPU_UNARY_NAN_TO_NUM, p);
}

// polygamma(n, x): digamma for n == 0.
void polygamma_kernel(at::TensorIteratorBase& iter, int64_t n, const at::Tensor&) {
  EwParams p;
  p.args[0].i = n;
  submit_iterator(iter, TPU_OP_UNARY, n == 0 ? TPU_UNARY_DIGAMMA : TPU_UNARY_POLYGAMMA, p);
}

// hardshrink reads lambda in the tensor's dtype, softshrink in the
// compute type, as PyTorch's CPU kernels do.
void hardshrink_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const c10::Scalar& lambd) {
  EwParams p;
  p.args[0] = common_arg(iter, lambd);
  submit_iterator(iter, TPU_OP_UNARY, TPU_UNARY_HARDSHRINK, p);
}

void softshrink_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const c10::Scalar& lambd) {
  EwParams p;
  p.args[0] = opmath_arg(lambd);
  submit_iterator(iter, TPU_OP_UNARY, TPU_UNARY_SOFTSHRINK, p);
}

void shrink_backward_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const at::Tensor&,
                            const c10::Scalar& lambd) {
  EwParams p;
  p.args[0] = common_arg(iter, lambd);
  submit_iterator(iter, TPU_OP_BINARY, TPU_BINARY_SHRINK_BACKWARD, p);
}

// logit and its backward: eps < 0 stands for "no eps".
void logit_stub(at::TensorIteratorBase& iter, const c10::Scalar& eps) {
  EwParams p;
  p.args[0] = opmath_arg(eps);
  submit_iterator(iter, TPU_OP_UNARY, TPU_UNARY_LOGIT, p);
}

void logit_backward_kernel(at::TensorIteratorBase& iter, const at::Tensor&, const at::Tensor&,
                           std::optional<double> eps) {
  EwParams p;
  p.args[0] = tpu_scalar{eps.value_or(-1.0), 0};
  submit_iterator(iter, TPU_OP_BINARY, TPU_BINARY_LOGIT_BACKWARD, p);
}

void hardtanh_backward_stub(at::TensorIterator& iter, const c10::Scalar& min, const c10::Scalar& max) {
  EwParams p;
  p.args = {opmath_arg(min), opmath_arg(max), {}};
  submit_iterator(iter, TPU_OP_BINARY, TPU_BINARY_HARDTANH_BACKWARD, p);
}

}  // namespace
}  // namespace torch_tpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(abs_stub, &torch_tpu::unary_stub<TPU_UNARY_ABS>)
REGISTER_PRIVATEUSE1_DISPATCH(logical_not_stub, &torch_tpu::unary_stub<TPU_UNARY_LOGICAL_NOT>)
REGISTER_PRIVATEUSE1_DISPATCH(logical_and_stub, &torch_tpu::binary_stub<TPU_BINARY_LOGICAL_AND>)
REGISTER_PRIVATEUSE1_DISPATCH(logical_or_stub, &torch_tpu::binary_stub<TPU_BINARY_LOGICAL_OR>)
REGISTER_PRIVATEUSE1_DISPATCH(logical_xor_stub, &torch_tpu::binary_stub<TPU_BINARY_LOGICAL_XOR>)
REGISTER_PRIVATEUSE1_DISPATCH(hardswish_stub, &torch_tpu::hardswish_stub)
REGISTER_PRIVATEUSE1_DISPATCH(where_kernel, &torch_tpu::where_stub)
REGISTER_PRIVATEUSE1_DISPATCH(hardswish_backward_stub, &torch_tpu::binary_stub<TPU_BINARY_HARDSWISH_BACKWARD>)
REGISTER_PRIVATEUSE1_DISPATCH(mish_backward_stub, &torch_tpu::binary_stub<TPU_BINARY_MISH_BACKWARD>)
REGISTER_PRIVATEUSE1_DISPATCH(nan_to_num_stub, &torch_tpu::nan_to_num_stub)
REGISTER_PRIVATEUSE1_DISPATCH(hardtanh_backward_stub, &torch_tpu::hardtanh_backward_stub)
REGISTER_PRIVATEUSE1_DISPATCH(div_floor_stub, &torch_tpu::div_floor_stub)
REGISTER_PRIVATEUSE1_DISPATCH(logit_stub, &torch_tpu::logit_stub)
}  // namespace at::native

namespace torch_tpu {
namespace {

using T = const at::Tensor&;
using S = const c10::Scalar&;

// The functional, in-place and out= forms of a structured op.
#define TPU_STRUCTURED(m, op, MetaName, kernel, ...)                                                 \
  m.impl(op, structured_functional<at::meta::MetaName, kernel, "aten::" op, __VA_ARGS__>);             \
  m.impl(op "_", structured_inplace_from<at::meta::MetaName, kernel, "aten::" op, __VA_ARGS__>::call); \
  m.impl(op ".out", structured_out<at::meta::MetaName, kernel, "aten::" op, __VA_ARGS__>)

// In-place form: meta(self, rest...) with self as output. Splits the
// argument list into self and the rest.
template <class Meta, auto Kernel, OpName Name, class Self, class... Rest>
struct structured_inplace_from {
  static at::Tensor& call(at::Tensor& self, Rest... rest) {
    return structured_inplace<Meta, Kernel, Name, Rest...>(self, rest...);
  }
};

#define TPU_UNARY(m, op, FN) TPU_STRUCTURED(m, #op, structured_##op, &unary_kernel<FN>, T)

// Binary structured ops with an overload name (add.Tensor, ...): the
// functional is op.Tensor, in place op_.Tensor, out op.out.
#define TPU_BINARY_OVERLOAD(m, op, overload, MetaName, kernel, ...)                                             \
  m.impl(#op "." overload, structured_functional<at::meta::MetaName, kernel, "aten::" #op, __VA_ARGS__>);         \
  m.impl(#op "_." overload, structured_inplace_from<at::meta::MetaName, kernel, "aten::" #op, __VA_ARGS__>::call); \
  m.impl(#op ".out", structured_out<at::meta::MetaName, kernel, "aten::" #op, __VA_ARGS__>)

// Same, when the out form has its own overload name.
#define TPU_BINARY_OVERLOAD_OUT(m, op, overload, out_overload, MetaName, kernel, ...)                           \
  m.impl(#op "." overload, structured_functional<at::meta::MetaName, kernel, "aten::" #op, __VA_ARGS__>);         \
  m.impl(#op "_." overload, structured_inplace_from<at::meta::MetaName, kernel, "aten::" #op, __VA_ARGS__>::call); \
  m.impl(#op "." out_overload, structured_out<at::meta::MetaName, kernel, "aten::" #op, __VA_ARGS__>)

// ------------------------------------------------------------ lean path
// The commonest binary call, two contiguous tensors of one floating dtype
// and one shape on one chip, skips the TensorIterator: building it is a
// quarter of a tiny op's host time, and for such operands its result is
// known (the same dtype, a contiguous output, every dim merged into one).
// The record is the one submit_iterator would build from that iterator.
// Any other call (broadcasting, promotion, strides, host scalars,
// a partly overlapping in-place operand) takes the structured path, whose
// meta also raises every error.

// Whether a and b take the lean path for fn; *dt is their dtype if so.
bool lean_operands(const at::Tensor& a, const at::Tensor& b, tpu_binary_fn fn, tpu_dtype* dt) {
  const at::ScalarType type = a.scalar_type();
  return a.device() == b.device() && type == b.scalar_type() && at::isFloatingType(type) &&
         to_tpu_dtype(type, dt) && tpu_op_fn_takes(TPU_OP_BINARY, fn, *dt) && a.sizes() == b.sizes() &&
         a.is_contiguous() && b.is_contiguous() && a.numel() > 0 && !a.is_neg() && !b.is_neg() &&
         a.const_data_ptr() != nullptr && b.const_data_ptr() != nullptr;
}

// t as one dim of contiguous elements, with its storage's bounds (t is
// contiguous, of dtype dt, with data: lean_operands holds).
tpu_tensor flat(const at::Tensor& t, tpu_dtype dt) {
  tpu_tensor d{};
  d.data = const_cast<void*>(t.const_data_ptr());
  d.dtype = dt;
  d.ndim = 1;
  d.sizes[0] = t.numel();
  d.strides[0] = 1;
  const c10::Storage& storage = t.storage();
  d.storage = const_cast<void*>(storage.data());
  d.storage_nbytes = static_cast<int64_t>(storage.nbytes());
  return d;
}

void submit_lean(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, tpu_binary_fn fn, tpu_dtype dt,
                 tpu_scalar alpha) {
  const char* name = op_label(TPU_OP_BINARY, fn);
  tpu_op op{};
  op.code = TPU_OP_BINARY;
  op.fn = fn;
  op.n_in = 2;
  op.p.ew.common = dt;
  op.p.ew.alpha = alpha;
  op.p.ew.rounding = TPU_ROUND_NONE;
  op.p.ew.b_opmath = (fn == TPU_BINARY_MUL || fn == TPU_BINARY_DIV) && b_in_opmath(a.scalar_type(), b.numel() == 1);
  op.out = flat(out, dt);
  op.in[0] = flat(a, dt);
  op.in[1] = flat(b, dt);
  submit(a.device().index(), op, name);
}

// alpha as add_kernel takes it; false for an alpha the meta would refuse
// for a floating dtype (bool, complex), left to it.
bool lean_alpha(const c10::Scalar& alpha, at::ScalarType type, tpu_scalar* out) {
  if (alpha.isBoolean() || alpha.isComplex()) return false;
  *out = alpha_param(alpha, type);
  return true;
}

// In place, the lean path also needs other to be self or to share no
// memory with it (TensorIterator refuses a partial overlap).
bool lean_inplace(const at::Tensor& self, const at::Tensor& other) {
  return !self.is_alias_of(other) || (self.const_data_ptr() == other.const_data_ptr() &&
                                      self.strides() == other.strides());
}

// add.Tensor and sub.Tensor, then their in-place forms.
template <class Meta, tpu_binary_fn Fn, OpName Name>
at::Tensor lean_add(T self, T other, S alpha) {
  tpu_dtype dt;
  tpu_scalar a;
  if (lean_operands(self, other, Fn, &dt) && lean_alpha(alpha, self.scalar_type(), &a)) {
    at::Tensor out = new_output(self.sizes(), {}, self.options());
    submit_lean(out, self, other, Fn, dt, a);
    return out;
  }
  return structured_functional<Meta, &add_kernel<Fn>, Name, T, T, S>(self, other, alpha);
}

template <class Meta, tpu_binary_fn Fn, OpName Name>
at::Tensor& lean_add_(at::Tensor& self, T other, S alpha) {
  tpu_dtype dt;
  tpu_scalar a;
  if (lean_operands(self, other, Fn, &dt) && lean_inplace(self, other) && lean_alpha(alpha, self.scalar_type(), &a)) {
    submit_lean(self, self, other, Fn, dt, a);
    return self;
  }
  return structured_inplace<Meta, &add_kernel<Fn>, Name, T, S>(self, other, alpha);
}

// mul.Tensor and div.Tensor, then their in-place forms.
template <class Meta, auto Kernel, tpu_binary_fn Fn, OpName Name>
at::Tensor lean_mul(T self, T other) {
  tpu_dtype dt;
  if (lean_operands(self, other, Fn, &dt)) {
    at::Tensor out = new_output(self.sizes(), {}, self.options());
    submit_lean(out, self, other, Fn, dt, tpu_scalar{1.0, 1});
    return out;
  }
  return structured_functional<Meta, Kernel, Name, T, T>(self, other);
}

template <class Meta, auto Kernel, tpu_binary_fn Fn, OpName Name>
at::Tensor& lean_mul_(at::Tensor& self, T other) {
  tpu_dtype dt;
  if (lean_operands(self, other, Fn, &dt) && lean_inplace(self, other)) {
    submit_lean(self, self, other, Fn, dt, tpu_scalar{1.0, 1});
    return self;
  }
  return structured_inplace<Meta, Kernel, Name, T>(self, other);
}

// clamp's Scalar? bounds arrive as optionals; its meta takes references.
at::OptionalScalarRef ref(const std::optional<c10::Scalar>& s) {
  return s.has_value() ? at::OptionalScalarRef(&s.value()) : at::OptionalScalarRef();
}

at::Tensor clamp(T self, const std::optional<c10::Scalar>& min, const std::optional<c10::Scalar>& max) {
  Structured<at::meta::structured_clamp> op(OutputKind::Functional, nullptr, "aten::clamp");
  op.meta(self, ref(min), ref(max));
  clamp_with(op, ref(min), ref(max));
  return std::move(op.output_);
}

at::Tensor& clamp_(at::Tensor& self, const std::optional<c10::Scalar>& min, const std::optional<c10::Scalar>& max) {
  Structured<at::meta::structured_clamp> op(OutputKind::Inplace, &self, "aten::clamp");
  op.meta(self, ref(min), ref(max));
  clamp_with(op, ref(min), ref(max));
  return self;
}

at::Tensor& clamp_out(T self, const std::optional<c10::Scalar>& min, const std::optional<c10::Scalar>& max,
                      at::Tensor& out) {
  Structured<at::meta::structured_clamp> op(OutputKind::Out, &out, "aten::clamp");
  op.meta(self, ref(min), ref(max));
  clamp_with(op, ref(min), ref(max));
  return out;
}

// isnan and isinf have no structured form: a bool result laid out like
// self, from an iterator that keeps self's dtype as the common one.
at::Tensor bool_unary(T self, tpu_unary_fn fn) {
  at::Tensor out = at::empty_like(self, self.options().dtype(at::kBool));
  auto iter = at::TensorIteratorConfig().add_output(out).add_const_input(self).check_all_same_dtype(false).build();
  submit_iterator(iter, TPU_OP_UNARY, fn);
  return out;
}

at::Tensor isnan(T self) { return bool_unary(self, TPU_UNARY_ISNAN); }
at::Tensor isinf(T self) { return bool_unary(self, TPU_UNARY_ISINF); }

// masked_fill_: self = where(mask, value, self), in place, with
// PyTorch's checks (a bool mask, a 0-dim value that fits self's dtype).
at::Tensor& masked_fill_with(at::Tensor& self, T mask, const at::Tensor& value) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  at::assert_no_internal_overlap(self);
  at::assert_no_partial_overlap(self, mask);
  at::where_out(self, mask, value, self);
  return self;
}

at::Tensor& masked_fill_scalar(at::Tensor& self, T mask, S value) {
  // Converted with the overflow check (int8 and 1000 raises), as PyTorch's kernel does.
  return masked_fill_with(self, mask, at::scalar_tensor(value, self.options()));
}

at::Tensor& masked_fill_tensor(at::Tensor& self, T mask, T value) {
  TORCH_CHECK(value.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  return masked_fill_with(self, mask, value.to(self.device(), self.scalar_type()));
}

// hardtanh is clamp into a tensor of self's dtype, as PyTorch's: integer
// bounds are truncated first, so they never promote the result.
at::Tensor& hardtanh_out(T self, S min, S max, at::Tensor& out) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Bool inputs not supported for hardtanh");
  if (!at::isIntegralType(self.scalar_type(), /*includeBool=*/false)) return at::clamp_out(out, self, min, max);
  const int64_t lo = min.toLong(), hi = max.toLong();
  TORCH_CHECK(self.scalar_type() != at::kByte || (lo >= 0 && hi >= 0),
              "cannot do hardtanh on an unsigned type with negative limits");
  return at::clamp_out(out, self, lo, hi);
}
at::Tensor hardtanh(T self, S min, S max) {
  at::Tensor out = at::empty_like(self);
  return hardtanh_out(self, min, max, out);
}
at::Tensor& hardtanh_(at::Tensor& self, S min, S max) { return hardtanh_out(self, min, max, self); }

// relu is clamp_min(self, 0), as in PyTorch, which refuses bool first.
at::Tensor relu(T self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  return at::clamp_min(self, 0);
}
at::Tensor& relu_(at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  return at::clamp_min_(self, 0);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // Unary, structured.
  TPU_UNARY(m, neg, TPU_UNARY_NEG);
  TPU_UNARY(m, sign, TPU_UNARY_SIGN);
  TPU_UNARY(m, sgn, TPU_UNARY_SIGN);  // sgn is sign for real tensors
  TPU_UNARY(m, reciprocal, TPU_UNARY_RECIPROCAL);
  TPU_UNARY(m, sqrt, TPU_UNARY_SQRT);
  TPU_UNARY(m, rsqrt, TPU_UNARY_RSQRT);
  TPU_UNARY(m, exp, TPU_UNARY_EXP);
  TPU_UNARY(m, exp2, TPU_UNARY_EXP2);
  TPU_UNARY(m, expm1, TPU_UNARY_EXPM1);
  TPU_UNARY(m, log, TPU_UNARY_LOG);
  TPU_UNARY(m, log2, TPU_UNARY_LOG2);
  TPU_UNARY(m, log10, TPU_UNARY_LOG10);
  TPU_UNARY(m, log1p, TPU_UNARY_LOG1P);
  TPU_UNARY(m, sin, TPU_UNARY_SIN);
  TPU_UNARY(m, cos, TPU_UNARY_COS);
  TPU_UNARY(m, tan, TPU_UNARY_TAN);
  TPU_UNARY(m, asin, TPU_UNARY_ASIN);
  TPU_UNARY(m, acos, TPU_UNARY_ACOS);
  TPU_UNARY(m, atan, TPU_UNARY_ATAN);
  TPU_UNARY(m, sinh, TPU_UNARY_SINH);
  TPU_UNARY(m, cosh, TPU_UNARY_COSH);
  TPU_UNARY(m, tanh, TPU_UNARY_TANH);
  TPU_UNARY(m, asinh, TPU_UNARY_ASINH);
  TPU_UNARY(m, acosh, TPU_UNARY_ACOSH);
  TPU_UNARY(m, atanh, TPU_UNARY_ATANH);
  TPU_UNARY(m, erf, TPU_UNARY_ERF);
  TPU_UNARY(m, erfc, TPU_UNARY_ERFC);
  TPU_UNARY(m, erfinv, TPU_UNARY_ERFINV);
  TPU_UNARY(m, floor, TPU_UNARY_FLOOR);
  TPU_UNARY(m, ceil, TPU_UNARY_CEIL);
  TPU_UNARY(m, round, TPU_UNARY_ROUND);
  TPU_UNARY(m, trunc, TPU_UNARY_TRUNC);
  TPU_UNARY(m, frac, TPU_UNARY_FRAC);
  TPU_UNARY(m, sigmoid, TPU_UNARY_SIGMOID);
  TPU_UNARY(m, bitwise_not, TPU_UNARY_BITWISE_NOT);
  TPU_UNARY(m, silu, TPU_UNARY_SILU);
  TPU_UNARY(m, mish, TPU_UNARY_MISH);
  TPU_UNARY(m, hardsigmoid, TPU_UNARY_HARDSIGMOID);
  TPU_UNARY(m, sinc, TPU_UNARY_SINC);
  TPU_UNARY(m, lgamma, TPU_UNARY_LGAMMA);
  TPU_UNARY(m, digamma, TPU_UNARY_DIGAMMA);
  TPU_UNARY(m, i0, TPU_UNARY_I0);
  // Functional and out= forms only (no in-place form in PyTorch).
#define TPU_FUNCTIONAL_OUT(op, MetaName, kernel, ...)                                        \
  m.impl(#op, structured_functional<at::meta::MetaName, kernel, "aten::" #op, __VA_ARGS__>); \
  m.impl(#op ".out", structured_out<at::meta::MetaName, kernel, "aten::" #op, __VA_ARGS__>)
  TPU_FUNCTIONAL_OUT(signbit, structured_signbit, &unary_kernel<TPU_UNARY_SIGNBIT>, T);
  TPU_FUNCTIONAL_OUT(special_entr, structured_special_entr, &unary_kernel<TPU_UNARY_ENTR>, T);
  TPU_FUNCTIONAL_OUT(special_i0e, structured_special_i0e, &unary_kernel<TPU_UNARY_I0E>, T);
  TPU_FUNCTIONAL_OUT(special_i1, structured_special_i1, &unary_kernel<TPU_UNARY_I1>, T);
  TPU_FUNCTIONAL_OUT(special_i1e, structured_special_i1e, &unary_kernel<TPU_UNARY_I1E>, T);
  TPU_FUNCTIONAL_OUT(polygamma, structured_polygamma, &polygamma_kernel, int64_t, T);
  TPU_FUNCTIONAL_OUT(hardshrink, structured_hardshrink, &hardshrink_kernel, T, S);
  TPU_FUNCTIONAL_OUT(softshrink, structured_softshrink, &softshrink_kernel, T, S);
  TPU_FUNCTIONAL_OUT(special_xlog1py, structured_special_xlog1py, &binary_kernel<TPU_BINARY_XLOG1PY>, T, T);
#undef TPU_FUNCTIONAL_OUT
  m.impl("logit", at::native::logit);
  m.impl("logit_", at::native::logit_);
  m.impl("logit.out", at::native::logit_out);
  m.impl("isposinf", structured_functional<at::meta::structured_isposinf, &unary_kernel<TPU_UNARY_ISPOSINF>, "aten::isposinf", T>);
  m.impl("isposinf.out", structured_out<at::meta::structured_isposinf, &unary_kernel<TPU_UNARY_ISPOSINF>, "aten::isposinf", T>);
  m.impl("isneginf", structured_functional<at::meta::structured_isneginf, &unary_kernel<TPU_UNARY_ISNEGINF>, "aten::isneginf", T>);
  m.impl("isneginf.out", structured_out<at::meta::structured_isneginf, &unary_kernel<TPU_UNARY_ISNEGINF>, "aten::isneginf", T>);
  m.impl("softplus", structured_functional<at::meta::structured_softplus, &softplus_kernel, "aten::softplus", T, S, S>);
  m.impl("softplus.out", structured_out<at::meta::structured_softplus, &softplus_kernel, "aten::softplus", T, S, S>);
  TPU_STRUCTURED(m, "leaky_relu", structured_leaky_relu, &leaky_relu_kernel, T, S);
  TPU_STRUCTURED(m, "elu", structured_elu, &elu_kernel, T, S, S, S);
  TPU_STRUCTURED(m, "gelu", structured_gelu, &gelu_kernel, T, c10::string_view);
  TPU_STRUCTURED(m, "clamp_min", structured_clamp_min, &clamp_min_kernel, T, S);
  TPU_STRUCTURED(m, "clamp_max", structured_clamp_max, &clamp_max_kernel, T, S);
  m.impl("clamp", clamp);
  m.impl("clamp_", clamp_);
  m.impl("clamp.out", clamp_out);
  m.impl("isnan", isnan);
  m.impl("isinf", isinf);
  m.impl("hardtanh", hardtanh);
  m.impl("hardtanh_", hardtanh_);
  m.impl("hardtanh.out", hardtanh_out);
  m.impl("relu", relu);
  m.impl("relu_", relu_);
  TPU_STRUCTURED(m, "threshold", structured_threshold, &threshold_kernel, T, S, S);
  // Unary, through DispatchStub.
  m.impl("abs.out", at::native::abs_out);
  m.impl("logical_not.out", at::native::logical_not_out);
  m.impl("nan_to_num.out", at::native::nan_to_num_out);
  m.impl("hardswish", at::native::hardswish);
  m.impl("hardswish_", at::native::hardswish_);
  m.impl("hardswish.out", at::native::hardswish_out);

  // Binary, structured.
  // add, sub, mul and div take the lean path where it applies.
  using at::meta::structured_add_Tensor, at::meta::structured_sub_Tensor;
  using at::meta::structured_mul_Tensor, at::meta::structured_div_Tensor;
  m.impl("add.Tensor", lean_add<structured_add_Tensor, TPU_BINARY_ADD, "aten::add">);
  m.impl("add_.Tensor", lean_add_<structured_add_Tensor, TPU_BINARY_ADD, "aten::add">);
  m.impl("add.out", structured_out<structured_add_Tensor, &add_kernel<TPU_BINARY_ADD>, "aten::add", T, T, S>);
  m.impl("sub.Tensor", lean_add<structured_sub_Tensor, TPU_BINARY_SUB, "aten::sub">);
  m.impl("sub_.Tensor", lean_add_<structured_sub_Tensor, TPU_BINARY_SUB, "aten::sub">);
  m.impl("sub.out", structured_out<structured_sub_Tensor, &add_kernel<TPU_BINARY_SUB>, "aten::sub", T, T, S>);
  m.impl("mul.Tensor", lean_mul<structured_mul_Tensor, &mul_kernel, TPU_BINARY_MUL, "aten::mul">);
  m.impl("mul_.Tensor", lean_mul_<structured_mul_Tensor, &mul_kernel, TPU_BINARY_MUL, "aten::mul">);
  m.impl("mul.out", structured_out<structured_mul_Tensor, &mul_kernel, "aten::mul", T, T>);
  m.impl("div.Tensor", lean_mul<structured_div_Tensor, &div_kernel, TPU_BINARY_DIV, "aten::div">);
  m.impl("div_.Tensor", lean_mul_<structured_div_Tensor, &div_kernel, TPU_BINARY_DIV, "aten::div">);
  m.impl("div.out", structured_out<structured_div_Tensor, &div_kernel, "aten::div", T, T>);
  TPU_BINARY_OVERLOAD_OUT(m, div, "Tensor_mode", "out_mode", structured_div_Tensor_mode, &div_mode_kernel, T, T,
                          std::optional<c10::string_view>);
  m.impl("maximum", structured_functional<at::meta::structured_maximum, &binary_kernel<TPU_BINARY_MAXIMUM>, "aten::maximum", T, T>);
  m.impl("maximum.out", structured_out<at::meta::structured_maximum, &binary_kernel<TPU_BINARY_MAXIMUM>, "aten::maximum", T, T>);
  // clamp_min / clamp_max with a tensor bound: NaN in either gives NaN,
  // exactly maximum's and minimum's rule.
  TPU_BINARY_OVERLOAD_OUT(m, clamp_min, "Tensor", "Tensor_out", structured_clamp_min_Tensor,
                          &binary_kernel<TPU_BINARY_MAXIMUM>, T, T);
  TPU_BINARY_OVERLOAD_OUT(m, clamp_max, "Tensor", "Tensor_out", structured_clamp_max_Tensor,
                          &binary_kernel<TPU_BINARY_MINIMUM>, T, T);
  m.impl("minimum", structured_functional<at::meta::structured_minimum, &binary_kernel<TPU_BINARY_MINIMUM>, "aten::minimum", T, T>);
  m.impl("minimum.out", structured_out<at::meta::structured_minimum, &binary_kernel<TPU_BINARY_MINIMUM>, "aten::minimum", T, T>);
  m.impl("fmax", structured_functional<at::meta::structured_fmax, &binary_kernel<TPU_BINARY_FMAX>, "aten::fmax", T, T>);
  m.impl("fmax.out", structured_out<at::meta::structured_fmax, &binary_kernel<TPU_BINARY_FMAX>, "aten::fmax", T, T>);
  m.impl("fmin", structured_functional<at::meta::structured_fmin, &binary_kernel<TPU_BINARY_FMIN>, "aten::fmin", T, T>);
  m.impl("fmin.out", structured_out<at::meta::structured_fmin, &binary_kernel<TPU_BINARY_FMIN>, "aten::fmin", T, T>);
  TPU_STRUCTURED(m, "atan2", structured_atan2, &binary_kernel<TPU_BINARY_ATAN2>, T, T);
  TPU_STRUCTURED(m, "hypot", structured_hypot, &binary_kernel<TPU_BINARY_HYPOT>, T, T);
  TPU_STRUCTURED(m, "heaviside", structured_heaviside, &binary_kernel<TPU_BINARY_HEAVISIDE>, T, T);
  TPU_BINARY_OVERLOAD(m, pow, "Tensor_Tensor", structured_pow_Tensor_Tensor, &binary_kernel<TPU_BINARY_POW>, T, T);
  m.impl("pow.Tensor_Scalar", structured_functional<at::meta::structured_pow_Tensor_Scalar, &pow_scalar_kernel, "aten::pow", T, S>);
  m.impl("pow_.Scalar", structured_inplace<at::meta::structured_pow_Tensor_Scalar, &pow_scalar_kernel, "aten::pow", S>);
  m.impl("pow.Tensor_Scalar_out", structured_out<at::meta::structured_pow_Tensor_Scalar, &pow_scalar_kernel, "aten::pow", T, S>);
  TPU_BINARY_OVERLOAD(m, remainder, "Tensor", structured_remainder_Tensor, &binary_kernel<TPU_BINARY_REMAINDER>, T, T);
  TPU_BINARY_OVERLOAD(m, fmod, "Tensor", structured_fmod_Tensor, &binary_kernel<TPU_BINARY_FMOD>, T, T);
  TPU_BINARY_OVERLOAD(m, copysign, "Tensor", structured_copysign_Tensor, &binary_kernel<TPU_BINARY_COPYSIGN>, T, T);
  TPU_BINARY_OVERLOAD(m, xlogy, "Tensor", structured_xlogy_Tensor, &binary_kernel<TPU_BINARY_XLOGY>, T, T);
  TPU_BINARY_OVERLOAD_OUT(m, bitwise_and, "Tensor", "Tensor_out", structured_bitwise_and_Tensor,
                          &binary_kernel<TPU_BINARY_BITWISE_AND>, T, T);
  TPU_BINARY_OVERLOAD_OUT(m, bitwise_or, "Tensor", "Tensor_out", structured_bitwise_or_Tensor,
                          &binary_kernel<TPU_BINARY_BITWISE_OR>, T, T);
  TPU_BINARY_OVERLOAD_OUT(m, bitwise_xor, "Tensor", "Tensor_out", structured_bitwise_xor_Tensor,
                          &binary_kernel<TPU_BINARY_BITWISE_XOR>, T, T);
  TPU_BINARY_OVERLOAD_OUT(m, bitwise_left_shift, "Tensor", "Tensor_out", structured_bitwise_left_shift_Tensor,
                          &binary_kernel<TPU_BINARY_LSHIFT>, T, T);
  TPU_BINARY_OVERLOAD_OUT(m, bitwise_right_shift, "Tensor", "Tensor_out", structured_bitwise_right_shift_Tensor,
                          &binary_kernel<TPU_BINARY_RSHIFT>, T, T);
#define TPU_COMPARE(op, FN)                                                                                   \
  TPU_BINARY_OVERLOAD_OUT(m, op, "Tensor", "Tensor_out", structured_##op##_Tensor, &binary_kernel<FN>, T, T); \
  TPU_BINARY_OVERLOAD_OUT(m, op, "Scalar", "Scalar_out", structured_##op##_Scalar, &compare_scalar_kernel<FN>, T, S)
  TPU_COMPARE(eq, TPU_BINARY_EQ);
  TPU_COMPARE(ne, TPU_BINARY_NE);
  TPU_COMPARE(lt, TPU_BINARY_LT);
  TPU_COMPARE(le, TPU_BINARY_LE);
  TPU_COMPARE(gt, TPU_BINARY_GT);
  TPU_COMPARE(ge, TPU_BINARY_GE);
#undef TPU_COMPARE
  // Backward functions (functional and grad_input= forms).
#define TPU_BACKWARD(op, MetaName, kernel, ...)                                                  \
  m.impl(#op, structured_functional<at::meta::MetaName, kernel, "aten::" #op, __VA_ARGS__>); \
  m.impl(#op ".grad_input", structured_out<at::meta::MetaName, kernel, "aten::" #op, __VA_ARGS__>)
  TPU_BACKWARD(sigmoid_backward, structured_sigmoid_backward, &binary_kernel<TPU_BINARY_SIGMOID_BACKWARD>, T, T);
  TPU_BACKWARD(tanh_backward, structured_tanh_backward, &binary_kernel<TPU_BINARY_TANH_BACKWARD>, T, T);
  TPU_BACKWARD(silu_backward, structured_silu_backward, &binary_kernel<TPU_BINARY_SILU_BACKWARD>, T, T);
  TPU_BACKWARD(hardsigmoid_backward, structured_hardsigmoid_backward,
               &binary_kernel<TPU_BINARY_HARDSIGMOID_BACKWARD>, T, T);
  TPU_BACKWARD(gelu_backward, structured_gelu_backward, &gelu_backward_kernel, T, T, c10::string_view);
  TPU_BACKWARD(threshold_backward, structured_threshold_backward, &threshold_backward_kernel, T, T, S);
  TPU_BACKWARD(leaky_relu_backward, structured_leaky_relu_backward, &leaky_relu_backward_kernel, T, T, S, bool);
  TPU_BACKWARD(softplus_backward, structured_softplus_backward, &softplus_backward_kernel, T, T, S, S);
  TPU_BACKWARD(hardshrink_backward, structured_hardshrink_backward, &shrink_backward_kernel, T, T, S);
  TPU_BACKWARD(softshrink_backward, structured_softshrink_backward, &shrink_backward_kernel, T, T, S);
  TPU_BACKWARD(logit_backward, structured_logit_backward, &logit_backward_kernel, T, T, std::optional<double>);
#undef TPU_BACKWARD
  // Ternary.
  TPU_STRUCTURED(m, "addcmul", structured_addcmul, &addc_kernel<TPU_TERNARY_ADDCMUL>, T, T, T, S);
  TPU_STRUCTURED(m, "addcdiv", structured_addcdiv, &addc_kernel<TPU_TERNARY_ADDCDIV>, T, T, T, S);
  TPU_BINARY_OVERLOAD_OUT(m, lerp, "Scalar", "Scalar_out", structured_lerp_Scalar, &lerp_scalar_kernel, T, T, S);
  TPU_BINARY_OVERLOAD_OUT(m, lerp, "Tensor", "Tensor_out", structured_lerp_Tensor, &lerp_tensor_kernel, T, T, T);
  m.impl("where.self", static_cast<at::Tensor (*)(T, T, T)>(at::native::where));
  m.impl("where.self_out", at::native::where_self_out);
  m.impl("masked_fill_.Scalar", masked_fill_scalar);
  m.impl("masked_fill_.Tensor", masked_fill_tensor);
  // Binary, through DispatchStub.
  m.impl("logical_and.out", at::native::logical_and_out);
  m.impl("logical_or.out", at::native::logical_or_out);
  m.impl("logical_xor.out", at::native::logical_xor_out);
  m.impl("hardswish_backward", at::native::hardswish_backward);
  m.impl("mish_backward", at::native::mish_backward);
  m.impl("hardtanh_backward", at::native::hardtanh_backward);
  m.impl("floor_divide", static_cast<at::Tensor (*)(T, T)>(at::native::floor_divide));
  m.impl("floor_divide.out", at::native::floor_divide_out);
  m.impl("floor_divide_.Tensor", static_cast<at::Tensor& (*)(at::Tensor&, T)>(at::native::floor_divide_));
  m.impl("hardtanh_backward.grad_input", at::native::hardtanh_backward_out);
}

}  // namespace torch_tpu
