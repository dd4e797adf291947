// add, sub, mul, div: broadcasting, type promotion, Python scalars, and the
// functional, in-place and out= forms, all as one TPU_OP_BINARY
// record per call. The template every element-wise family follows.
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "core/glue.h"

namespace torch_tpu {
namespace {

constexpr auto kTpu = c10::DeviceType::PrivateUse1;

struct BinaryKind {
  tpu_binary_fn code;
  const char* name;  // aten op name for messages
  bool true_division;
};

// A 0-dim CPU tensor next to a tpu tensor is a scalar operand (Python
// numbers arrive that way), as on CUDA.
bool is_cpu_scalar(const at::Tensor& t) { return t.dim() == 0 && t.is_cpu(); }

c10::DeviceIndex common_chip(const BinaryKind& k, const at::Tensor& a, const at::Tensor& b,
                             const at::Tensor* out) {
  // The chip of the first tpu tensor; `out` may be the only one (two CPU
  // scalars written into a tpu tensor, which CUDA accepts too).
  const at::Tensor* tpu = a.device().type() == kTpu ? &a : b.device().type() == kTpu ? &b : out;
  TORCH_INTERNAL_ASSERT(tpu != nullptr && tpu->device().type() == kTpu);
  for (const at::Tensor* t : {&a, &b, out}) {
    if (t == nullptr || (t != out && is_cpu_scalar(*t))) continue;
    TORCH_CHECK(t->device() == tpu->device(), "Expected all tensors to be on the same device, but found at least two devices, ",
                tpu->device(), " and ", t->device(), "! (when checking arguments for ", k.name, ")");
  }
  return tpu->device().index();
}

at::ScalarType result_dtype(const BinaryKind& k, const at::Tensor& a, const at::Tensor& b,
                            tpu_rounding rounding) {
  at::ScalarType type = at::result_type(a, b);
  if (k.true_division && rounding == TPU_ROUND_NONE && at::isIntegralType(type, /*includeBool=*/true))
    type = c10::typeMetaToScalarType(c10::get_default_dtype());
  return type;
}

void check_operands(const BinaryKind& k, const at::Tensor& a, const at::Tensor& b, at::ScalarType type,
                    const c10::Scalar& alpha, tpu_rounding rounding) {
  TORCH_CHECK_TYPE(!a.is_complex() && !b.is_complex(), k.name, ": complex tensors are not supported on tpu yet");
  for (at::ScalarType t : {a.scalar_type(), b.scalar_type(), type}) {
    tpu_dtype dt;
    TORCH_CHECK_NOT_IMPLEMENTED(to_tpu_dtype(t, &dt), k.name, ": tpu does not support dtype ", t);
  }
  check_in_storage(a, k.name);
  check_in_storage(b, k.name);
  // As on the CPU backend: rounded division has no bool kernel.
  TORCH_CHECK_NOT_IMPLEMENTED(k.code != TPU_BINARY_DIV || rounding == TPU_ROUND_NONE || type != at::kBool, k.name,
                              ": rounding_mode='", rounding == TPU_ROUND_TRUNC ? "trunc" : "floor",
                              "' is not implemented for 'Bool'");
  if (k.code == TPU_BINARY_SUB) {
    TORCH_CHECK(a.scalar_type() != at::kBool || b.scalar_type() != at::kBool,
                "Subtraction, the `-` operator, with two bool tensors is not supported. "
                "Use the `^` or `logical_xor()` operator instead.");
    TORCH_CHECK(a.scalar_type() != at::kBool && b.scalar_type() != at::kBool,
                "Subtraction, the `-` operator, with a bool tensor is not supported. "
                "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
  }
  if (k.code == TPU_BINARY_ADD || k.code == TPU_BINARY_SUB) {
    at::native::alpha_check(type, alpha);
    // PyTorch converts alpha to the result dtype with an overflow check
    // (int8 alpha=1000 raises); the record keeps the unrounded value.
    (void)to_tpu_scalar(alpha, type, /*checked=*/true);
  }
}

// Runs out = a <op> b where out already has the broadcast shape and the
// result dtype. b may be a CPU scalar.
void run(const BinaryKind& k, c10::DeviceIndex chip, const at::Tensor& out, const at::Tensor& a_in,
         const at::Tensor& b_in, const c10::Scalar& alpha, tpu_rounding rounding) {
  if (out.numel() == 0) return;
  at::Tensor a = a_in, b = b_in;
  // A scalar first operand is moved to the chip (a one-element copy); a
  // scalar second operand rides in the op record.
  if (is_cpu_scalar(a)) a = a.to(out.device());
  // The record's common dtype is the result dtype: the kernel converts
  // each operand to it first, as TensorIterator does before the CPU kernel
  // computes (int8 / int64(300) divides by int8(300) = 44). One exception,
  // as in the CPU kernels: mul and div of f16/bf16 read a single-element
  // second operand unrounded, in their compute type (b_opmath).
  const at::ScalarType type = out.scalar_type();
  const bool b_in_compute_type =
      (k.code == TPU_BINARY_MUL || k.code == TPU_BINARY_DIV) && at::isReducedFloatingType(type) && b.numel() == 1;
  tpu_op op{};
  op.code = TPU_OP_BINARY;
  op.fn = k.code;
  TORCH_INTERNAL_ASSERT(to_tpu_dtype(type, &op.p.ew.common));  // checked by check_operands
  op.p.ew.b_opmath = b_in_compute_type;
  op.p.ew.alpha = to_tpu_scalar(alpha, out.scalar_type(), /*checked=*/false);
  op.p.ew.rounding = rounding;
  std::vector<at::Tensor> operands{out, a.expand(out.sizes())};
  if (is_cpu_scalar(b)) {
    op.n_in = 1;
    const c10::Scalar value = b_in_compute_type ? b.item() : b.to(type).item();
    op.p.ew.other = to_tpu_scalar(value, type, /*checked=*/false);
  } else {
    op.n_in = 2;
    operands.push_back(b.expand(out.sizes()));
  }
  for_each_describable_slice(operands, [&](const std::vector<at::Tensor>& t) {
    tpu_tensor described[3];
    if (op.n_in == 1)
      describe_elementwise(k.name, {&t[0], &t[1]}, described);
    else
      describe_elementwise(k.name, {&t[0], &t[1], &t[2]}, described);
    op.out = described[0];
    op.in[0] = described[1];
    if (op.n_in == 2) op.in[1] = described[2];
    submit(chip, op, k.name);
  });
}

// Writes into `out` (already checked and sized): directly when its dtype is
// the result dtype, through a temporary otherwise (PyTorch computes in the
// result dtype and casts on store).
void run_into(const BinaryKind& k, c10::DeviceIndex chip, const at::Tensor& out, const at::Tensor& a,
              const at::Tensor& b, const c10::Scalar& alpha, tpu_rounding rounding, at::ScalarType type) {
  at::assert_no_internal_overlap(out);
  at::assert_no_partial_overlap(out, a);
  at::assert_no_partial_overlap(out, b);
  if (out.scalar_type() == type) {
    run(k, chip, out, a, b, alpha, rounding);
    return;
  }
  at::Tensor tmp = at::empty(out.sizes(), out.options().dtype(type));
  run(k, chip, tmp, a, b, alpha, rounding);
  copy_tensor(out, tmp, false);
}

// The result of a functional op is laid out like its first full-shape
// dense tpu operand (a transposed input gives a transposed result), as
// TensorIterator lays out CPU and CUDA results; contiguous otherwise.
at::Tensor empty_result(const at::Tensor& a, const at::Tensor& b, at::IntArrayRef shape,
                        const at::TensorOptions& options) {
  for (const at::Tensor* t : {&a, &b}) {
    if (t->device().type() != kTpu || t->sizes() != shape) continue;
    if (t->is_non_overlapping_and_dense() && !t->is_contiguous())
      return at::empty_strided(shape, t->strides(), options);
    break;
  }
  return at::empty(shape, options);
}

at::Tensor functional(const BinaryKind& k, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha,
                      tpu_rounding rounding) {
  const c10::DeviceIndex chip = common_chip(k, a, b, nullptr);
  const at::ScalarType type = result_dtype(k, a, b, rounding);
  check_operands(k, a, b, type, alpha, rounding);
  const auto shape = at::infer_size(a.sizes(), b.sizes());
  at::Tensor out = empty_result(a, b, shape, at::TensorOptions().dtype(type).device(kTpu, chip));
  run(k, chip, out, a, b, alpha, rounding);
  return out;
}

at::Tensor& out_variant(const BinaryKind& k, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha,
                        tpu_rounding rounding, at::Tensor& out) {
  const c10::DeviceIndex chip = common_chip(k, a, b, &out);
  const at::ScalarType type = result_dtype(k, a, b, rounding);
  check_operands(k, a, b, type, alpha, rounding);
  check_in_storage(out, k.name);
  TORCH_CHECK(at::canCast(type, out.scalar_type()), "result type ", type, " can't be cast to the desired output type ",
              out.scalar_type());
  at::native::resize_output(out, at::infer_size(a.sizes(), b.sizes()));
  run_into(k, chip, out, a, b, alpha, rounding, type);
  return out;
}

at::Tensor& inplace(const BinaryKind& k, at::Tensor& self, const at::Tensor& b, const c10::Scalar& alpha,
                    tpu_rounding rounding) {
  const c10::DeviceIndex chip = common_chip(k, self, b, &self);
  const at::ScalarType type = result_dtype(k, self, b, rounding);
  check_operands(k, self, b, type, alpha, rounding);
  TORCH_CHECK(at::canCast(type, self.scalar_type()), "result type ", type,
              " can't be cast to the desired output type ", self.scalar_type());
  const auto shape = at::infer_size(self.sizes(), b.sizes());
  TORCH_CHECK(shape == self.sizes(), "output with shape ", self.sizes(), " doesn't match the broadcast shape ", shape);
  run_into(k, chip, self, self, b, alpha, rounding, type);
  return self;
}

tpu_rounding parse_rounding(std::optional<c10::string_view> mode) {
  if (!mode.has_value()) return TPU_ROUND_NONE;
  if (*mode == "trunc") return TPU_ROUND_TRUNC;
  if (*mode == "floor") return TPU_ROUND_FLOOR;
  TORCH_CHECK(false, "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", *mode, "'");
}

const BinaryKind kAdd{TPU_BINARY_ADD, "aten::add", false};
const BinaryKind kSub{TPU_BINARY_SUB, "aten::sub", false};
const BinaryKind kMul{TPU_BINARY_MUL, "aten::mul", false};
const BinaryKind kDiv{TPU_BINARY_DIV, "aten::div", true};

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", [](const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
    return functional(kAdd, a, b, alpha, TPU_ROUND_NONE);
  });
  m.impl("add_.Tensor", [](at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) -> at::Tensor& {
    return inplace(kAdd, a, b, alpha, TPU_ROUND_NONE);
  });
  m.impl("add.out", [](const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha, at::Tensor& out)
                        -> at::Tensor& { return out_variant(kAdd, a, b, alpha, TPU_ROUND_NONE, out); });
  m.impl("sub.Tensor", [](const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) {
    return functional(kSub, a, b, alpha, TPU_ROUND_NONE);
  });
  m.impl("sub_.Tensor", [](at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha) -> at::Tensor& {
    return inplace(kSub, a, b, alpha, TPU_ROUND_NONE);
  });
  m.impl("sub.out", [](const at::Tensor& a, const at::Tensor& b, const c10::Scalar& alpha, at::Tensor& out)
                        -> at::Tensor& { return out_variant(kSub, a, b, alpha, TPU_ROUND_NONE, out); });
  m.impl("mul.Tensor",
         [](const at::Tensor& a, const at::Tensor& b) { return functional(kMul, a, b, 1, TPU_ROUND_NONE); });
  m.impl("mul_.Tensor", [](at::Tensor& a, const at::Tensor& b) -> at::Tensor& {
    return inplace(kMul, a, b, 1, TPU_ROUND_NONE);
  });
  m.impl("mul.out", [](const at::Tensor& a, const at::Tensor& b, at::Tensor& out) -> at::Tensor& {
    return out_variant(kMul, a, b, 1, TPU_ROUND_NONE, out);
  });
  m.impl("div.Tensor",
         [](const at::Tensor& a, const at::Tensor& b) { return functional(kDiv, a, b, 1, TPU_ROUND_NONE); });
  m.impl("div_.Tensor", [](at::Tensor& a, const at::Tensor& b) -> at::Tensor& {
    return inplace(kDiv, a, b, 1, TPU_ROUND_NONE);
  });
  m.impl("div.out", [](const at::Tensor& a, const at::Tensor& b, at::Tensor& out) -> at::Tensor& {
    return out_variant(kDiv, a, b, 1, TPU_ROUND_NONE, out);
  });
  m.impl("div.Tensor_mode", [](const at::Tensor& a, const at::Tensor& b, std::optional<c10::string_view> mode) {
    return functional(kDiv, a, b, 1, parse_rounding(mode));
  });
  m.impl("div_.Tensor_mode",
         [](at::Tensor& a, const at::Tensor& b, std::optional<c10::string_view> mode) -> at::Tensor& {
           return inplace(kDiv, a, b, 1, parse_rounding(mode));
         });
  m.impl("div.out_mode", [](const at::Tensor& a, const at::Tensor& b, std::optional<c10::string_view> mode,
                            at::Tensor& out) -> at::Tensor& {
    return out_variant(kDiv, a, b, 1, parse_rounding(mode), out);
  });
}

}  // namespace torch_tpu
