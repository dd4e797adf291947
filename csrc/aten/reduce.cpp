// sum and mean over any dims, as TPU_OP_REDUCE records (TPU_REDUCE_SUM / _MEAN). The
// kernel writes a keepdim-shaped view of the output, so keepdim=False and
// out= need no extra copies.
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/sum_ops.h>
#include <torch/library.h>

#include <bitset>

#include "core/fallback.h"
#include "core/glue.h"

namespace torch_tpu {
namespace {

struct ReduceKind {
  tpu_reduce_fn code;
  const char* name;
};

const ReduceKind kSum{TPU_REDUCE_SUM, "aten::sum"};
const ReduceKind kMean{TPU_REDUCE_MEAN, "aten::mean"};

at::ScalarType reduce_dtype(const ReduceKind& k, const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  if (dtype.has_value()) return *dtype;
  const at::ScalarType in = self.scalar_type();
  if (k.code == TPU_REDUCE_SUM && at::isIntegralType(in, /*includeBool=*/true)) return at::kLong;
  return in;
}

// Bit d set for every reduced dim; an empty list means all dims.
uint32_t reduce_mask(const at::Tensor& self, at::OptionalIntArrayRef dims) {
  const int64_t ndim = self.dim();
  if (!dims.has_value() || dims->empty()) return ndim == 0 ? 0u : static_cast<uint32_t>((1ull << ndim) - 1);
  const std::bitset<64> bits = at::dim_list_to_bitset(*dims, ndim);  // wraps and rejects repeats
  return ndim == 0 ? 0u : static_cast<uint32_t>(bits.to_ullong());
}

std::vector<int64_t> reduced_shape(const at::Tensor& self, uint32_t mask, bool keepdim) {
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < self.dim(); d++) {
    if (mask & (1u << d)) {
      if (keepdim) shape.push_back(1);
    } else {
      shape.push_back(self.size(d));
    }
  }
  return shape;
}

// `out` has the final shape; submit the op on its keepdim-shaped view.
void run(const ReduceKind& k, const at::Tensor& self, uint32_t mask, bool keepdim, const at::Tensor& out) {
  TORCH_INTERNAL_ASSERT(self.dim() <= TPU_MAX_DIMS);  // larger ranks take the fallback (see below)
  at::Tensor out_kd = out;
  if (!keepdim)
    for (int64_t d = 0; d < self.dim(); d++)
      if (mask & (1u << d)) out_kd = out_kd.unsqueeze(d);
  if (out_kd.numel() == 0) return;
  tpu_op op{};
  op.code = TPU_OP_REDUCE;
  op.fn = k.code;
  op.n_in = 1;
  op.out = describe(out_kd, k.name);
  op.in[0] = describe(self, k.name);
  op.p.reduce.mask = mask;
  // A split reduction keeps its partial sums in device scratch, taken for
  // the current stream: freeing it right after submitting is safe, as only
  // later work on this stream can reuse the block.
  at::Tensor scratch;
  if (const int64_t bytes = tpu_op_scratch_bytes(&op); bytes > 0) {
    scratch = at::empty({bytes}, self.options().dtype(at::kByte));
    op.scratch = scratch.data_ptr();
    op.scratch_nbytes = bytes;
  }
  submit(self.device().index(), op, k.name);
}

// PyTorch's sum casts the input to the result dtype first (sum(x,
// dtype=f16) of [1e5, -1e5, 1] is nan): where that cast is inexact, do it
// too, instead of accumulating the exact values. Its mean computes in at
// least f32 and does not; nor does the kernel.
at::Tensor cast_input(const ReduceKind& k, const at::Tensor& self, at::ScalarType type) {
  if (k.code != TPU_REDUCE_SUM || converts_exactly(self.scalar_type(), type)) return self;
  return self.to(type);
}

// out_type: the dtype computed into; dtype: the one the caller asked for.
// Mean infers its dtype from that or, without one, from the input (an
// integer input is an error whatever out is), as on the CPU.
void check_inputs(const ReduceKind& k, const at::Tensor& self, at::ScalarType out_type,
                  std::optional<at::ScalarType> dtype) {
  TORCH_CHECK_TYPE(!self.is_complex(), k.name, ": complex tensors are not supported on tpu yet");
  for (at::ScalarType t : {self.scalar_type(), out_type}) {
    tpu_dtype dt;
    TORCH_CHECK_NOT_IMPLEMENTED(to_tpu_dtype(t, &dt), k.name, ": tpu does not support dtype ", t);
  }
  check_in_storage(self, k.name);
  const at::ScalarType inferred = dtype.value_or(self.scalar_type());
  if (k.code == TPU_REDUCE_MEAN)
    TORCH_CHECK(at::isFloatingType(inferred) && at::isFloatingType(out_type),
                "mean(): could not infer output dtype. ",
                "Input dtype must be either a floating point or complex dtype. Got: ",
                at::isFloatingType(inferred) ? out_type : inferred);
}

at::Tensor functional(const ReduceKind& k, const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                      std::optional<at::ScalarType> dtype) {
  const at::ScalarType type = reduce_dtype(k, self, dtype);
  check_inputs(k, self, type, dtype);
  const uint32_t mask = reduce_mask(self, dims);
  at::Tensor out = at::empty(reduced_shape(self, mask, keepdim), self.options().dtype(type));
  run(k, cast_input(k, self, type), mask, keepdim, out);
  return out;
}

at::Tensor& out_variant(const ReduceKind& k, const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                        std::optional<at::ScalarType> dtype, at::Tensor& out) {
  TORCH_CHECK(out.device() == self.device(), k.name, ": expected out on ", self.device(), ", got ", out.device());
  const at::ScalarType type = dtype.value_or(out.scalar_type());
  check_inputs(k, self, type, dtype);
  TORCH_CHECK(!dtype.has_value() || *dtype == out.scalar_type(), k.name, ": expected out dtype ", *dtype,
              " but got ", out.scalar_type());
  const uint32_t mask = reduce_mask(self, dims);
  if (out.is_alias_of(self)) {
    // The kernel reads self while it writes out, and resizing out first
    // could even reshape self: compute into a fresh tensor, then store.
    const at::Tensor result = functional(k, self, dims, keepdim, type);
    at::native::resize_output(out, result.sizes());
    copy_tensor(out, result, false);
    return out;
  }
  at::native::resize_output(out, reduced_shape(self, mask, keepdim));
  at::assert_no_internal_overlap(out);
  run(k, cast_input(k, self, type), mask, keepdim, out);
  return out;
}

}  // namespace

