// Copies in every direction (host -> tpu, tpu -> host, tpu -> tpu on one or
// two chips), with dtype conversion and any strides, as copy records:
// TPU_OP_COPY_H2D / TPU_OP_COPY_D2H when one side is host memory (so a
// target sees every transfer), TPU_OP_COPY on the chip.
//
// Ordering rules, as on CUDA:
//   - pageable host memory: the copy has finished when the call returns;
//   - pinned host memory with non_blocking=True: the call returns at once;
//     the pinned block is kept alive until the copy has run;
//   - chip i -> chip j: chip j's stream waits for chip i's stream, chip i's
//     stream then waits for the copy (so later writes to the source cannot
//     overtake it), and the source block is recorded on chip j's stream.
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include "core/glue.h"
#include "core/sync_debug.h"

extern "C" {
#include "tpu/host_mem.h"
}

namespace torch_tpu {

// self.fill_(value) on the device (csrc/aten/tensor.cpp): a FILL record.
at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value);

namespace {

constexpr auto kTpu = c10::DeviceType::PrivateUse1;

// Keeps a pinned host buffer alive until a queued copy has read or written
// it: a reference on the runtime's pinned block, dropped by the stream's
// worker after the copy. The worker never releases a PyTorch storage,
// which could mean a Python decref and so the GIL (a deadlock against a
// host thread that waits for the stream while holding it).
void keep_alive_until_done(tpu_stream* stream, const at::Tensor& host) {
  void* block = host.storage().mutable_data();
  TPU_CHECK_STATUS(tpu_host_retain(block));
  const tpu_status status = tpu_stream_submit_host_fn(stream, &tpu_host_release, block);
  if (status != TPU_OK) {
    tpu_host_release(block);
    TPU_CHECK_STATUS(status);
  }
}

// Work queued on `waiter` from now on runs after what `other` has queued
// so far (an event recorded on other, waited for on waiter).
void stream_waits_for(tpu_stream* waiter, tpu_stream* other) {
  tpu_event* ev = nullptr;
  TPU_CHECK_STATUS(tpu_event_create(&ev));
  tpu_status st = tpu_event_record(ev, other);
  if (st == TPU_OK) st = tpu_stream_wait_event(waiter, ev);
  tpu_event_free(ev);
  TPU_CHECK_STATUS(st);
}

void submit_copy(c10::DeviceIndex chip, const at::Tensor& dst, const at::Tensor& src) {
  const tpu_op_code code = src.device().type() != kTpu ? TPU_OP_COPY_H2D
                           : dst.device().type() != kTpu ? TPU_OP_COPY_D2H
                                                         : TPU_OP_COPY;
  // A copy must take any rank: it is how every other op (and the CPU
  // fallback) moves tensors on and off the chip.
  for_each_describable_slice({dst, src}, [&](const std::vector<at::Tensor>& t) {
    tpu_op op{};
    op.code = code;
    op.n_in = 1;
    tpu_tensor described[2];
    describe_elementwise("copy_", {&t[0], &t[1]}, described);
    op.out = described[0];
    op.in[0] = described[1];
    submit(chip, op, "aten::copy_");
  });
}

void check_copy_dtypes(const at::Tensor& dst, const at::Tensor& src) {
  TORCH_CHECK_TYPE(!src.is_complex() || dst.is_complex(), "copy_: cannot copy a complex ", src.scalar_type(),
                   " tensor into a real ", dst.scalar_type(), " tpu tensor");
  tpu_dtype d;
  TORCH_CHECK_NOT_IMPLEMENTED(to_tpu_dtype(src.scalar_type(), &d), "copy_: tpu does not support dtype ",
                              src.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(to_tpu_dtype(dst.scalar_type(), &d), "copy_: tpu does not support dtype ",
                              dst.scalar_type());
}

}  // namespace

void copy_tensor(const at::Tensor& dst, const at::Tensor& src_in, bool non_blocking) {
  check_in_storage(dst, "copy_");
  check_in_storage(src_in, "copy_");
  const at::Tensor src = src_in.expand_as(dst);  // raises for shapes that do not broadcast, even if empty
  if (dst.numel() == 0) return;
  check_copy_dtypes(dst, src);
  const bool dst_tpu = dst.device().type() == kTpu;
  const bool src_tpu = src.device().type() == kTpu;
  TORCH_CHECK(dst_tpu || dst.is_cpu(), "copy_: cannot copy into a tensor on ", dst.device());
  TORCH_CHECK(src_tpu || src.is_cpu(), "copy_: cannot copy from a tensor on ", src.device());

  if (dst_tpu && src_tpu && dst.device() == src.device()) {
    at::assert_no_internal_overlap(dst);
    // Copying a view onto itself is nothing to do; so is a single element
    // onto itself, whatever the strides say (x[None] = x for a 0-dim x,
    // which the CPU backend accepts through fill_).
    const bool same_element = dst.numel() == 1 && dst.const_data_ptr() == src.const_data_ptr();
    if (dst.is_alias_of(src) && dst.scalar_type() == src.scalar_type() &&
        (same_element || (dst.strides() == src.strides() && dst.storage_offset() == src.storage_offset())))
      return;
    // Against the source as given, before broadcasting, as TensorIterator
    // checks it: x[None].copy_(x) overlaps partly.
    at::assert_no_partial_overlap(dst, src_in);
    if (dst.is_alias_of(src)) {
      // Fully overlapping but differently laid out: go through a temporary.
      copy_tensor(dst, src.clone(), non_blocking);
      return;
    }
    submit_copy(dst.device().index(), dst, src);
    return;
  }

  // Across chips or with the host nothing can overlap, but dst must not
  // overlap itself (an expanded dst), as for any written-to tensor.
  at::assert_no_internal_overlap(dst);

  if (dst_tpu && src_tpu) {
    // chip i -> chip j, run on chip j's current stream.
    const c10::DeviceIndex from = src.device().index(), to = dst.device().index();
    tpu_stream* src_stream = current_c_stream(from);
    tpu_stream* dst_stream = current_c_stream(to);
    stream_waits_for(dst_stream, src_stream);
    submit_copy(to, dst, src);
    TPU_CHECK_STATUS(tpu_mem_record_stream(src.storage().mutable_data(), dst_stream));
    // And the source chip's stream waits for the copy, so that work queued
    // there later (an in-place write to the source) cannot run before the
    // copy has read it, as CUDA orders copies between devices.
    stream_waits_for(src_stream, dst_stream);
    return;
  }

  if (dst_tpu) {
    // host -> tpu
    const c10::DeviceIndex chip = dst.device().index();
    const bool async = non_blocking && is_pinned_host_ptr(src.storage().data());
    if (src_in.numel() == 1 && !async && !src.is_complex()) {
      // One host value (a wrapped Python scalar, a CPU 0-dim tensor): it
      // rides in a FILL record, converted on the CPU exactly as the copy
      // would convert it. Nothing to wait for: the host memory is read now.
      // Without this every such copy synchronised the stream (and in fused
      // mode cut every foreach optimizer step into single records).
      at::Tensor& out = const_cast<at::Tensor&>(dst);
      fill_scalar(out, src_in.reshape({}).to(dst.scalar_type()).item());
      return;
    }
    if (!async) check_sync("a copy from the host to tpu (pageable memory, or non_blocking=False)");
    submit_copy(chip, dst, src);
    if (async)
      keep_alive_until_done(current_c_stream(chip), src);
    else
      TPU_CHECK_STATUS(tpu_stream_synchronize(current_c_stream(chip)));
    return;
  }

  // tpu -> host
  const c10::DeviceIndex chip = src.device().index();
  const bool async = non_blocking && is_pinned_host_ptr(dst.storage().data());
  if (!async) check_sync("a copy from tpu to the host: Tensor.cpu(), .to('cpu'), .tolist(), .numpy(), print");
  submit_copy(chip, dst, src);
  if (async)
    keep_alive_until_done(current_c_stream(chip), dst);
  else
    TPU_CHECK_STATUS(tpu_stream_synchronize(current_c_stream(chip)));
}

namespace {

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  copy_tensor(dst, self, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_output(dst, self.sizes());
  copy_tensor(dst, self, false);
  return dst;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
}

}  // namespace torch_tpu
