// Gathers and scatters as TPU_OP_INDEX records: index_select (which
// embedding's forward uses), gather, embedding_dense_backward, scatter /
// scatter_add / scatter with a value (on PyTorch's structured ops and their
// DispatchStubs), advanced indexing x[i, j] and x[i, j] = v (PyTorch's
// index and _index_put_impl_ build the iterator; their stubs land here),
// and nonzero. The kernels check every index as they read it; one out of
// range is an IndexError at the next sync.
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/IndexKernel.h>
#include <ATen/native/TensorAdvancedIndexing.h>
#include <ATen/ops/_index_put_impl_native.h>
#include <ATen/ops/gather_meta.h>
#include <ATen/ops/index_native.h>
#include <ATen/ops/scatter_add_native.h>
#include <ATen/ops/scatter_native.h>
#include <ATen/ops/scatter_reduce_native.h>
#include <torch/library.h>

#include "core/glue.h"
#include "core/iterator.h"
#include "core/structured.h"
#include "core/sync_debug.h"

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
  check_same_device("gather", self.device(), {{"index", &index}});
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
  check_same_device(name, grad_output.device(), {{"indices", &indices}});
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
  // scale_grad_by_freq counts each row's uses in device scratch.
  const at::Tensor scratch = attach_scratch(op, out);
  submit(out.device().index(), op, name);
  return out;
}

// ---- scatters, through the structured ops' DispatchStubs.

void scatter_record(tpu_index_fn fn, const char* name, const at::Tensor& self, int64_t dim, const at::Tensor& index,
                    const at::Tensor* src, const c10::Scalar* value) {
  check_same_device(name, self.device(), {{"index", &index}, {"src", src}});
  if (index.numel() == 0) return;
  for (const at::Tensor* t : {&self, &index}) check_in_storage(*t, name);
  const auto d1 = [](const at::Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; };
  const at::Tensor self1 = d1(self), index1 = d1(index);
  at::Tensor src1;
  tpu_op op{};
  op.code = TPU_OP_INDEX;
  op.fn = fn;
  op.n_in = 2;
  op.out = describe(self1, name);
  if (src != nullptr) {
    check_in_storage(*src, name);
    src1 = d1(*src);
    op.in[0] = describe(src1, name);
  } else {
    op.p.index.value = to_tpu_scalar(*value, self.scalar_type(), /*checked=*/false);
  }
  op.in[1] = describe(index1, name);
  op.p.index.dim = static_cast<int32_t>(at::maybe_wrap_dim(dim, self.dim()));
  submit(self.device().index(), op, name);
}

void scatter_stub(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  scatter_record(TPU_INDEX_SCATTER, "aten::scatter", self, dim, index, &src, nullptr);
}

void scatter_add_stub(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src) {
  scatter_record(TPU_INDEX_SCATTER_ADD, "aten::scatter_add", self, dim, index, &src, nullptr);
}

void scatter_fill_stub(const at::Tensor& self, int64_t dim, const at::Tensor& index, const c10::Scalar& value) {
  scatter_record(TPU_INDEX_SCATTER_FILL, "aten::scatter", self, dim, index, nullptr, &value);
}

// The reducing scatters. MEAN adds here; PyTorch's scatter_reduce then
// divides by the counts (a scatter_add of ones).
tpu_index_fn reducing_scatter(at::native::ReductionType reduce) {
  switch (reduce) {
    case at::native::ReductionType::PROD: return TPU_INDEX_SCATTER_PROD;
    case at::native::ReductionType::MAX: return TPU_INDEX_SCATTER_AMAX;
    case at::native::ReductionType::MIN: return TPU_INDEX_SCATTER_AMIN;
    default: return TPU_INDEX_SCATTER_ADD;
  }
}

void scatter_reduce_two_stub(const at::Tensor& self, const int64_t dim, const at::Tensor& index, const at::Tensor& src,
                             const at::native::ReductionType& reduce) {
  scatter_record(reducing_scatter(reduce), "aten::scatter_reduce", self, dim, index, &src, nullptr);
}

