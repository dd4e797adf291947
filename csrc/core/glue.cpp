// Status translation, tensor descriptors, current chip/stream state and op
// submission: the pieces every registration file uses (see glue.h).
#include "core/glue.h"

#include <ATen/Dispatch.h>

#include <algorithm>
#include <cmath>
#include <array>
#include <atomic>
#include <functional>
#include <string>
#include <vector>

namespace torch_tpu {

[[noreturn]] void throw_status(tpu_status status, const char* expr, const char* file, int line) {
  std::string msg = tpu_last_error_message();
  if (msg.empty()) msg = std::string(expr) + " failed";
  msg += " [" + std::string(tpu_status_str(status)) + " at " + file + ":" + std::to_string(line) + "]";
  tpu_clear_error();
  switch (status) {
    case TPU_ERR_OUT_OF_MEMORY:
      TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
    case TPU_ERR_INVALID_ARG:
      TORCH_CHECK_VALUE(false, msg);
    case TPU_ERR_UNSUPPORTED_DTYPE:
      TORCH_CHECK_TYPE(false, msg);
    case TPU_ERR_INDEX:
      TORCH_CHECK_INDEX(false, msg);
    case TPU_ERR_EXTERNAL:  // a collective a stream waited for (torch.distributed.DistBackendError)
      TORCH_CHECK_WITH(DistBackendError, false, msg);
    default:
      TORCH_CHECK(false, msg);
  }
}

void check_same_device(const char* op, const c10::Device& device,
                       std::initializer_list<std::pair<const char*, const at::Tensor*>> tensors) {
  for (const auto& [what, t] : tensors)
    TORCH_CHECK(t == nullptr || !t->defined() || t->device() == device,
                "Expected all tensors to be on the same device, but found at least two devices, ", device, " and ",
                t->device(), "! (when checking argument for argument ", what, " in method ", op, ")");
}

at::Tensor attach_scratch(tpu_op& op, const at::Tensor& like) {
  const int64_t bytes = tpu_op_scratch_bytes(&op);
  if (bytes <= 0) return {};
  at::Tensor scratch = at::empty({bytes}, like.options().dtype(at::kByte));
  op.scratch = scratch.data_ptr();
  op.scratch_nbytes = bytes;
  return scratch;
}

void ensure_runtime() { TPU_CHECK_STATUS(tpu_runtime_init()); }

c10::DeviceIndex chip_count() noexcept {
  if (tpu_runtime_init() != TPU_OK) {
    tpu_clear_error();
    return 0;
  }
  return static_cast<c10::DeviceIndex>(tpu_chip_count());
}

namespace {
// The chip count once the runtime is up (it never changes after), so that
// the check every op makes skips tpu_runtime_init. 0 until then; a forked
// child takes the slow path, whose init raises.
std::atomic<int> g_chip_count{0};
}  // namespace

void check_chip_index(int64_t index, const char* what) {
  int count = g_chip_count.load(std::memory_order_relaxed);
  if (count == 0 || tpu_runtime_is_forked()) {
    ensure_runtime();
    count = tpu_chip_count();
    g_chip_count.store(count, std::memory_order_relaxed);
  }
  TORCH_CHECK(index >= 0 && index < count, what, ": invalid device index tpu:", index,
              " (this process has ", count, " tpu chip", count == 1 ? "" : "s",
              "; set TORCH_TPU_CHIPS for more)");
}

namespace {
// Per thread, as on CUDA: the current chip, and per chip the index of the
// current stream (0 = default stream).
constexpr int kMaxChips = 64;
thread_local c10::DeviceIndex tls_chip = 0;
thread_local std::array<int, kMaxChips> tls_stream_index{};
// The C stream each chip's current stream is, filled on first use and
// cleared when the current stream changes. Streams live as long as the
// process, so the pointer stays valid (a forked child's submit is refused
// by the runtime itself).
thread_local std::array<tpu_stream*, kMaxChips> tls_c_stream{};
}  // namespace

c10::DeviceIndex current_chip() { return tls_chip; }

void set_current_chip(c10::DeviceIndex index) {
  check_chip_index(index, "set_device");
  tls_chip = index;
}

c10::Stream current_stream(c10::DeviceIndex index) {
  if (index < 0) index = tls_chip;
  check_chip_index(index, "current_stream");
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index),
                     tls_stream_index[index]);
}

