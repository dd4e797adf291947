// torch.autocast("tpu"): the same op lists and cast policies PyTorch uses
// for CUDA (matrix products and convolutions in the lower-precision dtype,
// numerically sensitive ops in f32, mixed-dtype ops promoted), registered
// for the AutocastPrivateUse1 key. Every other op passes straight through.
#include <ATen/Operators.h>
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torch_tpu {
namespace {

// The op lists spell signatures with unqualified ATen names.
using at::Scalar;
using at::ScalarType;
using at::Tensor;
using at::IntArrayRef;

#define TPU_AUTOCAST_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TPU_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TPU_AUTOCAST_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TPU_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(TPU_AUTOCAST_LOWER_PRECISION)
  AT_FORALL_FP32(TPU_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_AUTOCAST_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(TPU_AUTOCAST_PROMOTE)
}

}  // namespace
}  // namespace torch_tpu
