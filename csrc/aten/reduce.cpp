// Reductions over any dims as TPU_OP_REDUCE records. The kernel writes a
// keepdim-shaped view of the output, so keepdim=False and out= need no
// extra copies. sum and mean have hand-written metadata (below); amax,
// amin, argmax, argmin, any, all, prod.dim_int and max/min.dim run on
// PyTorch's own structured metas (shapes, dtypes, keepdim, out= checks
// and errors as on CPU), and their kernel only submits records.
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/all_meta.h>
#include <ATen/ops/amax_meta.h>
#include <ATen/ops/amin_meta.h>
#include <ATen/ops/any_meta.h>
#include <ATen/ops/argmax_meta.h>
#include <ATen/ops/argmin_meta.h>
#include <ATen/ops/cumprod_meta.h>
#include <ATen/ops/cumsum_meta.h>
#include <ATen/ops/isin_meta.h>
#include <ATen/ops/linalg_vector_norm_meta.h>
#include <ATen/ops/max_meta.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/min_meta.h>
#include <ATen/ops/prod_meta.h>
#include <ATen/ops/std_mean_ops.h>
#include <ATen/ops/std_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/var_mean_ops.h>
#include <ATen/ops/var_ops.h>
#include <torch/library.h>

#include <bitset>

#include "core/fallback.h"
#include "core/glue.h"
#include "core/structured.h"

