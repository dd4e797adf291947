// Reflection and replication padding (1-d, 2-d and 3-d, with backward),
// composed of native gathers: each padded dim is one index_select with the
// map from output positions to input positions (computed on the host, one
// small vector per dim); the backward scatters the gradient back with
// index_add, dim by dim in the reverse order. Negative padding crops, as
// PyTorch allows.
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <string>
#include <vector>

#include "core/glue.h"

namespace torch_tpu {
namespace {

using T = const at::Tensor&;
using A = at::IntArrayRef;

// Output position o of a dim of size n padded by (left, right) reads input
// position map[o]: mirrored about the edge elements (reflect) or clamped
// to them (replicate).
std::vector<int64_t> pad_map(int64_t n, int64_t left, int64_t right, bool reflect) {
  std::vector<int64_t> map(static_cast<size_t>(n + left + right));
  for (int64_t o = 0; o < n + left + right; o++) {
    int64_t i = o - left;
    if (reflect) {
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
    } else {
      i = std::min(std::max<int64_t>(i, 0), n - 1);
    }
    map[static_cast<size_t>(o)] = i;
  }
  return map;
}

// PyTorch's argument checks for a `dims`-d pad of `self`.
void check_pad(const char* name, T self, A padding, int dims, bool reflect) {
  TORCH_CHECK(static_cast<int>(padding.size()) == 2 * dims, name, ": padding size is expected to be ", 2 * dims,
              ", but got: ", padding.size());
  TORCH_CHECK(self.dim() == dims + 1 || self.dim() == dims + 2, name, ": Expected ", dims + 1, "D or ", dims + 2,
              "D (batch mode) tensor with possibly 0 batch size and other non-zero dimensions for input, but got: ",
              self.sizes());
  for (int k = 0; k < dims; k++) {
    const int64_t d = self.dim() - 1 - k, n = self.size(d), l = padding[2 * k], r = padding[2 * k + 1];
    TORCH_CHECK(n > 0, name, ": Expected input's non-batch dimensions to have positive length, but input has a ",
                "shape of ", self.sizes());
    TORCH_CHECK(!reflect || (l < n && r < n), name, ": Padding size should be less than the corresponding input ",
                "dimension, but got: padding (", l, ", ", r, ") at dimension ", d, " of input ", self.sizes());
    TORCH_CHECK(n + l + r >= 1, name, ": input (", self.sizes(), ") is too small. Calculated output size at ",
                "dimension ", d, ": ", n + l + r);
  }
}

at::Tensor index_of(const std::vector<int64_t>& map, const at::Device& device) {
  return at::tensor(map, at::TensorOptions().dtype(at::kLong)).to(device);
}

template <int Dims, bool Reflect>
at::Tensor pad_forward(T self, A padding) {
  const char* name = Reflect ? "reflection_pad" : "replication_pad";
  check_pad(name, self, padding, Dims, Reflect);
  at::Tensor x = self;
  for (int k = 0; k < Dims; k++) {
    const int64_t d = self.dim() - 1 - k;
    x = x.index_select(d, index_of(pad_map(self.size(d), padding[2 * k], padding[2 * k + 1], Reflect),
                                   self.device()));
  }
  return x.contiguous(self.suggest_memory_format());
}

template <int Dims, bool Reflect>
at::Tensor& pad_forward_out(T self, A padding, at::Tensor& out) {
  const at::Tensor r = pad_forward<Dims, Reflect>(self, padding);
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}

// The adjoint: every output position's gradient added to the input
// position it read, one dim at a time, the last padded dim last.
template <int Dims, bool Reflect>
at::Tensor pad_backward(T grad, T self, A padding) {
  const char* name = Reflect ? "reflection_pad_backward" : "replication_pad_backward";
  check_pad(name, self, padding, Dims, Reflect);
  check_same_device(name, self.device(), {{"grad_output", &grad}});
  at::Tensor g = grad;
  for (int k = Dims - 1; k >= 0; k--) {
    const int64_t d = self.dim() - 1 - k;
    const std::vector<int64_t> map = pad_map(self.size(d), padding[2 * k], padding[2 * k + 1], Reflect);
    TORCH_CHECK(g.size(d) == static_cast<int64_t>(map.size()), name, ": grad_output has size ", g.size(d),
                " at dimension ", d, ", expected ", map.size());
    std::vector<int64_t> sizes(g.sizes().begin(), g.sizes().end());
    sizes[static_cast<size_t>(d)] = self.size(d);
    g = at::zeros(sizes, g.options()).index_add_(d, index_of(map, self.device()), g);
  }
  return g;
}

template <int Dims, bool Reflect>
at::Tensor& pad_backward_out(T grad, T self, A padding, at::Tensor& grad_input) {
  const at::Tensor r = pad_backward<Dims, Reflect>(grad, self, padding);
  at::native::resize_output(grad_input, r.sizes());
  return grad_input.copy_(r);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
#define TPU_PAD(kind, dims, reflect)                                                   \
  m.impl(#kind "_pad" #dims "d", pad_forward<dims, reflect>);                          \
  m.impl(#kind "_pad" #dims "d.out", pad_forward_out<dims, reflect>);                  \
  m.impl(#kind "_pad" #dims "d_backward", pad_backward<dims, reflect>);                \
  m.impl(#kind "_pad" #dims "d_backward.grad_input", pad_backward_out<dims, reflect>)
  TPU_PAD(reflection, 1, true);
  TPU_PAD(reflection, 2, true);
  TPU_PAD(reflection, 3, true);
  TPU_PAD(replication, 1, false);
  TPU_PAD(replication, 2, false);
  TPU_PAD(replication, 3, false);
#undef TPU_PAD
}

}  // namespace torch_tpu
