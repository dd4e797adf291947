// The small vocabulary every csrc/ file shares: turning C statuses into
// PyTorch exceptions, describing ATen tensors as C tensor records, finding
// the current stream, and submitting an op record. Metadata only: anything
// that computes on elements belongs in src/.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Stream.h>

#include <functional>
#include <initializer_list>
#include <vector>

extern "C" {
#include "tpu/op.h"
#include "tpu/runtime.h"
}

namespace torch_tpu {

// Raises the PyTorch exception that matches a failed C status, with the C
// library's message, the call site, and the C status name.
[[noreturn]] void throw_status(tpu_status status, const char* expr, const char* file, int line);

// Evaluates a tpu_status expression and raises on failure.
#define TPU_CHECK_STATUS(expr)                                               \
  do {                                                                       \
    tpu_status tpu_check_status_ = (expr);                                   \
    if (tpu_check_status_ != TPU_OK)                                         \
      ::torch_tpu::throw_status(tpu_check_status_, #expr, __FILE__, __LINE__); \
  } while (0)

// Initialises the runtime or raises (bad configuration, forked child).
void ensure_runtime();

// Number of chips; 0 if the runtime cannot start (never raises).
c10::DeviceIndex chip_count() noexcept;

// Raises a RuntimeError naming `what` and the index for an index outside
// [0, chip_count()). Takes 64 bits, so that callers holding a wider index
// (from Python) check it before narrowing it to a DeviceIndex.
void check_chip_index(int64_t index, const char* what);

// The calling thread's current chip and, per chip, its current stream.
c10::DeviceIndex current_chip();
void set_current_chip(c10::DeviceIndex index);
c10::Stream current_stream(c10::DeviceIndex index);
void set_current_stream(const c10::Stream& stream);

// The C stream behind a c10::Stream of this device (id = stream index).
tpu_stream* c_stream(const c10::Stream& stream);
tpu_stream* current_c_stream(c10::DeviceIndex index);

// tpu_dtype for an ATen dtype; false if the virtual TPU has no such dtype.
bool to_tpu_dtype(at::ScalarType type, tpu_dtype* out);

// Raises a RuntimeError naming `op` if some element of t lies outside its
// storage (a view left over a storage shrunk with resize_). The runtime
// refuses such records anyway; this names the op before any view or copy
// of PyTorch's own trips over the tensor with a message of its own.
void check_in_storage(const at::Tensor& t, const char* op);

// Raises PyTorch's own "Expected all tensors to be on the same device"
// error, naming `op` and the argument, if a defined tensor of `tensors` is
// not on `device`. The native ops whose PyTorch meta does not check
// devices call it before describing their operands.
void check_same_device(const char* op, const c10::Device& device,
                       std::initializer_list<std::pair<const char*, const at::Tensor*>> tensors);

// Whether a value of dtype `from` converts to `to` exactly (no rounding,
// no wrap): then converting it straight to a wider compute type gives the
// same number as converting it to `to` first.
bool converts_exactly(at::ScalarType from, at::ScalarType to);

// Describes a tensor (device or host memory) as a C record, dims as they
// are, with its storage's bounds (which tpu_op_check enforces). Raises,
// naming `op`, NotImplementedError for a dtype the virtual TPU does not
// have and RuntimeError for more than TPU_MAX_DIMS dims.
tpu_tensor describe(const at::Tensor& t, const char* op);

// A host scalar converted to `type` as PyTorch converts it, then given in
// both forms (see tpu_scalar in op.h). `checked`: raise if the value
// overflows the type (fill_); otherwise wrap as a cast does (operands).
tpu_scalar to_tpu_scalar(const c10::Scalar& s, at::ScalarType type, bool checked);

// Describes tensors of equal sizes (with their storage bounds, as
// describe) for an element-wise op, first merging
// adjacent dims that every tensor stores contiguously relative to each
// other: fewer dims make the kernels' loops shorter and let contiguous data
// take the fast paths. Raises if more than TPU_MAX_DIMS dims remain or a
// dtype is not one the virtual TPU has; `op` names the op in the message.
void describe_elementwise(const char* op, std::initializer_list<const at::Tensor*> tensors, tpu_tensor* out);

// Calls fn once with `tensors` (1 to 3, of equal sizes) when they merge to
// at most TPU_MAX_DIMS dims, which is the common case; otherwise once per
// slice along their leading dims, each slice small enough in rank to
// describe. Lets element-wise ops and copies take tensors of any rank.
void for_each_describable_slice(const std::vector<at::Tensor>& tensors,
                                const std::function<void(const std::vector<at::Tensor>&)>& fn);

// Gives `op` the device scratch it asks for (tpu_op_scratch_bytes), taken
// from the chip's allocator for the current stream; returns the tensor
// that owns it (undefined when none is needed). Freeing it right after
// submitting is safe: stream order keeps the block for this op.
at::Tensor attach_scratch(tpu_op& op, const at::Tensor& like);

// Submits an op to the current stream of `chip` under a static name
// ("aten::add.out") used in kernel error messages.
void submit(c10::DeviceIndex chip, tpu_op& op, const char* name);

// Copies between two tensors of broadcastable sizes and any rank, either
// of which may live on the host, converting dtypes; see copy.cpp.
void copy_tensor(const at::Tensor& dst, const at::Tensor& src, bool non_blocking);

// A new tensor of a kernel's output on options' tpu chip (a structured
// op's functional output): what at::empty / at::empty_strided would give,
// without a second trip through the dispatcher for every op. options'
// device must be a valid tpu chip (it is an input's).
at::Tensor new_output(at::IntArrayRef sizes, at::IntArrayRef strides, const at::TensorOptions& options);

// The device allocator (csrc/core/allocator.cpp) and the pinned host one.
c10::Allocator* device_allocator();
c10::Allocator* pinned_host_allocator();
bool is_pinned_host_ptr(const void* ptr);

// Gives a tpu storage `nbytes` of new memory on its chip, keeping the first
// min(old, new) bytes (copied in stream order). Raises for a non-resizable
// storage or on OOM (the old memory is then untouched).
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes);

}  // namespace torch_tpu
