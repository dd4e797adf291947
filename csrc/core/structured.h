// PyTorch's structured kernels, run on tpu. An op's own meta function
// (at::meta::structured_<op>) computes the output's shape, dtype and
// strides, broadcasting, type promotion and every argument check, exactly
// as it does for CPU and CUDA; for element-wise ops it builds a
// TensorIterator that also merges dims. Structured<Meta> below supplies
// the outputs as PyTorch's generated per-backend code does (allocate,
// check in place, or resize out=), and a kernel function then turns the
// built metadata into op records. So a registration is a few lines and its
// semantics match CPU by construction.
#pragma once

#include <ATen/TensorIterator.h>
#include <ATen/native/Resize.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <cstddef>
#include <type_traits>

#include "core/glue.h"

namespace torch_tpu {

// An op's name as a template argument ("aten::exp"), for messages.
template <std::size_t N>
struct OpName {
  constexpr OpName(const char (&s)[N]) { std::copy_n(s, N, str); }
  char str[N];
};

// How a call provides its output.
enum class OutputKind {
  Functional,  // allocate it
  Inplace,     // it is self: sizes and dtype must match
  Out,         // the caller's out=: checked, resized if needed
};

template <class Meta>
struct Structured final : public Meta {
  // `given`: the caller's tensor for Inplace (self) and Out (out=).
  Structured(OutputKind kind, const at::Tensor* given, const char* name) : kind_(kind), name_(name) {
    if (given != nullptr) outputs_[0] = *given;
  }
  // For ops with several outputs (max.dim's values and indices): the
  // caller's out= tensors, one per output.
  Structured(OutputKind kind, std::initializer_list<at::Tensor> given, const char* name) : kind_(kind), name_(name) {
    TORCH_INTERNAL_ASSERT(given.size() <= outputs_.size());
    std::copy(given.begin(), given.end(), outputs_.begin());
  }

  void set_output_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                          at::TensorOptions options) override {
    set_output(i, sizes, strides, options);
  }
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    set_output(i, sizes, strides, options);
  }
  const at::Tensor& maybe_get_output(int64_t i) override { return outputs_.at(i); }

  std::array<at::Tensor, 3> outputs_;
  at::Tensor& output_ = outputs_[0];

 private:
  void set_output(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides, const at::TensorOptions& options) {
    TORCH_INTERNAL_ASSERT(i >= 0 && i < static_cast<int64_t>(outputs_.size()));
    at::Tensor& output = outputs_[i];
    switch (kind_) {
      case OutputKind::Functional:
        // A dtype the device lacks (a uint16 view) is the op's
        // NotImplementedError, as the CPU's missing kernels are.
        TORCH_CHECK_NOT_IMPLEMENTED(to_tpu_dtype(options.dtype().toScalarType(), &unused_),
                                    name_, ": tpu does not support dtype ", options.dtype());
        output = new_output(sizes, strides, options);
        break;
      case OutputKind::Inplace:
        TORCH_CHECK(options.dtype() == output.dtype(), "Bad in-place call: input tensor dtype ", output.dtype(),
                    " and output tensor dtype ", options.dtype(), " should match");
        TORCH_CHECK(options.device() == output.device(), "Bad in-place call: input tensor device ",
                    output.device(), " and output tensor device ", options.device(), " should match");
        TORCH_CHECK(sizes == output.sizes(), "Bad in-place call: input tensor size ", output.sizes(),
                    " and output tensor size ", sizes, " should match");
        break;
      case OutputKind::Out: {
        TORCH_CHECK(options.dtype() == output.dtype(), "Expected out tensor to have dtype ", options.dtype(),
                    ", but got ", output.dtype(), " instead");
        TORCH_CHECK(options.device() == output.device(), "Expected out tensor to have device ", options.device(),
                    ", but got ", output.device(), " instead");
        // Restride only a freshly resized out; otherwise its own strides stay.
        if (at::native::resize_output(output, sizes) && !strides.empty()) output.as_strided_(sizes, strides);
        break;
      }
    }
    // A TensorIterator meta records the output only now (its base class).
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Meta>) Meta::set_output_raw_strided(i, sizes, strides, options);
  }

  OutputKind kind_;
  const char* name_;
  tpu_dtype unused_;
};

// The three forms of a structured op whose meta takes `Args` and whose
// work is Kernel(meta, args...). Instantiate with the op's meta class, the
// kernel, its name and the meta's argument types, e.g.
//   m.impl("exp", structured_functional<at::meta::structured_exp, &k, "aten::exp", const at::Tensor&>);
template <class Meta, auto Kernel, OpName Name, class... Args>
at::Tensor structured_functional(Args... args) {
  Structured<Meta> op(OutputKind::Functional, nullptr, Name.str);
  op.meta(args...);
  Kernel(op, args...);
  return std::move(op.output_);
}

template <class Meta, auto Kernel, OpName Name, class... Rest>
at::Tensor& structured_inplace(at::Tensor& self, Rest... rest) {
  Structured<Meta> op(OutputKind::Inplace, &self, Name.str);
  op.meta(self, rest...);
  Kernel(op, self, rest...);
  return self;
}

template <class Meta, auto Kernel, OpName Name, class... Args>
at::Tensor& structured_out(Args... args, at::Tensor& out) {
  Structured<Meta> op(OutputKind::Out, &out, Name.str);
  op.meta(args...);
  Kernel(op, args...);
  return out;
}

}  // namespace torch_tpu