namespace torch_tpu {
namespace {

struct ReduceKind {
  tpu_reduce_fn code;
  const char* name;
};

const ReduceKind kSum{TPU_REDUCE_SUM, "aten::sum"};
const ReduceKind kMean{TPU_REDUCE_MEAN, "aten::mean"};
const ReduceKind kProd{TPU_REDUCE_PROD, "aten::prod"};
const ReduceKind kAmax{TPU_REDUCE_AMAX, "aten::amax"};
const ReduceKind kAmin{TPU_REDUCE_AMIN, "aten::amin"};
const ReduceKind kArgmax{TPU_REDUCE_ARGMAX, "aten::argmax"};
const ReduceKind kArgmin{TPU_REDUCE_ARGMIN, "aten::argmin"};
const ReduceKind kAny{TPU_REDUCE_ANY, "aten::any"};
const ReduceKind kAll{TPU_REDUCE_ALL, "aten::all"};
const ReduceKind kNorm{TPU_REDUCE_NORM, "aten::linalg_vector_norm"};
const ReduceKind kVar{TPU_REDUCE_VAR, "aten::var"};
const ReduceKind kStd{TPU_REDUCE_STD, "aten::std"};

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
void run(const ReduceKind& k, const at::Tensor& self, uint32_t mask, bool keepdim, const at::Tensor& out,
         double ord = 0.0, double correction = 0.0) {
  TORCH_CHECK(self.dim() <= TPU_MAX_DIMS, k.name, ": tensors of more than ", TPU_MAX_DIMS,
              " dims are not supported on tpu (got ", self.dim(), ")");
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
  op.p.reduce.ord = ord;
  op.p.reduce.correction = correction;
  const at::Tensor scratch = attach_scratch(op, self);
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


// ---- reductions on PyTorch's structured metas.

// Whether the kernel may write `out` while it reads `self`: a given out=
// that shares memory with self gets a fresh result copied in afterwards.
template <class Submit>
void into_output(const at::Tensor& self, const at::Tensor& out, Submit&& submit_into) {
  if (!out.defined() || out.numel() == 0) return;
  if (out.is_alias_of(self)) {
    at::Tensor fresh = at::empty_like(out, at::MemoryFormat::Contiguous);
    submit_into(fresh);
    copy_tensor(out, fresh, false);
    return;
  }
  at::assert_no_internal_overlap(out);
  submit_into(out);
}

// A reduction over the dims of `dims` (none or empty: all), into the
// structured op's output `out`.
void reduce_into(const ReduceKind& k, const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim,
                 const at::Tensor& out) {
  check_in_storage(self, k.name);
  const uint32_t mask = reduce_mask(self, dims);
  into_output(self, out, [&](const at::Tensor& dst) { run(k, self, mask, keepdim, dst); });
}

// argmax/argmin: over one dim, or over the flattened tensor.
void arg_into(const ReduceKind& k, const at::Tensor& self, std::optional<int64_t> dim, bool keepdim,
              const at::Tensor& out) {
  check_in_storage(self, k.name);
  if (dim.has_value()) {
    const int64_t d = at::maybe_wrap_dim(*dim, self.dim());
    into_output(self, out, [&](const at::Tensor& dst) {
      run(k, self, self.dim() == 0 ? 0u : 1u << d, keepdim, dst);
    });
    return;
  }
  const at::Tensor flat = self.reshape({-1});
  into_output(self, out, [&](const at::Tensor& dst) { run(k, flat, 1u, true, dst.view({1})); });
}

template <class Meta, const ReduceKind& K>
void amax_kernel(Structured<Meta>& op, const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  reduce_into(K, self, dim, keepdim, op.output_);
}

template <class Meta, const ReduceKind& K>
void arg_kernel(Structured<Meta>& op, const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  arg_into(K, self, dim, keepdim, op.output_);
}

// any/all over a dim list: an empty list reduces nothing (unlike sum's
// legacy rule), which is what the meta's output shape says.
template <class Meta, const ReduceKind& K>
void bool_dims_kernel(Structured<Meta>& op, const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim) {
  if (dim.has_value() && dim->empty()) {
    check_in_storage(self, K.name);
    into_output(self, op.output_, [&](const at::Tensor& dst) { run(K, self, 0u, true, dst); });
    return;
  }
  reduce_into(K, self, dim, keepdim, op.output_);
}

template <class Meta, const ReduceKind& K>
void bool_dim_kernel(Structured<Meta>& op, const at::Tensor& self, int64_t dim, bool keepdim) {
  reduce_into(K, self, at::IntArrayRef{dim}, keepdim, op.output_);
}

template <class Meta, const ReduceKind& K>
void bool_all_kernel(Structured<Meta>& op, const at::Tensor& self) {
  reduce_into(K, self, std::nullopt, false, op.output_);
}

void prod_dim_kernel(Structured<at::meta::structured_prod_dim_int>& op, const at::Tensor& self, int64_t dim,
                     bool keepdim, std::optional<at::ScalarType>) {
  reduce_into(kProd, self, at::IntArrayRef{dim}, keepdim, op.output_);
}

// max.dim / min.dim: the values (AMAX) and their first index (ARGMAX), two
// records over the same dim.
template <class Meta, const ReduceKind& Values, const ReduceKind& Indices>
void minmax_dim_kernel(Structured<Meta>& op, const at::Tensor& self, int64_t dim, bool keepdim) {
  reduce_into(Values, self, at::IntArrayRef{dim}, keepdim, op.outputs_[0]);
  arg_into(Indices, self, dim, keepdim, op.outputs_[1]);
}

template <class Meta, const ReduceKind& Values, const ReduceKind& Indices, OpName Name>
std::tuple<at::Tensor, at::Tensor> minmax_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  Structured<Meta> op(OutputKind::Functional, nullptr, Name.str);
  op.meta(self, dim, keepdim);
  minmax_dim_kernel<Meta, Values, Indices>(op, self, dim, keepdim);
  return {std::move(op.outputs_[0]), std::move(op.outputs_[1])};
}

template <class Meta, const ReduceKind& Values, const ReduceKind& Indices, OpName Name>
std::tuple<at::Tensor&, at::Tensor&> minmax_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                    at::Tensor& values, at::Tensor& indices) {
  Structured<Meta> op(OutputKind::Out, {values, indices}, Name.str);
  op.meta(self, dim, keepdim);
  minmax_dim_kernel<Meta, Values, Indices>(op, self, dim, keepdim);
  return {values, indices};
}

// max() and min() of a whole tensor: a 0-d amax, which needs elements.
template <const ReduceKind& K>
at::Tensor full_minmax(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, K.code == TPU_REDUCE_AMAX ? "max" : "min",
              "(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim "
              "with the 'dim' argument.");
  at::Tensor out = at::empty({}, self.options());
  reduce_into(K, self, std::nullopt, false, out);
  return out;
}