void set_current_stream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1, "set_stream: expected a tpu stream, got ",
              stream);
  check_chip_index(stream.device_index(), "set_stream");
  TORCH_CHECK(stream.id() >= 0 && stream.id() < TPU_STREAMS_MAX, "set_stream: invalid tpu stream id ",
              stream.id());
  tls_stream_index[stream.device_index()] = static_cast<int>(stream.id());
  tls_c_stream[stream.device_index()] = nullptr;
}

tpu_stream* c_stream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1, "expected a tpu stream, got ", stream);
  check_chip_index(stream.device_index(), "stream");
  TORCH_CHECK(stream.id() >= 0 && stream.id() < TPU_STREAMS_MAX, "invalid tpu stream id ", stream.id());
  tpu_stream* s = nullptr;
  TPU_CHECK_STATUS(tpu_stream_get(stream.device_index(), static_cast<int>(stream.id()), &s));
  return s;
}

tpu_stream* current_c_stream(c10::DeviceIndex index) {
  if (index < 0) index = tls_chip;
  if (index < kMaxChips) {
    if (tpu_stream* s = tls_c_stream[index]) return s;
  }
  tpu_stream* s = c_stream(current_stream(index));
  if (index < kMaxChips) tls_c_stream[index] = s;
  return s;
}

bool to_tpu_dtype(at::ScalarType type, tpu_dtype* out) {
  switch (type) {
    case at::kFloat: *out = TPU_DTYPE_F32; return true;
    case at::kDouble: *out = TPU_DTYPE_F64; return true;
    case at::kHalf: *out = TPU_DTYPE_F16; return true;
    case at::kBFloat16: *out = TPU_DTYPE_BF16; return true;
    case at::kChar: *out = TPU_DTYPE_I8; return true;
    case at::kShort: *out = TPU_DTYPE_I16; return true;
    case at::kInt: *out = TPU_DTYPE_I32; return true;
    case at::kLong: *out = TPU_DTYPE_I64; return true;
    case at::kByte: *out = TPU_DTYPE_U8; return true;
    case at::kBool: *out = TPU_DTYPE_BOOL; return true;
    default: return false;
  }
}

namespace {
// The allocation a tensor's view lies in, for tpu_op_check's bounds check.
void set_storage_bounds(const at::Tensor& t, tpu_tensor& d) {
  if (d.data == nullptr || !t.has_storage()) return;
  d.storage = const_cast<void*>(t.storage().data());
  d.storage_nbytes = static_cast<int64_t>(t.storage().nbytes());
}
}  // namespace

void check_in_storage(const at::Tensor& t, const char* op) {
  if (!t.defined() || !t.has_storage() || t.numel() == 0) return;
  // PyTorch strides are non-negative: the farthest element decides.
  int64_t last = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); d++) last += (t.size(d) - 1) * t.stride(d);
  const uint64_t needed = static_cast<uint64_t>(last + 1) * t.element_size();
  const uint64_t have = t.storage().nbytes();
  TORCH_CHECK(needed <= have, op, ": a tensor of sizes ", t.sizes(), " at storage offset ", t.storage_offset(),
              " needs ", needed, " bytes of its storage, which has ", have,
              " bytes (was the storage resized under it?)");
}

