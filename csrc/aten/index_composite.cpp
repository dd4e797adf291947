// Indexing ops composed of the native scatters and gathers: index_add,
// index_copy and index_fill scatter along one dim with the 1-d index
// expanded (stride 0) over the other dims; take and put index the
// flattened tensor. Index values are checked by the kernels (an
// IndexError at the next sync); shapes and dtypes here, with PyTorch's
// messages.
#include <ATen/native/Resize.h>
#include <ATen/WrapDimUtils.h>
#include <torch/library.h>

#include "core/glue.h"

namespace torch_tpu {
namespace {

using T = const at::Tensor&;
using S = const c10::Scalar&;

// The checks PyTorch's index_add / index_copy make of index and source.
void check_index_source(const char* op, T self, int64_t dim, T index, T source) {
  TORCH_CHECK_INDEX(index.dim() <= 1, op, "(): Index is supposed to be a vector");
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt, op,
              "(): Expected dtype int32/int64 for index but got: ", index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), op, "(): self (", self.scalar_type(), ") and source (",
              source.scalar_type(), ") must have the same scalar type");
  TORCH_CHECK(self.dim() == source.dim() || (self.dim() <= 1 && source.dim() <= 1), op,
              "(): Source/destination tensor must have same number of dimensions");
  const int64_t n = source.dim() == 0 ? 1 : source.size(dim);
  TORCH_CHECK(index.numel() == n, op, "(): Number of indices (", index.numel(),
              ") should be equal to source.size(dim) (", n, ")");
  for (int64_t d = 0; d < self.dim() && source.dim() > 0; d++)
    TORCH_CHECK(d == dim || self.size(d) == source.size(d), op, "(): self and source must have the same size in ",
                "every dim but ", dim, ", but got self ", self.sizes(), " and source ", source.sizes());
  check_same_device(op, self.device(), {{"index", &index}, {"source", &source}});
}

// The 1-d index as a scatter index of `like`'s sizes: entry k of dim
// `dim` everywhere (stride 0 in the other dims, no copy).
at::Tensor index_along(T index, int64_t dim, const at::Tensor& like) {
  std::vector<int64_t> view(std::max<int64_t>(like.dim(), 1), 1);
  if (like.dim() > 0) view[dim] = index.numel();
  at::Tensor idx = index.reshape(view).to(at::kLong);
  return like.dim() == 0 ? idx.reshape({}) : idx.expand(like.sizes());
}

// index_add / index_copy into out (already holding self's values).
at::Tensor& scatter_along(at::Tensor& out, int64_t dim, T index, T source, const c10::Scalar* alpha) {
  if (index.numel() == 0) return out;
  const at::Tensor src = source.dim() == 0 && out.dim() == 1 ? source.reshape({1}) : source;
  const at::Tensor idx = index_along(index, dim, src);
  if (alpha == nullptr) return out.scatter_(dim, idx, src);
  if (out.scalar_type() == at::kBool)  // bool: alpha acts as a logical factor, as on CPU
    return alpha->toBool() ? out.scatter_add_(dim, idx, src) : out;
  return out.scatter_add_(dim, idx, alpha->equal(1) ? src : src * *alpha);
}

at::Tensor& index_add_out(T self, int64_t dim, T index, T source, S alpha, at::Tensor& out) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  check_index_source("index_add", self, dim, index, source);
  if (!out.is_same(self)) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
  }
  return scatter_along(out, dim, index, source, &alpha);
}

at::Tensor index_add_impl(T self, int64_t dim, T index, T source, S alpha) {
  at::Tensor out = self.clone(at::MemoryFormat::Preserve);
  return index_add_out(out, dim, index, source, alpha, out);
}

at::Tensor& index_add_(at::Tensor& self, int64_t dim, T index, T source, S alpha) {
  return index_add_out(self, dim, index, source, alpha, self);
}

at::Tensor& index_copy_out(T self, int64_t dim, T index, T source, at::Tensor& out) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  check_index_source("index_copy", self, dim, index, source);
  TORCH_CHECK(index.scalar_type() == at::kLong, "index_copy_(): Expected a long tensor for index, but got ",
              index.scalar_type());
  if (!out.is_same(self)) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
  }
  return scatter_along(out, dim, index, source, nullptr);
}

at::Tensor index_copy_impl(T self, int64_t dim, T index, T source) {
  at::Tensor out = self.clone(at::MemoryFormat::Preserve);
  return index_copy_out(out, dim, index, source, out);
}

at::Tensor& index_copy_(at::Tensor& self, int64_t dim, T index, T source) {
  return index_copy_out(self, dim, index, source, self);
}

