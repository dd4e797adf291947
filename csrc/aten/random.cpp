// uniform_, normal_, bernoulli_ (and dropout on it) and random_ from the chip's
// Philox generator (TPU_OP_RANDOM records). Each call takes one fresh offset from the generator, so
// the values depend on the seed and the call order only.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/DistributionsHelper.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "core/generator.h"
#include "core/glue.h"

namespace torch_tpu {
namespace {

bool float_type(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

// INTEGERS' range: from and the span (0: 2^64).
struct IntRange {
  int64_t from = 0;
  uint64_t span = 0;
};

void run(const char* name, tpu_random_fn fn, at::Tensor& self, double a, double b,
         const std::optional<at::Generator>& gen, IntRange range = {}) {
  TORCH_CHECK_TYPE(fn == TPU_RANDOM_BERNOULLI || fn == TPU_RANDOM_INTEGERS || float_type(self.scalar_type()), name,
                   ": expects a floating point tpu tensor, got ", self.scalar_type());
  tpu_dtype dt;
  TORCH_CHECK_NOT_IMPLEMENTED(to_tpu_dtype(self.scalar_type(), &dt), name, ": tpu does not support dtype ",
                              self.scalar_type());
  TpuGeneratorImpl* g = get_generator(gen, self.device().index());
  TORCH_CHECK(g->device() == self.device(), name, ": generator is on ", g->device(), " but the tensor is on ",
              self.device());
  if (self.numel() == 0) return;
  at::assert_no_internal_overlap(self);
  // The kernel numbers elements in row-major order of `out`; a
  // non-contiguous tensor is filled through a contiguous temporary so that
  // the values do not depend on its strides.
  at::Tensor target = self.is_contiguous() ? self : at::empty(self.sizes(), self.options());
  tpu_op op{};
  op.code = TPU_OP_RANDOM;
  op.fn = fn;
  describe_elementwise(name, {&target}, &op.out);
  op.p.rand.seed = g->current_seed();
  op.p.rand.offset = g->take_offset();
  op.p.rand.a = a;
  op.p.rand.b = b;
  op.p.rand.from = range.from;
  op.p.rand.span = range.span;
  submit(self.device().index(), op, name);
  if (!target.is_same(self)) copy_tensor(self, target, false);
}

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
  TORCH_CHECK(std::isfinite(from) && std::isfinite(to), "uniform_: from and to must be finite, got from=", from,
              " to=", to);
  run("aten::uniform_", TPU_RANDOM_UNIFORM, self, from, to, gen);
  return self;
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  run("aten::normal_", TPU_RANDOM_NORMAL, self, mean, std, gen);
  return self;
}

at::Tensor& bernoulli_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  run("aten::bernoulli_", TPU_RANDOM_BERNOULLI, self, p, 0, gen);
  return self;
}

// The largest value random_ draws without a `to` (PyTorch's): 2^digits for
// floats (every integer up to it is exact), the type's maximum for integers.
int64_t random_max(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return int64_t{1} << std::numeric_limits<float>::digits;
    case at::kDouble: return int64_t{1} << std::numeric_limits<double>::digits;
    case at::kHalf: return int64_t{1} << 11;
    case at::kBFloat16: return int64_t{1} << 8;
    case at::kByte: return std::numeric_limits<uint8_t>::max();
    case at::kChar: return std::numeric_limits<int8_t>::max();
    case at::kShort: return std::numeric_limits<int16_t>::max();
    case at::kInt: return std::numeric_limits<int32_t>::max();
    case at::kLong: return std::numeric_limits<int64_t>::max();
    default: return 1;
  }
}

// The smallest value a dtype holds exactly as random_ sees it.
int64_t random_min(at::ScalarType t) {
  switch (t) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16: return -random_max(t);
    case at::kChar: return std::numeric_limits<int8_t>::min();
    case at::kShort: return std::numeric_limits<int16_t>::min();
    case at::kInt: return std::numeric_limits<int32_t>::min();
    case at::kLong: return std::numeric_limits<int64_t>::min();
    default: return 0;
  }
}

// random_ from `from` up to `to` (exclusive) or, without `to`, up to
// random_max inclusive. A bool tensor draws 0 or 1 with equal odds.
at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to, std::optional<at::Generator> gen) {
  const at::ScalarType t = self.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(!self.is_complex(), "random_ is not implemented for complex tensors on tpu");
  const int64_t lo = random_min(t), hi = random_max(t);
  // Integer dtypes must hold the range; for floats PyTorch accepts any
  // range (values beyond 2^digits are then rounded), and so does tpu.
  const bool integral = !at::isFloatingType(t);
  if (to.has_value()) {
    const int64_t end = *to;
    TORCH_CHECK(from < end, "random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", end);
    TORCH_CHECK(!integral || (from >= lo && end - 1 <= hi), "random_ expects 'from' and 'to - 1' to lie in the "
                "range of ", t, " [", lo, ", ", hi, "], but got from=", from, " to=", end);
  } else {
    TORCH_CHECK(from >= lo && from <= hi, "random_ expects 'from' to lie in the range of ", t, " [", lo, ", ", hi,
                "], but got from=", from);
  }
  if (t == at::kBool) {
    // The checks above keep [from, to) inside [0, 2).
    if (to.value_or(2) - from == 1) return self.fill_(from != 0);
    return bernoulli_(self, 0.5, gen);
  }
  // Spans are taken in unsigned arithmetic: [INT64_MIN, INT64_MAX] is 2^64 (0).
  const uint64_t span = to.has_value() ? static_cast<uint64_t>(*to) - static_cast<uint64_t>(from)
                                       : static_cast<uint64_t>(hi) - static_cast<uint64_t>(from) + 1;
  run("aten::random_", TPU_RANDOM_INTEGERS, self, 0, 0, gen, IntRange{from, span});
  return self;
}

// native_dropout as PyTorch's: a bool mask drawn with keep probability
// 1 - p, and input * mask * (1 / (1 - p)) (0 when p == 1).
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  if (input.numel() == 0) return std::make_tuple(input, at::empty_like(input, input.options()));
  if (train.has_value() && !*train)
    return std::make_tuple(input.clone(), at::ones_like(input, input.options().dtype(at::kBool)));
  TORCH_CHECK(0 <= p && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  const double keep = 1.0 - p;
  const double scale = keep == 0 ? 0.0 : 1.0 / keep;
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool));
  bernoulli_(mask, keep, std::nullopt);
  return std::make_tuple(input.mul(mask).mul_(scale), mask);
}

at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Mask should be Bool Scalar Type", mask.scalar_type());
  return grad * mask * scale;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("uniform_", uniform_);
  m.impl("normal_", normal_);
  m.impl("bernoulli_.float", bernoulli_);
  m.impl("random_.from", random_from);
  m.impl("random_.to", [](at::Tensor& self, int64_t to, std::optional<at::Generator> gen) -> at::Tensor& {
    return random_from(self, 0, to, gen);
  });
  m.impl("random_", [](at::Tensor& self, std::optional<at::Generator> gen) -> at::Tensor& {
    return random_from(self, 0, std::nullopt, gen);
  });
  m.impl("native_dropout", native_dropout);
  m.impl("native_dropout_backward", native_dropout_backward);
}

}  // namespace torch_tpu
