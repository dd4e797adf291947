// sort and topk as TPU_OP_SORT records (values and their positions), on
// PyTorch's structured metas (shapes, dim, k and out= checks as on CPU);
// histc as an INDEX HISTC record, with the range taken from the data when
// min == max as PyTorch does; unique, unique_consecutive and bincount
// composed of sort, comparisons, masked_select and scatter_add (their
// result sizes need one host read, as on CPU and CUDA).
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/sort_meta.h>
#include <ATen/native/BucketizationUtils.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/topk_meta.h>
#include <ATen/ops/unique_consecutive_ops.h>
#include <torch/library.h>

#include <cmath>

#include "core/fallback.h"
#include "core/glue.h"
#include "core/sync_debug.h"
#include "core/structured.h"

namespace torch_tpu {
namespace {

// Values and indices of `self` sorted along `dim` (the first k for TOPK)
// into the structured op's outputs.
void sort_into(tpu_sort_fn fn, const char* name, const at::Tensor& self, int64_t dim, bool descending,
               const at::Tensor& values, const at::Tensor& indices) {
  if (values.numel() == 0) return;
  check_in_storage(self, name);
  // The kernel needs fresh outputs: a given out= that shares memory with
  // self, or with the other output, goes through temporaries.
  const bool fresh = values.is_alias_of(self) || indices.is_alias_of(self) || values.is_alias_of(indices);
  at::Tensor v = fresh ? at::empty(values.sizes(), values.options()) : values;
  at::Tensor ix = fresh ? at::empty(indices.sizes(), indices.options()) : indices;
  const auto d1 = [](const at::Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; };
  const at::Tensor self1 = d1(self), v1 = d1(v), ix1 = d1(ix);
  tpu_op op{};
  op.code = TPU_OP_SORT;
  op.fn = fn;
  op.n_in = 1;
  op.n_aux = 1;
  op.in[0] = describe(self1, name);
  op.out = describe(v1, name);
  op.aux[0] = describe(ix1, name);
  op.p.sort.dim = static_cast<int32_t>(at::maybe_wrap_dim(dim, self.dim()));
  op.p.sort.descending = descending;
  const at::Tensor scratch = attach_scratch(op, self);
  submit(self.device().index(), op, name);
  if (fresh) {
    copy_tensor(values, v, false);
    copy_tensor(indices, ix, false);
  }
}

void check_sortable(const at::Tensor& self, const char* name) {
  TORCH_CHECK_NOT_IMPLEMENTED(!self.is_complex(), name, ": complex tensors are not supported on tpu");
}

using at::meta::structured_sort_stable;
using at::meta::structured_topk;

std::tuple<at::Tensor, at::Tensor> sort_stable(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                               bool descending) {
  check_sortable(self, "aten::sort");
  Structured<structured_sort_stable> op(OutputKind::Functional, nullptr, "aten::sort");
  op.meta(self, stable, dim, descending);
  sort_into(TPU_SORT_SORT, "aten::sort", self, dim, descending, op.outputs_[0], op.outputs_[1]);
  return {std::move(op.outputs_[0]), std::move(op.outputs_[1])};
}

std::tuple<at::Tensor&, at::Tensor&> sort_stable_out(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                                     bool descending, at::Tensor& values, at::Tensor& indices) {
  check_sortable(self, "aten::sort");
  Structured<structured_sort_stable> op(OutputKind::Out, {values, indices}, "aten::sort");
  op.meta(self, stable, dim, descending);
  sort_into(TPU_SORT_SORT, "aten::sort", self, dim, descending, values, indices);
  return {values, indices};
}

// topk: the k first of the line sorted descending (largest) or ascending.
// The result is always sorted, which `sorted=False` allows.
std::tuple<at::Tensor, at::Tensor> topk(const at::Tensor& self, int64_t k, int64_t dim, bool largest, bool sorted) {
  check_sortable(self, "aten::topk");
  Structured<structured_topk> op(OutputKind::Functional, nullptr, "aten::topk");
  op.meta(self, k, dim, largest, sorted);
  sort_into(TPU_SORT_TOPK, "aten::topk", self, dim, largest, op.outputs_[0], op.outputs_[1]);
  return {std::move(op.outputs_[0]), std::move(op.outputs_[1])};
}

std::tuple<at::Tensor&, at::Tensor&> topk_out(const at::Tensor& self, int64_t k, int64_t dim, bool largest,
                                              bool sorted, at::Tensor& values, at::Tensor& indices) {
  check_sortable(self, "aten::topk");
  Structured<structured_topk> op(OutputKind::Out, {values, indices}, "aten::topk");
  op.meta(self, k, dim, largest, sorted);
  sort_into(TPU_SORT_TOPK, "aten::topk", self, dim, largest, values, indices);
  return {values, indices};
}

// histc, for every dtype but bool and complex (PyTorch's CPU kernel has no
// integer one; CUDA's has, and mixture-of-experts routing uses it).
at::Tensor& histc_out(const at::Tensor& self, int64_t bins, const c10::Scalar& min, const c10::Scalar& max,
                      at::Tensor& out) {
  const char* name = "aten::histc";
  TORCH_CHECK(bins > 0, "torch.histc(): bins must be > 0, but got ", bins, " for dimension 0");
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kBool && !self.is_complex(),
                              "\"histc\" not implemented for '", self.scalar_type(), "'");
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "torch.histc: input tensor and hist tensor should have the "
              "same dtype, but got input ", self.scalar_type(), " and hist ", out.scalar_type());
  check_same_device("histc", self.device(), {{"out", &out}});
  double lo = min.toDouble(), hi = max.toDouble();
  TORCH_CHECK(!(std::isinf(lo) || std::isinf(hi) || std::isnan(lo) || std::isnan(hi)), "torch.histc: range of [",
              lo, ", ", hi, "] is not finite");
  TORCH_CHECK(lo <= hi, "torch.histc: max must be larger than min");
  if (lo == hi && self.numel() > 0) {
    // The data's own range (a sync, as on every backend).
    const SyncSite site("torch.histc: min == max asks for the data's own range");
    lo = self.min().item<double>();
    hi = self.max().item<double>();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  // As on CPU, the edges are the input's dtype: an element equal to
  // float32(0.1) lies on the edge 0.1.
  if (at::isFloatingType(self.scalar_type())) {
    lo = at::scalar_tensor(lo, at::kDouble).to(self.scalar_type()).item<double>();
    hi = at::scalar_tensor(hi, at::kDouble).to(self.scalar_type()).item<double>();
  }
  at::native::resize_output(out, {bins});
  check_in_storage(self, name);
  tpu_op op{};
  op.code = TPU_OP_INDEX;
  op.fn = TPU_INDEX_HISTC;
  op.n_in = 1;
  op.out = describe(out, name);
  op.in[0] = describe(self, name);
  op.p.hist.lo = lo;
  op.p.hist.hi = hi;
  submit(self.device().index(), op, name);
  return out;
}

at::Tensor histc(const at::Tensor& self, int64_t bins, const c10::Scalar& min, const c10::Scalar& max) {
  at::Tensor out = at::empty({0}, self.options());
  return histc_out(self, bins, min, max, out);
}

// ---- searchsorted / bucketize: one SORT SEARCHSORTED record, after
// PyTorch's own checks; boundaries and values in their common dtype, a
// sorter applied by a gather, 1-d boundaries broadcast (stride 0) over the
// values' leading dims.

at::Tensor& searchsorted_out(const at::Tensor& boundaries, const at::Tensor& self, bool out_int32, bool right,
                             std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter_opt,
                             at::Tensor& out) {
  const char* name = "aten::searchsorted";
  const at::Tensor sorter = sorter_opt.value_or(at::Tensor());
  at::native::searchsorted_pre_check(boundaries, self, out, out_int32, right, side, sorter);
  at::native::resize_output(out, self.sizes());
  if (self.numel() == 0) return out;
  const at::ScalarType common = at::result_type(boundaries, self);
  TORCH_CHECK_NOT_IMPLEMENTED(common != at::kBool, "\"searchsorted_out_cpu\" not implemented for 'Bool'");
  at::Tensor bd = boundaries.to(common);
  if (sorter.defined()) bd = bd.gather(-1, sorter);
  const at::Tensor values = (self.dim() == 0 ? self.reshape({1}) : self).to(common);
  if (bd.dim() == 1 && values.dim() > 1) {
    std::vector<int64_t> sizes(values.sizes().begin(), values.sizes().end());
    sizes.back() = bd.size(0);
    bd = bd.expand(sizes);
  }
  const bool fresh = !out.is_non_overlapping_and_dense() || out.is_alias_of(self) || out.is_alias_of(boundaries);
  at::Tensor dst = fresh ? at::empty(values.sizes(), out.options()) : out.view(values.sizes());
  check_in_storage(bd, name);
  check_in_storage(values, name);
  tpu_op rec{};
  rec.code = TPU_OP_SORT;
  rec.fn = TPU_SORT_SEARCHSORTED;
  rec.n_in = 2;
  rec.in[0] = describe(bd, name);
  rec.in[1] = describe(values, name);
  rec.out = describe(dst, name);
  rec.p.sort.dim = static_cast<int32_t>(values.dim() - 1);
  rec.p.sort.right = right || (side.has_value() && *side == "right");
  submit(self.device().index(), rec, name);
  if (fresh) out.copy_(dst.view(out.sizes()));
  return out;
}

at::Tensor searchsorted_impl(const at::Tensor& boundaries, const at::Tensor& self, bool out_int32, bool right,
                        std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  at::Tensor out = at::empty({0}, self.options().dtype(out_int32 ? at::kInt : at::kLong));
  return searchsorted_out(boundaries, self, out_int32, right, side, sorter, out);
}

at::Tensor searchsorted_scalar(const at::Tensor& boundaries, const c10::Scalar& self, bool out_int32, bool right,
                               std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  return searchsorted_impl(boundaries, at::native::searchsorted_scalar_tensor(self, boundaries.device()), out_int32,
                           right, side, sorter);
}

at::Tensor& searchsorted_scalar_out(const at::Tensor& boundaries, const c10::Scalar& self, bool out_int32, bool right,
                                    std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter,
                                    at::Tensor& out) {
  return searchsorted_out(boundaries, at::native::searchsorted_scalar_tensor(self, boundaries.device()), out_int32,
                          right, side, sorter, out);
}

at::Tensor& bucketize_out(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32, bool right,
                          at::Tensor& out) {
  TORCH_CHECK(boundaries.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(", boundaries.dim(), ")");
  return searchsorted_out(boundaries, self, out_int32, right, std::nullopt, std::nullopt, out);
}

at::Tensor bucketize_impl(const at::Tensor& self, const at::Tensor& boundaries, bool out_int32, bool right) {
  at::Tensor out = at::empty({0}, self.options().dtype(out_int32 ? at::kInt : at::kLong));
  return bucketize_out(self, boundaries, out_int32, right, out);
}

at::Tensor bucketize_scalar(const c10::Scalar& self, const at::Tensor& boundaries, bool out_int32, bool right) {
  return bucketize_impl(at::native::searchsorted_scalar_tensor(self, boundaries.device()), boundaries, out_int32,
                        right);
}

// ---- unique values of a flat sequence: a group starts where an element
// differs from the one before (NaN differs from everything, so each NaN is
// its own group, as on CPU).

std::tuple<at::Tensor, at::Tensor, at::Tensor> groups_of(const at::Tensor& flat, const at::Tensor& order,
                                                         at::IntArrayRef self_sizes, bool return_inverse,
                                                         bool return_counts) {
  const int64_t n = flat.numel();
  const at::Tensor idx_opts = at::empty({0}, flat.options().dtype(at::kLong));
  const at::Tensor starts =
      at::cat({at::ones({1}, flat.options().dtype(at::kBool)), flat.narrow(0, 1, n - 1) != flat.narrow(0, 0, n - 1)});
  const at::Tensor values = flat.masked_select(starts);
  at::Tensor inverse = at::empty({0}, idx_opts.options()), counts = at::empty({0}, idx_opts.options());
  if (return_inverse) {
    const at::Tensor group = starts.cumsum(0) - 1;  // int64: the group of each (ordered) element
    inverse = order.defined() ? at::empty({n}, idx_opts.options()).scatter_(0, order, group) : group;
    inverse = inverse.view(self_sizes);
  }
  if (return_counts) {
    const at::Tensor first = starts.nonzero().view({-1});
    counts = at::cat({first.narrow(0, 1, first.numel() - 1), at::full({1}, n, idx_opts.options())}) - first;
  }
  return {values, inverse, counts};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> empty_groups(const at::Tensor& self, bool return_inverse) {
  const at::TensorOptions idx = self.options().dtype(at::kLong);
  return {at::empty({0}, self.options()), return_inverse ? at::empty(self.sizes(), idx) : at::empty({0}, idx),
          at::empty({0}, idx)};
}

// torch.unique without dim (CPU returns it sorted whatever `sorted` says).
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique2(const at::Tensor& self, bool, bool return_inverse,
                                                       bool return_counts) {
  if (self.numel() == 0) return empty_groups(self, return_inverse);
  const SyncSite site("torch.unique: its output size needs the data");
  auto [sorted, order] = self.reshape({-1}).sort(/*stable=*/true, 0, /*descending=*/false);
  return groups_of(sorted, order, self.sizes(), return_inverse, return_counts);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> unique_consecutive(const at::Tensor& self, bool return_inverse,
                                                                  bool return_counts, std::optional<int64_t> dim) {
  if (dim.has_value() && self.dim() > 1)  // along a dim: whole slices compare; the CPU kernel
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::unique_consecutive>::call(self, return_inverse,
                                                                                         return_counts, dim);
  if (self.numel() == 0) return empty_groups(self, return_inverse);
  const SyncSite site("torch.unique_consecutive: its output size needs the data");
  return groups_of(self.reshape({-1}), at::Tensor(), self.sizes(), return_inverse, return_counts);
}

// bincount: counts (int64), or sums of weights (float32 for float32 weights,
// else float64, as on CPU), of each value in [0, max(minlength, max + 1)).
at::Tensor bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights_opt, int64_t minlength) {
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  TORCH_CHECK(self.dim() == 1 && !at::isFloatingType(self.scalar_type()) && self.scalar_type() != at::kBool,
              "bincount only supports 1-d non-negative integral inputs.");
  const at::Tensor weights = weights_opt.value_or(at::Tensor());
  TORCH_CHECK(!weights.defined() || (weights.dim() == 1 && weights.size(0) == self.size(0)),
              "weights should be 1-d and have the same length as input");
  if (weights.defined()) check_same_device("bincount", self.device(), {{"weights", &weights}});
  int64_t size = minlength;
  if (self.numel() > 0) {
    const SyncSite site("torch.bincount: its output size needs the data's maximum");
    const auto [lo, hi] = at::aminmax(self);
    const at::Tensor range = at::stack({lo, hi}).to(at::kLong).cpu();  // one host read
    TORCH_CHECK(range[0].item<int64_t>() >= 0, "bincount only supports 1-d non-negative integral inputs.");
    size = std::max(size, range[1].item<int64_t>() + 1);
  }
  const at::ScalarType t = !weights.defined() ? at::kLong
                           : weights.scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
  at::Tensor out = at::zeros({size}, self.options().dtype(t));
  if (self.numel() == 0) return out;
  const at::Tensor src = weights.defined() ? weights.to(t) : at::ones({self.numel()}, out.options());
  return out.scatter_add_(0, self.to(at::kLong), src);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("searchsorted.Tensor", searchsorted_impl);
  m.impl("searchsorted.Tensor_out", searchsorted_out);
  m.impl("searchsorted.Scalar", searchsorted_scalar);
  m.impl("searchsorted.Scalar_out", searchsorted_scalar_out);
  m.impl("bucketize.Tensor", bucketize_impl);
  m.impl("bucketize.Tensor_out", bucketize_out);
  m.impl("bucketize.Scalar", bucketize_scalar);
  m.impl("_unique2", unique2);
  m.impl("unique_consecutive", unique_consecutive);
  m.impl("bincount", bincount);
  m.impl("sort.stable", sort_stable);
  m.impl("sort.values_stable", sort_stable_out);
  m.impl("topk", topk);
  m.impl("topk.values", topk_out);
  m.impl("histc", histc);
  m.impl("histc.out", histc_out);
}

}  // namespace torch_tpu