// The reduce kernel describes its operands dim for dim, so inputs of more
// than TPU_MAX_DIMS dims take the CPU fallback (counted, as every fallback).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("sum.dim_IntList", [](const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                               std::optional<at::ScalarType> dtype) {
    if (self.dim() > TPU_MAX_DIMS)
      return at::native::call_fallback_fn<&cpu_fallback, at::_ops::sum_dim_IntList>::call(self, dims, keepdim,
                                                                                          dtype);
    return functional(kSum, self, dims, keepdim, dtype);
  });
  m.impl("sum.IntList_out", [](const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                               std::optional<at::ScalarType> dtype, at::Tensor& out) -> at::Tensor& {
    if (self.dim() > TPU_MAX_DIMS)
      return at::native::call_fallback_fn<&cpu_fallback, at::_ops::sum_IntList_out>::call(self, dims, keepdim,
                                                                                          dtype, out);
    return out_variant(kSum, self, dims, keepdim, dtype, out);
  });
  m.impl("mean.dim", [](const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                        std::optional<at::ScalarType> dtype) {
    if (self.dim() > TPU_MAX_DIMS)
      return at::native::call_fallback_fn<&cpu_fallback, at::_ops::mean_dim>::call(self, dims, keepdim, dtype);
    return functional(kMean, self, dims, keepdim, dtype);
  });
  m.impl("mean.out", [](const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                        std::optional<at::ScalarType> dtype, at::Tensor& out) -> at::Tensor& {
    if (self.dim() > TPU_MAX_DIMS)
      return at::native::call_fallback_fn<&cpu_fallback, at::_ops::mean_out>::call(self, dims, keepdim, dtype,
                                                                                   out);
    return out_variant(kMean, self, dims, keepdim, dtype, out);
  });
}

}  // namespace torch_tpu
