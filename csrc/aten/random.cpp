// uniform_, normal_, bernoulli_ (and dropout on it) and random_ from the chip's
// Philox generator (TPU_OP_RANDOM records). Each call takes one fresh offset from the generator, so
// the values depend on the seed and the call order only.
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/core/DistributionsHelper.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

#include "core/generator.h"
#include "core/glue.h"
#include "core/sync_debug.h"

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

// randperm: the positions of n uniform 64-bit keys in a stable sort (equal
// keys, one chance in 2^64 per pair, keep their order).
at::Tensor& randperm_out(int64_t n, std::optional<at::Generator> gen, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  const at::ScalarType t = out.scalar_type();
  TORCH_CHECK(t != at::kBool && !out.is_complex(), "randperm is not implemented for ", t);
  // PyTorch's limits: integer types must hold n - 1; half at most 2049.
  TORCH_CHECK(t != at::kHalf || n <= 2049, "n cannot be greater than 2049 for Half type.");
  TORCH_CHECK(at::isFloatingType(t) || n == 0 || n - 1 <= random_max(t), "n is too large for result tensor type: '",
              t, "'");
  at::native::resize_output(out, {n});
  if (n == 0) return out;
  at::Tensor keys = at::empty({n}, out.options().dtype(at::kLong));
  run("aten::randperm", TPU_RANDOM_INTEGERS, keys, 0, 0, gen, IntRange{std::numeric_limits<int64_t>::min(), 0});
  out.copy_(std::get<1>(keys.sort(/*stable=*/true, 0, /*descending=*/false)));
  return out;
}

// multinomial: without replacement (and for one sample) the k largest of
// p / E, E ~ Exp(1) (each category's exponential race, as PyTorch's CPU
// kernel draws it); with replacement, the inverse of the normalized
// cumulative sum at uniform draws. The distribution is checked with one
// host read, as on CPU.
at::Tensor& multinomial_out(const at::Tensor& self, int64_t n_sample, bool replacement,
                            std::optional<at::Generator> gen, at::Tensor& out) {
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "multinomial only supports floating-point dtypes for input, got: ",
              self.scalar_type());
  TORCH_CHECK(out.scalar_type() == at::kLong, "multinomial expects Long tensor out, got: ", out.scalar_type());
  TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
  const int64_t n_categories = self.size(-1);
  TORCH_CHECK(replacement || n_sample <= n_categories,
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(n_categories <= (int64_t{1} << 24), "number of categories cannot exceed 2^24");
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  sizes.back() = n_sample;
  at::native::resize_output(out, sizes);
  // No category (or no row) to draw from: as CPU, an invalid distribution.
  TORCH_CHECK(n_categories > 0, "invalid multinomial distribution (sum of probabilities <= 0)");
  if (self.numel() == 0 || out.numel() == 0) return out;
  const at::Tensor p = self.to(self.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  const at::Tensor sums = p.sum(-1, /*keepdim=*/true);
  // Both checks in one host read: [any bad element, any row summing to <= 0].
  const at::Tensor bad = (p < 0).logical_or_(p.isnan()).logical_or_(p.isinf()).any();
  const SyncSite site("torch.multinomial: checks the probabilities on the host");
  const at::Tensor flags = at::stack({bad, (sums <= 0).any()}).cpu();
  TORCH_CHECK(!flags[0].item<bool>(), "probability tensor contains either `inf`, `nan` or element < 0");
  TORCH_CHECK(!flags[1].item<bool>(), "invalid multinomial distribution (sum of probabilities <= 0)");
  if (!replacement || n_sample == 1) {
    // With fewer positive categories than samples the zero ones fill in
    // (their keys are 0), as the CPU kernel does.
    at::Tensor e = at::empty_like(p);
    run("aten::multinomial", TPU_RANDOM_UNIFORM, e, 0, 1, gen);
    // E = -log(1 - u), u in [0, 1): finite and > 0 except at u = 0.
    const at::Tensor keys = p / (-(1 - e).log());
    out.copy_(std::get<1>(keys.topk(n_sample, -1, /*largest=*/true, /*sorted=*/true)));
    return out;
  }
  at::Tensor cdf = (p / sums).cumsum(-1);
  cdf = cdf / cdf.narrow(-1, n_categories - 1, 1);  // the last is 1, whatever the rounding
  std::vector<int64_t> usizes(sizes.begin(), sizes.end());
  at::Tensor u = at::empty(usizes, p.options());
  run("aten::multinomial", TPU_RANDOM_UNIFORM, u, 0, 1, gen);
  // The index of a draw: how many cumulative values lie at or below it (a
  // binary search per draw, SORT SEARCHSORTED).
  const at::Tensor picks = at::searchsorted(cdf.contiguous(), u, /*out_int32=*/false, /*right=*/true);
  out.copy_(picks.clamp_max(n_categories - 1));
  return out;
}

at::Tensor multinomial(const at::Tensor& self, int64_t n_sample, bool replacement, std::optional<at::Generator> gen) {
  at::Tensor out = at::empty({0}, self.options().dtype(at::kLong));
  return multinomial_out(self, n_sample, replacement, gen, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("randperm.generator_out", randperm_out);
  m.impl("multinomial", multinomial);
  m.impl("multinomial.out", multinomial_out);
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
