// uniform_, normal_ and bernoulli_ (and dropout on it) from the chip's
// Philox generator (TPU_OP_RANDOM records). Each call takes one fresh offset from the generator, so
// the values depend on the seed and the call order only.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/DistributionsHelper.h>
#include <torch/library.h>

#include <cmath>

#include "core/generator.h"
#include "core/glue.h"

namespace torch_tpu {
namespace {

bool float_type(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

void run(const char* name, tpu_random_fn fn, at::Tensor& self, double a, double b,
         const std::optional<at::Generator>& gen) {
  TORCH_CHECK_TYPE(fn == TPU_RANDOM_BERNOULLI || float_type(self.scalar_type()), name,
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
  m.impl("native_dropout", native_dropout);
  m.impl("native_dropout_backward", native_dropout_backward);
}

}  // namespace torch_tpu