// prod(self, dtype) of a whole tensor: integers (and bool) give int64, as sum.
at::Tensor full_prod(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  const at::ScalarType type = reduce_dtype(kSum, self, dtype);
  check_inputs(kProd, self, type, dtype);
  at::Tensor out = at::empty({}, self.options().dtype(type));
  reduce_into(kProd, cast_input(kSum, self, type), std::nullopt, false, out);
  return out;
}

// One SCAN record of src along dim into out (and the positions into
// `positions` for cummax / cummin). 0-d tensors go as 1-d. The kernel reads
// elements of a line it has already written only in place (out == src);
// any other overlap, or an out overlapping itself, goes through a fresh
// result copied back.
void submit_scan(tpu_scan_fn fn, const char* name, const at::Tensor& src, const at::Tensor& out, int64_t dim,
                 const at::Tensor& positions = at::Tensor()) {
  if (out.numel() == 0) return;
  const auto as_1d = [](const at::Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; };
  const bool fresh = (out.is_alias_of(src) && !out.is_same(src)) ||
                     at::has_internal_overlap(out) == at::MemOverlap::Yes;
  const at::Tensor dst = fresh ? at::empty_like(out, at::MemoryFormat::Contiguous) : out;
  const at::Tensor src1 = as_1d(src), dst1 = as_1d(dst);
  check_in_storage(src1, name);
  check_in_storage(dst1, name);
  tpu_op rec{};
  rec.code = TPU_OP_SCAN;
  rec.fn = fn;
  rec.n_in = 1;
  rec.in[0] = describe(src1, name);
  rec.out = describe(dst1, name);
  if (positions.defined()) {
    const at::Tensor pos1 = as_1d(positions);
    check_in_storage(pos1, name);
    rec.n_aux = 1;
    rec.aux[0] = describe(pos1, name);
  }
  rec.p.scan.dim = static_cast<int32_t>(at::maybe_wrap_dim(dim, src1.dim()));
  submit(src.device().index(), rec, name);
  if (fresh) copy_tensor(out, dst, false);
}

// cumsum / cumprod. As on CPU, the input is first converted to the
// result's dtype (cumsum(x, dtype=f16) rounds x first).
template <class Meta, tpu_scan_fn Fn>
void scan_kernel(Structured<Meta>& op, const at::Tensor& self, int64_t dim, std::optional<at::ScalarType>) {
  const at::Tensor& out = op.output_;
  const at::ScalarType type = out.scalar_type();
  const at::Tensor src = converts_exactly(self.scalar_type(), type) ? self : self.to(type);
  submit_scan(Fn, Fn == TPU_SCAN_CUMSUM ? "aten::cumsum" : "aten::cumprod", src, out, dim);
}

// cummax / cummin: PyTorch's composite cummax allocates values and
// indices (self's sizes) and calls this helper; one SCAN record fills both.
template <tpu_scan_fn Fn>
void cum_extreme_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  const char* name = Fn == TPU_SCAN_CUMMAX ? "aten::cummax" : "aten::cummin";
  check_same_device(name, self.device(), {{"values", &values}, {"indices", &indices}});
  submit_scan(Fn, name, self, values, dim, indices);
}

// logcumsumexp: floats only, as on CPU; the result has self's dtype.
at::Tensor& logcumsumexp_out(const at::Tensor& self, int64_t dim, at::Tensor& out) {
  const char* name = "aten::logcumsumexp";
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "\"logcumsumexp_out_cpu\" not implemented for '",
              self.scalar_type(), "'");
  at::native::resize_output(out, self.sizes());
  check_same_device(name, self.device(), {{"out", &out}});
  submit_scan(TPU_SCAN_LOGCUMSUMEXP, name, self, out, dim);
  return out;
}

