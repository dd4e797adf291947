// Gathers and the embedding's backward as TPU_OP_INDEX records:
// index_select (which embedding's forward uses), gather (on its structured
// meta) and embedding_dense_backward. The kernels check every index as
// they read it; one out of range is an IndexError at the next sync.
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/gather_meta.h>
#include <torch/library.h>

#include "core/glue.h"
#include "core/structured.h"

namespace torch_tpu {
namespace {

// A 0-d tensor as the 1-d tensor of one element the kernels expect.
at::Tensor at_least_1d(const at::Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

void check_index_dtype(const at::Tensor& index, const char* name) {
  TORCH_CHECK_INDEX(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, name,
                    "(): Expected dtype int32 or int64 for index, got ", index.scalar_type());
}

// index_select(self, dim, index) into `out` (already of the result's shape).
void index_select_into(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& out) {
  const char* name = "aten::index_select";
  // With no elements to copy the record still checks the indices.
  if (index.numel() == 0) return;
  check_in_storage(self, name);
  check_in_storage(index, name);
  tpu_op op{};
  op.code = TPU_OP_INDEX;
  op.fn = TPU_INDEX_SELECT;
  op.n_in = 2;
  // Views (a reshape of a strided index may copy): alive until submitted.
  const at::Tensor out1 = at_least_1d(out), self1 = at_least_1d(self), index1 = index.reshape({-1});
  op.out = describe(out1, name);
  op.in[0] = describe(self1, name);
  op.in[1] = describe(index1, name);
  op.p.index.dim = static_cast<int32_t>(dim);
  submit(self.device().index(), op, name);
}

std::vector<int64_t> index_select_shape(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  if (self.dim() > 0) shape[dim] = index.numel();
  return shape;
}

// The argument checks of PyTorch's CPU index_select, with its messages.
int64_t check_index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  check_index_dtype(index, "index_select");
  TORCH_CHECK(self.device() == index.device(), "Expected all tensors to be on the same device, but found at least "
              "two devices, ", self.device(), " and ", index.device(), "! (when checking argument for argument index "
              "in method index_select)");
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  if (self.dim() == 0)
    TORCH_CHECK_INDEX(index.numel() == 1, "index_select(): Index to scalar can have only 1 value, got ",
                      index.numel(), " value(s)");
  return d;
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  const int64_t d = check_index_select(self, dim, index);
  at::Tensor out = at::empty(index_select_shape(self, d, index), self.options());
  index_select_into(self, d, index, out);
  return out;
}

at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, at::Tensor& out) {
  const int64_t d = check_index_select(self, dim, index);
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "index_select(): self and result must have the same scalar "
              "type");
  TORCH_CHECK(out.device() == self.device(), "index_select(): expected out on ", self.device(), ", got ",
              out.device());
  at::native::resize_output(out, index_select_shape(self, d, index));
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, index);
  index_select_into(self, d, index, out);
  return out;
}

void gather_kernel(Structured<at::meta::structured_gather>& op, const at::Tensor& self, int64_t dim,
                   const at::Tensor& index, bool) {
  const char* name = "aten::gather";
  const at::Tensor& out = op.output_;
  if (out.numel() == 0) return;
  check_in_storage(self, name);
  check_in_storage(index, name);
  tpu_op rec{};
  rec.code = TPU_OP_INDEX;
  rec.fn = TPU_INDEX_GATHER;
  rec.n_in = 2;
  const at::Tensor out1 = at_least_1d(out), self1 = at_least_1d(self), index1 = at_least_1d(index);
  rec.out = describe(out1, name);
  rec.in[0] = describe(self1, name);
  rec.in[1] = describe(index1, name);
  rec.p.index.dim = static_cast<int32_t>(at::maybe_wrap_dim(dim, self.dim()));
  submit(self.device().index(), rec, name);
}

// The gradient of embedding(weight, indices): grad_output [..., D] summed
// into the rows of a [num_weights, D] tensor that `indices` names.
at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices, int64_t num_weights,
                                    int64_t padding_idx, bool scale_grad_by_freq) {
  const char* name = "aten::embedding_dense_backward";
  check_index_dtype(indices, "embedding_backward");
  TORCH_CHECK(num_weights >= 0, name, ": num_weights must be non-negative, got ", num_weights);
  TORCH_CHECK(grad_output.dim() >= 1, name, ": grad_output must have at least one dim");
  const int64_t d = grad_output.size(-1);
  TORCH_CHECK(grad_output.numel() == indices.numel() * d, name, ": grad_output has ", grad_output.sizes(),
              " but indices have ", indices.sizes());
  at::Tensor out = at::empty({num_weights, d}, grad_output.options());
  if (out.numel() == 0) return out;
  check_in_storage(grad_output, name);
  check_in_storage(indices, name);
  tpu_op op{};
  op.code = TPU_OP_INDEX;
  op.fn = TPU_INDEX_EMBEDDING_BACKWARD;
  op.n_in = 2;
  // Reshapes may copy: the copies live until the record is submitted.
  const at::Tensor grad = grad_output.reshape({-1, d}), idx = indices.reshape({-1});
  op.out = describe(out, name);
  op.in[0] = describe(grad, name);
  op.in[1] = describe(idx, name);
  op.p.index.padding_idx = padding_idx;
  op.p.index.scale_by_freq = scale_grad_by_freq;
  submit(out.device().index(), op, name);
  return out;
}

using T = const at::Tensor&;
using at::meta::structured_gather;

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("index_select", index_select);
  m.impl("index_select.out", index_select_out);
  m.impl("gather", structured_functional<structured_gather, &gather_kernel, "aten::gather", T, int64_t, T, bool>);
  m.impl("gather.out", structured_out<structured_gather, &gather_kernel, "aten::gather", T, int64_t, T, bool>);
  m.impl("embedding_dense_backward", embedding_dense_backward);
}

}  // namespace torch_tpu
