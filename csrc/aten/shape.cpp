// cat on PyTorch's structured meta (shapes, dtype promotion, memory
// format, overlap and argument checks as for CPU): each input is one copy
// into its slice of the output, converting dtypes as cat does. arange on
// PyTorch's own arange_out (size, checks, resize) and the PrivateUse1 slot
// of its DispatchStub: one FILL ARANGE record. tril and triu on their
// structured metas: one COPY TRIL / TRIU record (in place too). flip: one
// COPY record whose source view walks the flipped dims backwards (records
// take negative strides, which PyTorch tensors cannot have).
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/core/IListRef.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/RangeFactories.h>
#include <ATen/ops/arange_native.h>
#include <ATen/ops/cat_meta.h>
#include <ATen/ops/tril_meta.h>
#include <ATen/ops/triu_meta.h>
#include <torch/library.h>

#include <bitset>

#include "core/glue.h"
#include "core/structured.h"

namespace torch_tpu {
namespace {

// Legacy: 1-d empty inputs take no part in cat, whatever their dtype.
bool skipped(const at::Tensor& t) { return t.dim() == 1 && t.size(0) == 0; }

void cat_into(const at::ITensorListRef& tensors, int64_t dim, const at::Tensor& out) {
  int64_t offset = 0;
  for (const at::Tensor& t : tensors) {
    if (skipped(t)) continue;
    TORCH_CHECK(t.device() == out.device(), "Expected all tensors to be on the same device, but found at least two ",
                "devices, ", out.device(), " and ", t.device(), "! (when checking argument for argument tensors in "
                "method cat)");
    const int64_t n = t.size(dim);
    if (t.numel() > 0) copy_tensor(out.narrow(dim, offset, n), t, false);
    offset += n;
  }
}

at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  Structured<at::meta::structured_cat> op(OutputKind::Functional, nullptr, "aten::cat");
  const auto pre = op.meta(tensors, dim);
  cat_into(tensors, pre.dim, op.output_);
  return std::move(op.output_);
}

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  Structured<at::meta::structured_cat> op(OutputKind::Out, &out, "aten::cat");
  const auto pre = op.meta(tensors, dim);
  cat_into(tensors, pre.dim, out);
  return out;
}

// out[k] = start + step * k over the iterator's (contiguous, 1-d) output.
void arange_stub(at::TensorIterator& iter, const c10::Scalar& start, const c10::Scalar&, const c10::Scalar& step) {
  const at::Tensor& out = iter.output(0);
  if (out.numel() == 0) return;
  tpu_op op{};
  op.code = TPU_OP_FILL;
  op.fn = TPU_FILL_ARANGE;
  op.out = describe(out, "aten::arange");
  if (at::isFloatingType(out.scalar_type())) {
    op.p.fill.value.f = start.toDouble();
    op.p.fill.step.f = step.toDouble();
  } else {
    op.p.fill.value.i = start.toLong();
    op.p.fill.step.i = step.toLong();
  }
  submit(out.device().index(), op, "aten::arange.start_out");
}

// tril / triu of self into the structured op's output.
template <class Meta, tpu_copy_fn Fn>
void triangle_kernel(Structured<Meta>& op, const at::Tensor& self, int64_t diagonal) {
  const char* name = Fn == TPU_COPY_TRIL ? "aten::tril" : "aten::triu";
  const at::Tensor& out = op.output_;
  if (out.numel() == 0) return;
  check_in_storage(self, name);
  tpu_op rec{};
  rec.code = TPU_OP_COPY;
  rec.fn = Fn;
  rec.n_in = 1;
  rec.out = describe(out, name);
  rec.in[0] = describe(self, name);
  rec.p.tri.diagonal = diagonal;
  submit(out.device().index(), rec, name);
}

at::Tensor flip(const at::Tensor& self, at::IntArrayRef dims) {
  const char* name = "aten::flip";
  const std::bitset<64> flipped = at::dim_list_to_bitset(dims, self.dim());  // wraps, rejects repeats
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Preserve);
  if (out.numel() == 0) return out;
  check_in_storage(self, name);
  tpu_op op{};
  op.code = TPU_OP_COPY;
  op.fn = TPU_COPY_PLAIN;
  op.n_in = 1;
  op.out = describe(out, name);
  tpu_tensor src = describe(self, name);
  const int64_t es = static_cast<int64_t>(self.element_size());
  for (int64_t d = 0; d < self.dim(); d++) {
    if (!flipped[d] || self.size(d) < 2) continue;
    src.data = static_cast<char*>(src.data) + (self.size(d) - 1) * self.stride(d) * es;
    src.strides[d] = -self.stride(d);
  }
  op.in[0] = src;
  submit(self.device().index(), op, name);
  return out;
}

using at::meta::structured_tril;
using at::meta::structured_triu;
constexpr auto kTril = &triangle_kernel<structured_tril, TPU_COPY_TRIL>;
constexpr auto kTriu = &triangle_kernel<structured_triu, TPU_COPY_TRIU>;

}  // namespace
}  // namespace torch_tpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(arange_stub, &torch_tpu::arange_stub)
}  // namespace at::native

namespace torch_tpu {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("cat", cat);
  m.impl("cat.out", cat_out);
  m.impl("flip", flip);
  using T = const at::Tensor&;
  m.impl("tril", structured_functional<structured_tril, kTril, "aten::tril", T, int64_t>);
  m.impl("tril_", structured_inplace<structured_tril, kTril, "aten::tril_", int64_t>);
  m.impl("tril.out", structured_out<structured_tril, kTril, "aten::tril", T, int64_t>);
  m.impl("triu", structured_functional<structured_triu, kTriu, "aten::triu", T, int64_t>);
  m.impl("triu_", structured_inplace<structured_triu, kTriu, "aten::triu_", int64_t>);
  m.impl("triu.out", structured_out<structured_triu, kTriu, "aten::triu", T, int64_t>);
  m.impl("arange.start_out",
         static_cast<at::Tensor& (*)(const c10::Scalar&, const c10::Scalar&, const c10::Scalar&, at::Tensor&)>(
             at::native::arange_out));
}

}  // namespace torch_tpu