at::Tensor logcumsumexp(const at::Tensor& self, int64_t dim) {
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
  return logcumsumexp_out(self, dim, out);
}

// isin: whether each element equals any test element, as native ops. Few
// comparisons (at most 2^24): the elements against the test elements,
// or-ed. Many: sort the test elements and the elements together (tests
// first, stable, so a test sorts before equal elements); an element is in
// the set when the last test at or before it in sorted order is equal.
// O(n log n) either way with no element-by-test matrix.
void isin_into(const at::Tensor& elements, const at::Tensor& test, bool invert, const at::Tensor& out) {
  if (out.numel() == 0) return;
  const at::ScalarType common = at::result_type(elements, test);
  const at::Tensor e = elements.to(common).reshape({-1}), t = test.to(common).reshape({-1});
  const int64_t ne = e.numel(), nt = t.numel();
  at::Tensor found;
  if (nt == 0 || ne * nt <= (int64_t{1} << 24)) {
    found = at::zeros({ne}, out.options());
    if (nt > 0) found = e.unsqueeze(-1).eq(t).any(-1);
  } else {
    const auto [sorted, order] = at::cat({t, e}).sort(/*stable=*/true, 0, /*descending=*/false);
    const at::Tensor is_test = order.lt(nt);
    const at::Tensor seen = is_test.to(at::kLong).cumsum(0);  // tests at or before each position
    const at::Tensor test_at = is_test.nonzero().reshape({-1});
    const at::Tensor last = test_at.index({(seen - 1).clamp_min(0)});
    const at::Tensor hit = seen.gt(0).logical_and(sorted.index({last}).eq(sorted));
    at::Tensor unsorted = at::empty({ne + nt}, out.options().dtype(at::kBool));
    unsorted.index_put_({order}, hit);
    found = unsorted.slice(0, nt);
  }
  if (invert) found = found.logical_not();
  copy_tensor(out, found.view(out.sizes()), false);
}

void isin_kernel(Structured<at::meta::structured_isin_Tensor_Tensor>& op, const at::Tensor& elements,
                 const at::Tensor& test, bool, bool invert) {
  isin_into(elements, test, invert, op.output_);
}

void isin_scalar_kernel(Structured<at::meta::structured_isin_Tensor_Scalar>& op, const at::Tensor& elements,
                        const c10::Scalar& test, bool, bool invert) {
  if (op.output_.numel() == 0) return;
  copy_tensor(op.output_, invert ? elements.ne(test) : elements.eq(test), false);
}

// linalg_vector_norm (norm, clip_grad_norm_, normalize): one REDUCE NORM
// record; the input converted to the result's dtype first when dtype= asks
// for one, as PyTorch does.
void vector_norm_kernel(Structured<at::meta::structured_linalg_vector_norm>& op, const at::Tensor& self,
                        const c10::Scalar& ord, at::OptionalIntArrayRef dim, bool keepdim,
                        std::optional<at::ScalarType> dtype) {
  TORCH_CHECK_NOT_IMPLEMENTED(!self.is_complex(), "linalg.vector_norm: complex tensors are not supported on tpu");
  const at::Tensor& out = op.output_;
  const at::Tensor src = dtype.has_value() ? self.to(*dtype) : self;
  check_in_storage(src, kNorm.name);
  const uint32_t mask = reduce_mask(src, dim);
  into_output(src, out, [&](const at::Tensor& dst) { run(kNorm, src, mask, keepdim, dst, ord.toDouble()); });
}