// scatter(..., reduce="add" | "multiply"), with a tensor or a value.
void scatter_reduce_stub(const at::Tensor& self, const int64_t dim, const at::Tensor& index, const at::Tensor& src,
                         const at::native::ReductionType& reduce) {
  scatter_record(reducing_scatter(reduce), "aten::scatter", self, dim, index, &src, nullptr);
}

void scatter_scalar_reduce_stub(const at::Tensor& self, const int64_t dim, const at::Tensor& index,
                                const c10::Scalar& value, const at::native::ReductionType& reduce) {
  const at::Tensor src = at::full(index.sizes(), value, self.options());
  scatter_record(reducing_scatter(reduce), "aten::scatter", self, dim, index, &src, nullptr);
}

// ---- advanced indexing: the iterator PyTorch builds (out, the source
// with stride 0 in the indexed dims, the broadcast indices) as one record.

void advanced_record(at::TensorIteratorBase& iter, at::IntArrayRef sizes, at::IntArrayRef strides, tpu_index_fn fn,
                     bool accumulate, const char* name) {
  if (iter.numel() == 0) return;
  const int n_idx = static_cast<int>(sizes.size());
  TORCH_CHECK(n_idx >= 1 && n_idx <= TPU_OP_MAX_INDICES, name, ": indexing with ", n_idx,
              " index tensors is not supported on tpu (at most ", TPU_OP_MAX_INDICES, ")");
  TORCH_INTERNAL_ASSERT(iter.ntensors() == 2 + n_idx);
  for (int arg = 0; arg < iter.ntensors(); arg++) {
    tpu_dtype dt;
    TORCH_CHECK_NOT_IMPLEMENTED(to_tpu_dtype(iter.dtype(arg), &dt), name, ": tpu does not support dtype ",
                                iter.dtype(arg));
  }
  tpu_op op{};
  op.code = TPU_OP_INDEX;
  op.fn = fn;
  op.n_in = 1 + n_idx;
  op.p.index.n_idx = n_idx;
  op.p.index.accumulate = accumulate;
  const int64_t es = static_cast<int64_t>(iter.element_size(0));
  for (int k = 0; k < n_idx; k++) {
    op.p.index.idx_sizes[k] = sizes[k];
    op.p.index.idx_strides[k] = strides[k] / es;  // PyTorch gives bytes
  }
  submit_iterator_slices(iter, op, iter.ntensors(), iter.device(0).index(), name);
}

void index_stub(at::TensorIteratorBase& iter, at::IntArrayRef sizes, at::IntArrayRef strides) {
  advanced_record(iter, sizes, strides, TPU_INDEX_ADVANCED, false, "aten::index");
}

void index_put_stub(at::TensorIterator& iter, at::IntArrayRef sizes, at::IntArrayRef strides, bool accumulate) {
  advanced_record(iter, sizes, strides, TPU_INDEX_ADVANCED_PUT, accumulate, "aten::index_put_");
}

// index_put_ with accumulate (and, under deterministic algorithms, without):
// PyTorch routes it here for every accelerator. Each index combination is
// turned into a flat position in self (an arange gathered by the same
// indices), and the values are scattered (added) into the flat view in
// index order: the same order as the CPU's serial loop.
void index_put_with_sort_stub(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                              const at::Tensor& value, bool accumulate, bool) {
  TORCH_CHECK(value.scalar_type() == self.scalar_type(), "Index put requires the source and destination dtypes "
              "match, got ", self.scalar_type(), " for the destination and ", value.scalar_type(), " for the source.");
  if (self.numel() == 0) return;
  const at::Tensor positions =
      at::arange(self.numel(), self.options().dtype(at::kLong)).view(self.sizes()).index(indices);
  TORCH_CHECK_INDEX(at::is_expandable_to(value.sizes(), positions.sizes()), "shape mismatch: value tensor of shape ",
                    value.sizes(), " cannot be broadcast to indexing result of shape ", positions.sizes());
  at::Tensor target = self.is_contiguous() ? self : self.contiguous();
  at::Tensor flat = target.view({-1});
  const at::Tensor values = value.expand(positions.sizes()).reshape({-1});
  if (accumulate)
    flat.scatter_add_(0, positions.reshape({-1}), values);
  else
    flat.scatter_(0, positions.reshape({-1}), values);
  if (!target.is_same(self)) self.copy_(target);
}

