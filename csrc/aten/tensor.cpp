// The ops every backend must provide natively: allocation, views, resize,
// set_, scalar reads, fill and record_stream. Views only rewrite metadata,
// so they reuse ATen's device-independent implementations.
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "core/glue.h"
#include "core/sync_debug.h"

namespace torch_tpu {
namespace {

constexpr auto kTpu = c10::DeviceType::PrivateUse1;

const char* kSupportedDtypes =
    "float32, float64, float16, bfloat16, int8, int16, int32, int64, uint8, bool";

void check_dtype(at::ScalarType type, const char* op) {
  tpu_dtype d;
  TORCH_CHECK_TYPE(to_tpu_dtype(type, &d), op, ": tpu does not support dtype ", type, " (supported: ",
                   kSupportedDtypes, ")");
}

// The checks every factory shares; returns the chip and dtype to allocate.
std::pair<c10::DeviceIndex, at::ScalarType> factory_target(const char* op, std::optional<at::ScalarType> dtype,
                                                           std::optional<c10::Layout> layout,
                                                           std::optional<c10::Device> device,
                                                           std::optional<bool> pin_memory) {
  const c10::Device d = c10::device_or_default(device);
  TORCH_CHECK(d.type() == kTpu, op, ": expected a tpu device, got ", d);
  const c10::DeviceIndex chip = d.has_index() ? d.index() : current_chip();
  check_chip_index(chip, op);
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, op,
              ": tpu supports only strided tensors, got layout ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), op, ": only CPU tensors can be pinned");
  const at::ScalarType type = c10::dtype_or_default(dtype);
  check_dtype(type, op);
  return {chip, type};
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  const auto [chip, type] = factory_target("empty", dtype, layout, device, pin_memory);
  c10::DeviceGuard guard(c10::Device(kTpu, chip));
  return at::detail::empty_generic(size, device_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   type, memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  const auto [chip, type] = factory_target("empty_strided", dtype, layout, device, pin_memory);
  c10::DeviceGuard guard(c10::Device(kTpu, chip));
  return at::detail::empty_strided_generic(size, stride, device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), type);
}

}  // namespace

at::Tensor new_output(at::IntArrayRef sizes, at::IntArrayRef strides, const at::TensorOptions& options) {
  const c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
  const at::ScalarType type = options.dtype().toScalarType();
  const c10::DeviceIndex chip = options.device().has_index() ? options.device().index() : current_chip();
  // The allocator takes the calling thread's current chip.
  std::optional<c10::DeviceGuard> guard;
  if (chip != current_chip()) guard.emplace(c10::Device(kTpu, chip));
  if (strides.empty())
    return at::detail::empty_generic(sizes, device_allocator(), keys, type, options.memory_format_opt());
  return at::detail::empty_strided_generic(sizes, strides, device_allocator(), keys, type);
}

namespace {

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::cpu::as_strided(self, size, stride, storage_offset);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  for (int64_t s : size) TORCH_CHECK(s >= 0, "resize_: sizes must be non-negative, got ", size);
  auto* impl = self.unsafeGetTensorImpl();
  const size_t needed = at::detail::computeStorageNbytesContiguous(size, self.dtype().itemsize(),
                                                                   self.storage_offset());
  if (needed > self.storage().nbytes()) resize_storage_bytes(self.storage(), needed);
  impl->set_sizes_contiguous(size);
  const auto format = memory_format.value_or(c10::MemoryFormat::Contiguous);
  if (format != c10::MemoryFormat::Preserve) impl->empty_tensor_restride(format);
  return self;
}

at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage source, int64_t offset,
                                      c10::IntArrayRef size, c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == kTpu, "set_: expected a tpu storage, got one on ", source.device());
  TORCH_CHECK(offset >= 0, "set_: storage offset must be non-negative, got ", offset);
  TORCH_CHECK(stride.empty() || stride.size() == size.size(), "set_: got ", size.size(), " sizes but ",
              stride.size(), " strides");
  for (int64_t s : size) TORCH_CHECK(s >= 0, "set_: sizes must be non-negative, got ", size);
  // A view reaching past the storage grows it, as on the CPU. Grow it here,
  // on its own chip and in stream order: the CPU kernel would memcpy the
  // old bytes at once (racing with queued work) into memory of the
  // current chip.
  const int64_t itemsize = static_cast<int64_t>(self.dtype().itemsize());
  const size_t needed =
      c10::multiply_integers(size) == 0 ? 0
      : stride.empty()                  ? at::detail::computeStorageNbytesContiguous(size, itemsize, offset)
                                        : at::detail::computeStorageNbytes(size, stride, itemsize, offset);
  if (needed > source.nbytes()) resize_storage_bytes(source, needed);
  return at::cpu::set_(self, source, offset, size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  TORCH_CHECK(source.device().type() == kTpu, "set_: expected a tpu storage, got one on ", source.device());
  return at::cpu::set_(self, source);
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  TORCH_CHECK(source.device().type() == kTpu, "set_: expected a tpu tensor, got one on ", source.device());
  return at::cpu::set_(self, source);
}