using at::meta::structured_cumprod;
using at::meta::structured_cumsum;
using at::meta::structured_isin_Tensor_Scalar;
using at::meta::structured_isin_Tensor_Tensor;
using at::meta::structured_all;
using at::meta::structured_all_dim;
using at::meta::structured_all_dims;
using at::meta::structured_amax;
using at::meta::structured_amin;
using at::meta::structured_any;
using at::meta::structured_any_dim;
using at::meta::structured_any_dims;
using at::meta::structured_argmax;
using at::meta::structured_argmin;
using at::meta::structured_max_dim;
using at::meta::structured_min_dim;
using at::meta::structured_prod_dim_int;
using Dims = at::OptionalIntArrayRef;
using OptDtype = std::optional<at::ScalarType>;

// var and std (and var_mean, std_mean): one REDUCE VAR or STD record,
// two passes in f64 over each output's elements (PyTorch's CPU kernels
// also accumulate float in double), divided by max(N - correction, 0),
// rounded once to `type`; the mean of the _mean forms is a MEAN record.
at::Tensor variance(const ReduceKind& k, const char* name, const at::Tensor& self, at::OptionalIntArrayRef dim,
                    const std::optional<c10::Scalar>& correction, bool keepdim, at::ScalarType type) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), name, ": only floating-point dtypes are supported on tpu, got ",
              self.scalar_type());
  check_inputs(k, self, type, std::nullopt);
  const uint32_t mask = reduce_mask(self, dim);
  at::Tensor out = at::empty(reduced_shape(self, mask, keepdim), self.options().dtype(type));
  const double corr = correction.has_value() ? correction->toDouble() : 1.0;
  const int64_t count = out.numel() > 0 ? self.numel() / out.numel() : 0;
  if (static_cast<double>(count) - corr <= 0)  // as the CPU warns
    TORCH_WARN(name, "(): degrees of freedom is <= 0. Correction should be strictly less than the reduction ",
               "factor (input numel divided by output numel).");
  run(k, self, mask, keepdim, out, 0.0, corr);
  return out;
}

// Inputs of more than TPU_MAX_DIMS dims take the CPU fallback, as sum's.
template <bool Sqrt>
at::Tensor var_std(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<c10::Scalar>& correction,
                   bool keepdim) {
  if (self.dim() > TPU_MAX_DIMS) {
    using Op = std::conditional_t<Sqrt, at::_ops::std_correction, at::_ops::var_correction>;
    return at::native::call_fallback_fn<&cpu_fallback, Op>::call(self, dim, correction, keepdim);
  }
  return variance(Sqrt ? kStd : kVar, Sqrt ? "std" : "var", self, dim, correction, keepdim, self.scalar_type());
}

template <bool Sqrt>
std::tuple<at::Tensor, at::Tensor> var_std_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                const std::optional<c10::Scalar>& correction, bool keepdim) {
  if (self.dim() > TPU_MAX_DIMS) {
    using Op = std::conditional_t<Sqrt, at::_ops::std_mean_correction, at::_ops::var_mean_correction>;
    return at::native::call_fallback_fn<&cpu_fallback, Op>::call(self, dim, correction, keepdim);
  }
  at::Tensor v = variance(Sqrt ? kStd : kVar, Sqrt ? "std_mean" : "var_mean", self, dim, correction, keepdim,
                          self.scalar_type());
  return {v, functional(kMean, self, dim, keepdim, std::nullopt)};
}