// x[mask] = v with one bool mask and a single value is masked_fill_, as
// PyTorch's _index_put_impl_ makes it for a value on the CPU; Python gives
// the tpu a value on the device, so the same test runs here first (else
// the mask, often x itself compared, would trip the overlap check the
// general path must make). Returns the mask broadcast to self, or an
// undefined tensor when the call is not of that form.
at::Tensor mask_of_masked_fill(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                               const at::Tensor& value) {
  if (value.numel() != 1) return {};
  int64_t dims = 0;
  at::Tensor mask;
  for (const std::optional<at::Tensor>& i : indices) {
    if (!i.has_value() || !i->defined()) {
      dims++;
      continue;
    }
    if ((i->scalar_type() != at::kBool && i->scalar_type() != at::kByte) || i->device() != self.device() ||
        mask.defined())
      return {};
    mask = *i;
    for (int64_t j = 0; j < mask.dim(); j++)
      TORCH_CHECK_INDEX(dims + j < self.dim() && mask.size(j) == self.size(dims + j), "The shape of the mask ",
                        mask.sizes(), " at index ", j, " does not match the shape of the indexed tensor ",
                        self.sizes(), " at index ", dims + j);
    dims += mask.dim();
  }
  if (!mask.defined()) return {};
  for (int64_t d = dims; d < self.dim(); d++) mask = mask.unsqueeze(-1);
  return mask;
}

at::Tensor& index_put_impl_(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                            const at::Tensor& value, bool accumulate, bool unsafe) {
  if (!accumulate && !at::globalContext().deterministicAlgorithms())
    if (const at::Tensor mask = mask_of_masked_fill(self, indices, value); mask.defined())
      return self.masked_fill_(mask.scalar_type() == at::kByte ? mask.to(at::kBool) : mask,
                               value.reshape({}).to(self.device()));
  return at::native::_index_put_impl_(self, indices, value, accumulate, unsafe);
}

// A lone boolean (or byte) mask over more dims than a record takes index
// tensors (x[mask] with a 5-d mask: PyTorch turns it into one index tensor
// per dim) indexes the same elements, in the same order, of self with
// those dims merged into one, by the flattened mask. True with the merged
// operands in *s and *idx; false (nothing to merge) otherwise, including
// a mask whose sizes do not match, whose error the usual path raises.
bool merge_mask_dims(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices, at::Tensor* s,
                     c10::List<std::optional<at::Tensor>>* idx) {
  int64_t at_dim = -1, k = 0;
  for (size_t i = 0; i < indices.size(); i++) {
    const std::optional<at::Tensor> t = indices[i];
    if (!t.has_value() || !t->defined()) continue;
    if (at_dim >= 0 || (t->scalar_type() != at::kBool && t->scalar_type() != at::kByte)) return false;
    at_dim = static_cast<int64_t>(i);
    k = t->dim();
  }
  if (at_dim < 0 || k <= TPU_OP_MAX_INDICES || at_dim + k > self.dim()) return false;
  const at::Tensor& mask = *indices[at_dim];
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().begin() + at_dim);
  for (int64_t d = 0; d < k; d++)
    if (mask.size(d) != self.size(at_dim + d)) return false;
  shape.push_back(mask.numel());
  shape.insert(shape.end(), self.sizes().begin() + at_dim + k, self.sizes().end());
  *s = self.reshape(shape);
  idx->clear();
  for (int64_t d = 0; d < at_dim; d++) idx->push_back(std::nullopt);
  idx->push_back(mask.reshape({-1}));
  return true;
}