bool converts_exactly(at::ScalarType from, at::ScalarType to) {
  if (from == to || from == at::kBool) return true;
  if (at::isIntegralType(to, /*includeBool=*/false)) {
    if (!at::isIntegralType(from, false)) return false;
    // No wrap: to's range holds from's (by bits, as a double holds them).
    auto range = [](at::ScalarType t, double* lo, double* hi) {
      const double bits = 8.0 * static_cast<double>(c10::elementSize(t));
      const bool is_signed = at::isSignedType(t);
      *lo = is_signed ? -std::ldexp(1.0, static_cast<int>(bits) - 1) : 0.0;
      *hi = std::ldexp(1.0, static_cast<int>(bits) - (is_signed ? 1 : 0)) - 1.0;
    };
    double flo, fhi, tlo, thi;
    range(from, &flo, &fhi);
    range(to, &tlo, &thi);
    return tlo <= flo && fhi <= thi;
  }
  // Into a float: small integers and narrower floats are exact.
  switch (to) {
    case at::kDouble: return from != at::kLong;
    case at::kFloat: return from == at::kByte || from == at::kChar || from == at::kShort || from == at::kHalf ||
                            from == at::kBFloat16;
    case at::kHalf:
    case at::kBFloat16: return from == at::kByte || from == at::kChar;
    default: return false;
  }
}

tpu_tensor describe(const at::Tensor& t, const char* op) {
  tpu_tensor d{};
  TORCH_CHECK_NOT_IMPLEMENTED(to_tpu_dtype(t.scalar_type(), &d.dtype), op, ": tpu does not support dtype ",
                              t.scalar_type());
  TORCH_CHECK(t.dim() <= TPU_MAX_DIMS, op, ": tpu kernels take at most ", TPU_MAX_DIMS, " dims; got ", t.dim());
  d.data = t.numel() == 0 ? nullptr : const_cast<void*>(t.const_data_ptr());
  d.ndim = static_cast<int32_t>(t.dim());
  for (int64_t i = 0; i < t.dim(); i++) {
    d.sizes[i] = t.size(i);
    d.strides[i] = t.stride(i);
  }
  set_storage_bounds(t, d);
  return d;
}

tpu_scalar to_tpu_scalar(const c10::Scalar& s, at::ScalarType type, bool checked) {
  TORCH_CHECK_TYPE(!s.isComplex(), "tpu: complex scalars are not supported yet (got ", s, ")");
  tpu_scalar r{};
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, type, "to_tpu_scalar", [&] {
    const scalar_t v = checked ? s.to<scalar_t>()
                       : s.isFloatingPoint() ? c10::convert<scalar_t>(s.toDouble())
                                             : c10::convert<scalar_t>(s.toLong());
    r.f = static_cast<double>(v);
    // An operand of a bf16/f16 op stays in f32, the op's compute type, as
    // PyTorch's CPU kernels keep it.
    if (!checked && (std::is_same_v<scalar_t, at::Half> || std::is_same_v<scalar_t, at::BFloat16>))
      r.f = static_cast<double>(static_cast<float>(s.toDouble()));
    r.i = std::is_floating_point_v<scalar_t> || std::is_same_v<scalar_t, at::Half> ||
                  std::is_same_v<scalar_t, at::BFloat16>
              ? 0
              : static_cast<int64_t>(v);
  });
  return r;
}