// out=: computed in out's dtype when it is floating (a bf16 input's
// variance into an f64 out keeps f64's precision, as on the CPU); a
// dtype the result cannot be cast to is an error, as on the CPU.
template <bool Sqrt>
at::Tensor& var_std_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                        const std::optional<c10::Scalar>& correction, bool keepdim, at::Tensor& out) {
  if (self.dim() > TPU_MAX_DIMS) {
    using Op = std::conditional_t<Sqrt, at::_ops::std_correction_out, at::_ops::var_correction_out>;
    return at::native::call_fallback_fn<&cpu_fallback, Op>::call(self, dim, correction, keepdim, out);
  }
  TORCH_CHECK(at::canCast(self.scalar_type(), out.scalar_type()), "result type ", self.scalar_type(),
              " can't be cast to the desired output type ", out.scalar_type());
  const at::ScalarType type = at::isFloatingType(out.scalar_type()) ? out.scalar_type() : self.scalar_type();
  const at::Tensor r = variance(Sqrt ? kStd : kVar, Sqrt ? "std" : "var", self, dim, correction, keepdim, type);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
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

  using T = const at::Tensor&;
  m.impl("amax", structured_functional<structured_amax, &amax_kernel<structured_amax, kAmax>, "aten::amax", T,
                                       at::IntArrayRef, bool>);
  m.impl("amax.out", structured_out<structured_amax, &amax_kernel<structured_amax, kAmax>, "aten::amax", T,
                                    at::IntArrayRef, bool>);
  m.impl("amin", structured_functional<structured_amin, &amax_kernel<structured_amin, kAmin>, "aten::amin", T,
                                       at::IntArrayRef, bool>);
  m.impl("amin.out", structured_out<structured_amin, &amax_kernel<structured_amin, kAmin>, "aten::amin", T,
                                    at::IntArrayRef, bool>);
  m.impl("argmax", structured_functional<structured_argmax, &arg_kernel<structured_argmax, kArgmax>,
                                         "aten::argmax", T, std::optional<int64_t>, bool>);
  m.impl("argmax.out", structured_out<structured_argmax, &arg_kernel<structured_argmax, kArgmax>, "aten::argmax",
                                      T, std::optional<int64_t>, bool>);
  m.impl("argmin", structured_functional<structured_argmin, &arg_kernel<structured_argmin, kArgmin>,
                                         "aten::argmin", T, std::optional<int64_t>, bool>);
  m.impl("argmin.out", structured_out<structured_argmin, &arg_kernel<structured_argmin, kArgmin>, "aten::argmin",
                                      T, std::optional<int64_t>, bool>);
  m.impl("any", structured_functional<structured_any, &bool_all_kernel<structured_any, kAny>, "aten::any", T>);
  m.impl("any.all_out", structured_out<structured_any, &bool_all_kernel<structured_any, kAny>, "aten::any", T>);
  m.impl("any.dim", structured_functional<structured_any_dim, &bool_dim_kernel<structured_any_dim, kAny>,
                                          "aten::any", T, int64_t, bool>);
  m.impl("any.out", structured_out<structured_any_dim, &bool_dim_kernel<structured_any_dim, kAny>, "aten::any", T,
                                   int64_t, bool>);
  m.impl("any.dims", structured_functional<structured_any_dims, &bool_dims_kernel<structured_any_dims, kAny>,
                                           "aten::any", T, Dims, bool>);
  m.impl("any.dims_out", structured_out<structured_any_dims, &bool_dims_kernel<structured_any_dims, kAny>,
                                        "aten::any", T, Dims, bool>);
  m.impl("all", structured_functional<structured_all, &bool_all_kernel<structured_all, kAll>, "aten::all", T>);
  m.impl("all.all_out", structured_out<structured_all, &bool_all_kernel<structured_all, kAll>, "aten::all", T>);
  m.impl("all.dim", structured_functional<structured_all_dim, &bool_dim_kernel<structured_all_dim, kAll>,
                                          "aten::all", T, int64_t, bool>);
  m.impl("all.out", structured_out<structured_all_dim, &bool_dim_kernel<structured_all_dim, kAll>, "aten::all", T,
                                   int64_t, bool>);
  m.impl("all.dims", structured_functional<structured_all_dims, &bool_dims_kernel<structured_all_dims, kAll>,
                                           "aten::all", T, Dims, bool>);
  m.impl("all.dims_out", structured_out<structured_all_dims, &bool_dims_kernel<structured_all_dims, kAll>,
                                        "aten::all", T, Dims, bool>);
  m.impl("prod.dim_int", structured_functional<structured_prod_dim_int, &prod_dim_kernel, "aten::prod", T, int64_t,
                                               bool, OptDtype>);
  m.impl("prod.int_out", structured_out<structured_prod_dim_int, &prod_dim_kernel, "aten::prod", T, int64_t, bool,
                                        OptDtype>);
  m.impl("prod", full_prod);
  m.impl("max.dim", minmax_dim<structured_max_dim, kAmax, kArgmax, "aten::max">);
  m.impl("max.dim_max", minmax_dim_out<structured_max_dim, kAmax, kArgmax, "aten::max">);
  m.impl("min.dim", minmax_dim<structured_min_dim, kAmin, kArgmin, "aten::min">);
  m.impl("min.dim_min", minmax_dim_out<structured_min_dim, kAmin, kArgmin, "aten::min">);
  constexpr auto kCumsum = &scan_kernel<structured_cumsum, TPU_SCAN_CUMSUM>;
  constexpr auto kCumprod = &scan_kernel<structured_cumprod, TPU_SCAN_CUMPROD>;
  m.impl("cumsum", structured_functional<structured_cumsum, kCumsum, "aten::cumsum", T, int64_t, OptDtype>);
  m.impl("cumsum_", structured_inplace<structured_cumsum, kCumsum, "aten::cumsum_", int64_t, OptDtype>);
  m.impl("cumsum.out", structured_out<structured_cumsum, kCumsum, "aten::cumsum", T, int64_t, OptDtype>);
  m.impl("cumprod", structured_functional<structured_cumprod, kCumprod, "aten::cumprod", T, int64_t, OptDtype>);
  m.impl("cumprod_", structured_inplace<structured_cumprod, kCumprod, "aten::cumprod_", int64_t, OptDtype>);
  m.impl("cumprod.out", structured_out<structured_cumprod, kCumprod, "aten::cumprod", T, int64_t, OptDtype>);
  m.impl("isin.Tensor_Tensor", structured_functional<structured_isin_Tensor_Tensor, &isin_kernel, "aten::isin", T,
                                                     T, bool, bool>);
  m.impl("isin.Tensor_Tensor_out", structured_out<structured_isin_Tensor_Tensor, &isin_kernel, "aten::isin", T, T,
                                                  bool, bool>);
  m.impl("isin.Tensor_Scalar", structured_functional<structured_isin_Tensor_Scalar, &isin_scalar_kernel,
                                                     "aten::isin", T, const c10::Scalar&, bool, bool>);
  m.impl("isin.Tensor_Scalar_out", structured_out<structured_isin_Tensor_Scalar, &isin_scalar_kernel, "aten::isin",
                                                  T, const c10::Scalar&, bool, bool>);
  m.impl("linalg_vector_norm", structured_functional<at::meta::structured_linalg_vector_norm, &vector_norm_kernel,
                                                     "aten::linalg_vector_norm", T, const c10::Scalar&, Dims, bool,
                                                     OptDtype>);
  m.impl("linalg_vector_norm.out", structured_out<at::meta::structured_linalg_vector_norm, &vector_norm_kernel,
                                                  "aten::linalg_vector_norm", T, const c10::Scalar&, Dims, bool,
                                                  OptDtype>);
  m.impl("var.correction", var_std<false>);
  m.impl("std.correction", var_std<true>);
  m.impl("var_mean.correction", var_std_mean<false>);
  m.impl("std_mean.correction", var_std_mean<true>);
  m.impl("var.correction_out", var_std_out<false>);
  m.impl("std.correction_out", var_std_out<true>);
  m.impl("_cummax_helper", cum_extreme_helper<TPU_SCAN_CUMMAX>);
  m.impl("_cummin_helper", cum_extreme_helper<TPU_SCAN_CUMMIN>);
  m.impl("_logcumsumexp", logcumsumexp);
  m.impl("_logcumsumexp.out", logcumsumexp_out);
  m.impl("max", full_minmax<kAmax>);
  m.impl("min", full_minmax<kAmin>);
}

}  // namespace torch_tpu
