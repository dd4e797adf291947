// cat on PyTorch's structured meta (shapes, dtype promotion, memory
// format, overlap and argument checks as for CPU): each input is one copy
// into its slice of the output, converting dtypes as cat does.
#include <ATen/core/IListRef.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat_meta.h>
#include <torch/library.h>

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

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("cat", cat);
  m.impl("cat.out", cat_out);
}

}  // namespace torch_tpu
