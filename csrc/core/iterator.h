// A built TensorIterator as op records: its operands described as C views
// (the iterator's merged dims, row-major), and one record submitted per
// slice of the dims beyond TPU_MAX_DIMS. Shared by the element-wise ops and
// by the indexing ops whose PyTorch kernels take an iterator.
#pragma once

#include <ATen/TensorIterator.h>

#include "core/glue.h"

namespace torch_tpu {

// Operand `arg` of the iterator as a C view over the dims [0, ndim) of the
// iterator's shape (row-major; the iterator keeps its dims fastest first
// and its strides in bytes), with data at `data` and the operand's storage
// bounds.
tpu_tensor describe_iterator_operand(const at::TensorIteratorBase& iter, int arg, char* data, int ndim);

// The record's tensor slot for iterator operand k: out, then the inputs.
tpu_tensor* iterator_slot(tpu_op& op, int k);

// Submits `op` with n_tensors of the iterator's operands in its slots
// (slot k holds operand args[k], or operand k when args is null): one
// record when the iterator has at most TPU_MAX_DIMS dims, else one per
// slice of its outermost dims.
void submit_iterator_slices(const at::TensorIteratorBase& iter, tpu_op& op, int n_tensors, c10::DeviceIndex chip,
                            const char* name, const int* args = nullptr);

}  // namespace torch_tpu