// Gives self an empty storage of its own chip (the CPU kernel would give it
// a CPU storage, which set_ then refuses).
at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, device_allocator(), /*resizable=*/true);
  return self.set_(empty, 0, {0}, {});
}

// .item(): waits for the value through a device-to-host copy.
c10::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  const SyncSite site("Tensor.item()");
  at::Tensor host = at::empty({}, self.options().device(at::kCPU));
  copy_tensor(host, self.reshape({}), /*non_blocking=*/false);
  return host.item();
}

}  // namespace

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  if (self.numel() == 0) return self;
  tpu_dtype dt;
  TORCH_CHECK_NOT_IMPLEMENTED(to_tpu_dtype(self.scalar_type(), &dt), "fill_: tpu does not support dtype ",
                              self.scalar_type());
  check_in_storage(self, "fill_");
  TORCH_CHECK_TYPE(!value.isComplex(), "fill_: cannot fill a ", self.scalar_type(),
                   " tensor with the complex value ", value);
  // Every element gets the same value, so an expanded tensor (PyTorch's
  // fill_ accepts one) is filled through its first slice along each
  // stride-0 dim: the kernel then never writes one address twice.
  at::Tensor target = self;
  for (int64_t d = 0; d < self.dim(); d++)
    if (self.stride(d) == 0) target = target.narrow(d, 0, 1);
  at::assert_no_internal_overlap(target);
  tpu_op op{};
  op.code = TPU_OP_FILL;
  op.p.fill.value = to_tpu_scalar(value, self.scalar_type(), /*checked=*/true);
  for_each_describable_slice({target}, [&](const std::vector<at::Tensor>& t) {
    describe_elementwise("fill_", {&t[0]}, &op.out);
    submit(self.device().index(), op, "aten::fill_.Scalar");
  });
  return self;
}

namespace {

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ", value.dim(),
              " dimensions.");
  // As on the CPU backend, the value converts as a copy would (int64 300
  // fills an int8 tensor with 44), not with fill_.Scalar's overflow check.
  // The Tensor overload, unlike the Scalar one, refuses an expanded self.
  at::assert_no_internal_overlap(self);
  if (value.is_complex()) return fill_scalar(self, value.item());  // refused there, with its message
  return fill_scalar(self, value.to(self.scalar_type()).item());
}

at::Tensor& zero_(at::Tensor& self) { return fill_scalar(self, 0); }

// Whether `from`'s TensorImpl may replace `self`'s in place (Tensor.data =,
// Module.to). PyTorch's built-in answer lists only its in-tree dense
// backends, so without this a CPU parameter could not take a tpu tensor:
// Module.to("tpu") would create new Parameter objects and silently untie
// shared weights (an LM head tied to its embedding, say).
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto plain_dense = [](const at::Tensor& t) {
    const auto type = t.device().type();
    return t.layout() == c10::Layout::Strided && !t.is_quantized() && !t.is_nested() &&
           (type == c10::DeviceType::CPU || type == kTpu);
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (plain_dense(self) && plain_dense(from));
}

void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kTpu, "record_stream: expected a tpu stream, got ", stream);
  if (self.storage().data() == nullptr) return;
  TPU_CHECK_STATUS(tpu_mem_record_stream(self.storage().mutable_data(), c_stream(stream)));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("view", at::native::view);
  m.impl("_reshape_alias", at::native::_reshape_alias);
  m.impl("unfold", at::native::unfold);
  m.impl("resize_", resize_);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("fill_.Scalar", fill_scalar);
  m.impl("fill_.Tensor", fill_tensor);
  m.impl("zero_", zero_);
  m.impl("record_stream", record_stream);
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

}  // namespace torch_tpu
