// uniform_ and normal_ from the chip's Philox generator (TPU_OP_RANDOM
// records). Each call takes one fresh offset from the generator, so
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
  TORCH_CHECK_TYPE(float_type(self.scalar_type()), name, ": expects a floating point tpu tensor, got ",
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

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("uniform_", uniform_);
  m.impl("normal_", normal_);
}

}  // namespace torch_tpu