at::Tensor index(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices) {
  at::Tensor merged;
  c10::List<std::optional<at::Tensor>> merged_idx;
  if (merge_mask_dims(self, indices, &merged, &merged_idx)) return torch_tpu::index(merged, merged_idx);
  Structured<at::native::structured_index_out> op(OutputKind::Functional, nullptr, "aten::index");
  const auto pre = op.meta(self, at::IOptTensorListRef(indices));
  op.impl(self, pre.sizes, pre.strides, op.output_);
  return std::move(op.output_);
}

at::Tensor& index_out(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices, at::Tensor& out) {
  at::Tensor merged;
  c10::List<std::optional<at::Tensor>> merged_idx;
  if (merge_mask_dims(self, indices, &merged, &merged_idx)) return torch_tpu::index_out(merged, merged_idx, out);
  Structured<at::native::structured_index_out> op(OutputKind::Out, &out, "aten::index");
  const auto pre = op.meta(self, at::IOptTensorListRef(indices));
  op.impl(self, pre.sizes, pre.strides, out);
  return out;
}

// nonzero: the count first (a sync, as on every backend: the result's
// size depends on the data), then one record writes the coordinates.
at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) {
  const char* name = "aten::nonzero";
  TORCH_CHECK(out.scalar_type() == at::kLong, "nonzero: Expected out tensor to have scalar type Long but got ",
              out.scalar_type());
  TORCH_CHECK(self.numel() < std::numeric_limits<int32_t>::max(), "nonzero is not supported for tensors with more "
              "than INT_MAX elements");
  const SyncSite site("torch.nonzero: its output size needs the data (so do x[mask] and masked_select)");
  const int64_t count = self.numel() == 0 ? 0 : self.ne(0).sum().item<int64_t>();
  at::native::resize_output(out, {count, self.dim()});
  if (count == 0 || self.dim() == 0) return out;
  check_in_storage(self, name);
  tpu_op op{};
  op.code = TPU_OP_INDEX;
  op.fn = TPU_INDEX_NONZERO;
  op.n_in = 1;
  op.out = describe(out, name);
  op.in[0] = describe(self, name);
  submit(self.device().index(), op, name);
  return out;
}

at::Tensor nonzero(const at::Tensor& self) {
  at::Tensor out = at::empty({0}, self.options().dtype(at::kLong));
  return nonzero_out(self, out);
}

using T = const at::Tensor&;
using S = const c10::Scalar&;
using at::meta::structured_gather;
using at::native::structured_scatter_add;
using at::native::structured_scatter_src_out;
using at::native::structured_scatter_value_out;
using at::native::structured_scatter_reduce_out;
using at::native::structured_scatter_value_reduce_out;
using at::native::structured_scatter_reduce_two;
using V = c10::string_view;

// A structured op whose PyTorch impl calls the DispatchStubs above: meta,
// then impl (which copies self into out and scatters into out).
template <class Impl, OpName Name, class... Args>
at::Tensor scatter_functional(T self, Args... args) {
  Structured<Impl> op(OutputKind::Functional, nullptr, Name.str);
  op.meta(self, args...);
  op.impl(self, args..., op.output_);
  return std::move(op.output_);
}

template <class Impl, OpName Name, class... Args>
at::Tensor& scatter_inplace(at::Tensor& self, Args... args) {
  Structured<Impl> op(OutputKind::Inplace, &self, Name.str);
  op.meta(self, args...);
  op.impl(self, args..., self);
  return self;
}

