#include "core/iterator.h"

#include <c10/util/SmallVector.h>

#include <array>

namespace torch_tpu {

tpu_tensor describe_iterator_operand(const at::TensorIteratorBase& iter, int arg, char* data, int ndim) {
  tpu_tensor t{};
  const at::TensorBase& base = iter.tensor_base(arg);
  t.data = data;
  TORCH_INTERNAL_ASSERT(to_tpu_dtype(iter.dtype(arg), &t.dtype));
  t.ndim = ndim;
  const int64_t es = static_cast<int64_t>(iter.element_size(arg));
  for (int d = 0; d < ndim; d++) {
    t.sizes[d] = iter.shape()[ndim - 1 - d];
    t.strides[d] = iter.strides(arg)[ndim - 1 - d] / es;
  }
  t.storage = base.storage().mutable_data();
  t.storage_nbytes = static_cast<int64_t>(base.storage().nbytes());
  return t;
}

tpu_tensor* iterator_slot(tpu_op& op, int k) { return k == 0 ? &op.out : &op.in[k - 1]; }

void submit_iterator_slices(const at::TensorIteratorBase& iter, tpu_op& op, int n_tensors, c10::DeviceIndex chip,
                            const char* name, const int* args) {
  TORCH_INTERNAL_ASSERT(n_tensors >= 1 && n_tensors <= 1 + TPU_OP_MAX_IN);
  auto arg = [&](int k) { return args ? args[k] : k; };
  std::array<char*, 1 + TPU_OP_MAX_IN> data;
  for (int i = 0; i < n_tensors; i++) {
    data[i] = static_cast<char*>(iter.data_ptr(arg(i)));
    // No data for elements: a view over a storage resized to nothing,
    // which the record's check would take for a missing operand.
    if (data[i] == nullptr) check_in_storage(iter.tensor(arg(i)), name);
  }
  const int ndim = iter.ndim();
  const int kept = ndim < TPU_MAX_DIMS ? ndim : TPU_MAX_DIMS;
  // One record checks its own ranges at submit, all or nothing; several
  // would be checked one by one, after the first ones had run, so the
  // tensors are checked whole before any is queued.
  if (kept < ndim)
    for (int i = 0; i < n_tensors; i++) check_in_storage(iter.tensor(arg(i)), name);
  // Outer dims [kept, ndim) are walked here, fastest first.
  c10::SmallVector<int64_t, 4> idx(ndim - kept, 0);
  while (true) {
    for (int i = 0; i < n_tensors; i++) *iterator_slot(op, i) = describe_iterator_operand(iter, arg(i), data[i], kept);
    submit(chip, op, name);
    int d = 0;
    for (; d < ndim - kept; d++) {
      const int dim = kept + d;
      for (int i = 0; i < n_tensors; i++) data[i] += iter.strides(arg(i))[dim];
      if (++idx[d] < iter.shape()[dim]) break;
      for (int i = 0; i < n_tensors; i++) data[i] -= iter.strides(arg(i))[dim] * iter.shape()[dim];
      idx[d] = 0;
    }
    if (d == ndim - kept) return;
  }
}

}  // namespace torch_tpu