namespace {

// Tensors of equal sizes with adjacent dims folded where every tensor
// stores them contiguously relative to each other.
struct Merged {
  int64_t rank;
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides;  // one list per tensor
};

Merged merge_dims(std::initializer_list<const at::Tensor*> tensors) {
  const at::Tensor& first = **tensors.begin();
  const int64_t ndim = first.dim();
  Merged m{0, std::vector<int64_t>(first.sizes().begin(), first.sizes().end()), {}};
  for (const at::Tensor* t : tensors) {
    TORCH_INTERNAL_ASSERT(t->sizes() == first.sizes());
    m.strides.emplace_back(t->strides().begin(), t->strides().end());
  }
  // Fold dim d into the dim being grown (`cur`) when, for every tensor,
  // stepping once in `cur` equals stepping over all of d; size-1 dims fold
  // into anything.
  int64_t cur = -1;
  for (int64_t d = 0; d < ndim; d++) {
    if (m.sizes[d] == 1 && ndim > 1) continue;
    bool merge = cur >= 0;
    for (size_t k = 0; k < m.strides.size() && merge; k++)
      merge = m.strides[k][cur] == m.strides[k][d] * m.sizes[d];
    if (merge) {
      m.sizes[cur] *= m.sizes[d];
      for (auto& st : m.strides) st[cur] = st[d];
    } else {
      cur++;
      m.sizes[cur] = m.sizes[d];
      for (auto& st : m.strides) st[cur] = st[d];
    }
  }
  m.rank = ndim == 0 ? 0 : std::max<int64_t>(cur + 1, 1);
  if (ndim > 0 && cur < 0) {  // every dim had size 1
    m.sizes[0] = 1;
    for (auto& st : m.strides) st[0] = 1;
  }
  return m;
}

}  // namespace

void describe_elementwise(const char* op, std::initializer_list<const at::Tensor*> tensors, tpu_tensor* out) {
  const Merged m = merge_dims(tensors);
  TORCH_CHECK(m.rank <= TPU_MAX_DIMS, op, ": tpu kernels take at most ", TPU_MAX_DIMS,
              " dims after merging contiguous ones; these tensors still have ", m.rank);
  size_t k = 0;
  for (const at::Tensor* t : tensors) {
    tpu_tensor& d = out[k];
    d = tpu_tensor{};
    TORCH_CHECK_NOT_IMPLEMENTED(to_tpu_dtype(t->scalar_type(), &d.dtype), op, ": tpu does not support dtype ",
                                t->scalar_type());
    d.data = t->numel() == 0 ? nullptr : const_cast<void*>(t->const_data_ptr());
    d.ndim = static_cast<int32_t>(m.rank);
    for (int64_t i = 0; i < m.rank; i++) {
      d.sizes[i] = m.sizes[i];
      d.strides[i] = m.strides[k][i];
    }
    set_storage_bounds(*t, d);
    k++;
  }
}

void for_each_describable_slice(const std::vector<at::Tensor>& tensors,
                                const std::function<void(const std::vector<at::Tensor>&)>& fn) {
  TORCH_INTERNAL_ASSERT(!tensors.empty());
  const at::Tensor& first = tensors.front();
  int64_t rank = 0;
  switch (tensors.size()) {
    case 1: rank = merge_dims({&tensors[0]}).rank; break;
    case 2: rank = merge_dims({&tensors[0], &tensors[1]}).rank; break;
    case 3: rank = merge_dims({&tensors[0], &tensors[1], &tensors[2]}).rank; break;
    default: TORCH_INTERNAL_ASSERT(false, "for_each_describable_slice: at most 3 tensors");
  }
  if (rank <= TPU_MAX_DIMS) {
    fn(tensors);
    return;
  }
  // Too many dims that do not merge: peel off the first dim of size > 1
  // (size-1 dims merge into anything, so this lowers the merged rank) and
  // handle each slice. Such a tensor has >= 2^13 elements, so each slice
  // is still worth a kernel call.
  int64_t d = 0;
  while (first.size(d) == 1) d++;
  std::vector<at::Tensor> slices(tensors.size());
  for (int64_t i = 0; i < first.size(d); i++) {
    for (size_t k = 0; k < tensors.size(); k++) slices[k] = tensors[k].select(d, i);
    for_each_describable_slice(slices, fn);
  }
}

void submit(c10::DeviceIndex chip, tpu_op& op, const char* name) {
  op.name = name;
  TPU_CHECK_STATUS(tpu_stream_submit(current_c_stream(chip), &op));
}

}  // namespace torch_tpu