// index_fill_: negative entries count from the end, as PyTorch's kernel
// takes them; the value goes through scatter's value form.
at::Tensor& index_fill_value(at::Tensor& self, int64_t dim, T index, const at::Tensor& value) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_fill_(): Index is supposed to be a vector");
  TORCH_CHECK(index.scalar_type() == at::kLong, "index_fill_(): Expected dtype int64 for index.");
  check_same_device("index_fill_", self.device(), {{"index", &index}});
  if (index.numel() == 0 || self.numel() == 0) return self;
  // A 0-d self is filled as a 1-element vector (a view: writes reach self).
  at::Tensor target = self.dim() == 0 ? self.view({1}) : self;
  const int64_t d = self.dim() == 0 ? 0 : dim, size = target.size(d);
  const at::Tensor wrapped = at::where(index < 0, index + size, index);
  std::vector<int64_t> sizes(target.sizes().begin(), target.sizes().end()), view(target.dim(), 1);
  sizes[d] = view[d] = index.numel();
  const at::Tensor idx = wrapped.reshape(view).expand(sizes);
  target.scatter_(d, idx, value.to(self.device(), self.scalar_type()).expand(sizes));
  return self;
}

at::Tensor& index_fill_scalar(at::Tensor& self, int64_t dim, T index, S value) {
  return index_fill_value(self, dim, index, at::scalar_tensor(value, self.options()));
}

at::Tensor& index_fill_tensor(at::Tensor& self, int64_t dim, T index, T value) {
  TORCH_CHECK(value.dim() == 0, "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  return index_fill_value(self, dim, index, value);
}

// index_reduce: scatter_reduce with the index expanded along dim (the
// same include_self rule: positions a source element reaches start from
// the reduction's identity when it is false).
at::Tensor& index_reduce_out(T self, int64_t dim, T index, T source, c10::string_view reduce, bool include_self,
                             at::Tensor& out) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK(reduce == "prod" || reduce == "mean" || reduce == "amax" || reduce == "amin",
              "index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got ", reduce, ".");
  check_index_source("index_reduce", self, dim, index, source);
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kBool, "\"index_func_\" not implemented for 'Bool'");
  if (!out.is_same(self)) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
  }
  if (index.numel() == 0) return out;
  const at::Tensor src = source.dim() == 0 && out.dim() == 1 ? source.reshape({1}) : source;
  return out.scatter_reduce_(dim, index_along(index, dim, src), src, reduce, include_self);
}

at::Tensor index_reduce_impl(T self, int64_t dim, T index, T source, c10::string_view reduce, bool include_self) {
  at::Tensor out = self.clone(at::MemoryFormat::Preserve);
  return index_reduce_out(out, dim, index, source, reduce, include_self, out);
}

at::Tensor& index_reduce_(at::Tensor& self, int64_t dim, T index, T source, c10::string_view reduce,
                          bool include_self) {
  return index_reduce_out(self, dim, index, source, reduce, include_self, self);
}

// take: self as 1-d, negative indices from the end; the result has
// index's shape.
at::Tensor take_impl(T self, T index) {
  TORCH_CHECK(index.scalar_type() == at::kLong, "take(): Expected a long tensor for index, but got ",
              index.scalar_type());
  check_same_device("take", self.device(), {{"index", &index}});
  TORCH_CHECK_INDEX(self.numel() > 0 || index.numel() == 0, "take(): tried to take from an empty tensor");
  // Advanced indexing counts a negative index from the end once, and an
  // out-of-range one is an IndexError naming the value the user gave.
  return self.reshape({-1}).index({index.reshape({-1})}).view(index.sizes());
}

at::Tensor& take_out(T self, T index, at::Tensor& out) {
  const at::Tensor r = take_impl(self, index);
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}

// put_: self as 1-d; accumulate adds in index order.
at::Tensor& put_(at::Tensor& self, T index, T source, bool accumulate) {
  TORCH_CHECK(index.scalar_type() == at::kLong, "put_(): Expected a long tensor for index, but got ",
              index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(), "put_(): self and source expected to have the same ",
              "dtype, but got self.dtype = ", self.scalar_type(), " and source.dtype = ", source.scalar_type());
  TORCH_CHECK(index.numel() == source.numel(), "put_(): Expected source and index to have the same number of ",
              "elements, but got source.numel() = ", source.numel(), ", index.numel() = ", index.numel());
  check_same_device("put_", self.device(), {{"index", &index}, {"source", &source}});
  if (index.numel() == 0) return self;
  TORCH_CHECK_INDEX(self.numel() > 0, "put_(): Tried to put elements into an empty tensor");
  const bool direct = self.is_contiguous();
  at::Tensor flat = direct ? self.view({-1}) : self.contiguous().view({-1});
  flat.index_put_({index.reshape({-1})}, source.reshape({-1}), accumulate);  // wraps a negative index once
  if (!direct) self.copy_(flat.view(self.sizes()));
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("index_add", index_add_impl);
  m.impl("index_add_", index_add_);
  m.impl("index_add.out", index_add_out);
  m.impl("index_copy", index_copy_impl);
  m.impl("index_copy_", index_copy_);
  m.impl("index_copy.out", index_copy_out);
  m.impl("index_fill_.int_Scalar", index_fill_scalar);
  m.impl("index_fill_.int_Tensor", index_fill_tensor);
  m.impl("index_reduce", index_reduce_impl);
  m.impl("index_reduce_", index_reduce_);
  m.impl("index_reduce.out", index_reduce_out);
  m.impl("take", take_impl);
  m.impl("take.out", take_out);
  m.impl("put_", put_);
}

}  // namespace torch_tpu