template <class Impl, OpName Name, class... Args>
at::Tensor& scatter_out(T self, Args... args, at::Tensor& out) {
  Structured<Impl> op(OutputKind::Out, &out, Name.str);
  op.meta(self, args...);
  op.impl(self, args..., out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("index_select", index_select);
  m.impl("index_select.out", index_select_out);
  m.impl("gather", structured_functional<structured_gather, &gather_kernel, "aten::gather", T, int64_t, T, bool>);
  m.impl("gather.out", structured_out<structured_gather, &gather_kernel, "aten::gather", T, int64_t, T, bool>);
  m.impl("embedding_dense_backward", embedding_dense_backward);
  m.impl("index.Tensor", index);
  m.impl("index.Tensor_out", index_out);
  m.impl("_index_put_impl_", index_put_impl_);
  m.impl("nonzero", nonzero);
  m.impl("nonzero.out", nonzero_out);
  m.impl("scatter.src", scatter_functional<structured_scatter_src_out, "aten::scatter", int64_t, T, T>);
  m.impl("scatter_.src", scatter_inplace<structured_scatter_src_out, "aten::scatter_", int64_t, T, T>);
  m.impl("scatter.src_out", scatter_out<structured_scatter_src_out, "aten::scatter", int64_t, T, T>);
  m.impl("scatter.value", scatter_functional<structured_scatter_value_out, "aten::scatter", int64_t, T, S>);
  m.impl("scatter_.value", scatter_inplace<structured_scatter_value_out, "aten::scatter_", int64_t, T, S>);
  m.impl("scatter.value_out", scatter_out<structured_scatter_value_out, "aten::scatter", int64_t, T, S>);
  m.impl("scatter_add", scatter_functional<structured_scatter_add, "aten::scatter_add", int64_t, T, T>);
  m.impl("scatter_add_", scatter_inplace<structured_scatter_add, "aten::scatter_add_", int64_t, T, T>);
  m.impl("scatter_add.out", scatter_out<structured_scatter_add, "aten::scatter_add", int64_t, T, T>);
  m.impl("scatter.reduce", scatter_functional<structured_scatter_reduce_out, "aten::scatter", int64_t, T, T, V>);
  m.impl("scatter_.reduce", scatter_inplace<structured_scatter_reduce_out, "aten::scatter_", int64_t, T, T, V>);
  m.impl("scatter.reduce_out", scatter_out<structured_scatter_reduce_out, "aten::scatter", int64_t, T, T, V>);
  m.impl("scatter.value_reduce",
         scatter_functional<structured_scatter_value_reduce_out, "aten::scatter", int64_t, T, S, V>);
  m.impl("scatter_.value_reduce",
         scatter_inplace<structured_scatter_value_reduce_out, "aten::scatter_", int64_t, T, S, V>);
  m.impl("scatter.value_reduce_out",
         scatter_out<structured_scatter_value_reduce_out, "aten::scatter", int64_t, T, S, V>);
  m.impl("scatter_reduce.two",
         scatter_functional<structured_scatter_reduce_two, "aten::scatter_reduce", int64_t, T, T, V, bool>);
  m.impl("scatter_reduce_.two",
         scatter_inplace<structured_scatter_reduce_two, "aten::scatter_reduce_", int64_t, T, T, V, bool>);
  m.impl("scatter_reduce.two_out",
         scatter_out<structured_scatter_reduce_two, "aten::scatter_reduce", int64_t, T, T, V, bool>);
}

}  // namespace torch_tpu

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(scatter_stub, &torch_tpu::scatter_stub)
REGISTER_PRIVATEUSE1_DISPATCH(scatter_add_stub, &torch_tpu::scatter_add_stub)
REGISTER_PRIVATEUSE1_DISPATCH(scatter_fill_stub, &torch_tpu::scatter_fill_stub)
REGISTER_PRIVATEUSE1_DISPATCH(scatter_reduce_two_stub, &torch_tpu::scatter_reduce_two_stub)
REGISTER_PRIVATEUSE1_DISPATCH(scatter_reduce_stub, &torch_tpu::scatter_reduce_stub)
REGISTER_PRIVATEUSE1_DISPATCH(scatter_scalar_reduce_stub, &torch_tpu::scatter_scalar_reduce_stub)
REGISTER_PRIVATEUSE1_DISPATCH(index_stub, &torch_tpu::index_stub)
REGISTER_PRIVATEUSE1_DISPATCH(index_put_stub, &torch_tpu::index_put_stub)
REGISTER_PRIVATEUSE1_DISPATCH(index_put_with_sort_stub, &torch_tpu::index_put_with_sort_stub)
}  // namespace at::native
