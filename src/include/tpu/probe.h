/* The machine's own limits, measured: what the benchmark suite
 * (benchmarks/suite.py) states achieved rates against, so that "80 % of
 * peak" means the same on any CPU. Plain C, no PyTorch.
 *
 * Each probe runs on `threads` threads of the intra-op pool (clamped to
 * [1, pool size]) for about `seconds` of wall time and returns the best
 * rate it saw. They measure the cores, not the kernels: the loops are
 * written for the instruction-set level in force (tpu_kernels_get_isa). */
#ifndef TPU_PROBE_H
#define TPU_PROBE_H

#include <stddef.h>

#include "tpu/export.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* f32 multiply-add throughput in GFLOP/s (2 flops per lane per FMA), from
 * independent FMA chains in registers: AVX-512 (16 lanes) or AVX2+FMA (8)
 * by the level in force, scalar otherwise. TPU_ERR_INVALID_ARG for a
 * NULL out or seconds <= 0. */
TPU_API tpu_status tpu_probe_fma_f32(int threads, double seconds, double *gflops);

/* bf16 dot-product throughput in GFLOP/s (vdpbf16ps: 2 products and 2
 * adds per f32 lane); *gflops = 0 when the CPU has no AVX512-BF16 or the
 * level in force is below avx512. */
TPU_API tpu_status tpu_probe_dot_bf16(int threads, double seconds, double *gflops);

/* Memory bandwidth in GB/s of the STREAM triad a[i] = b[i] + s * c[i] on
 * three f32 arrays of nbytes / 3 bytes each, split over the threads;
 * counts 3 * nbytes / 3 bytes per pass (two reads and a write, no
 * write-allocate), as STREAM does. nbytes should be well beyond the
 * caches (e.g. 768 MiB). TPU_ERR_HOST_MEMORY if the arrays cannot be
 * allocated. */
TPU_API tpu_status tpu_probe_stream_triad(int threads, size_t nbytes, double seconds, double *gbps);

#ifdef __cplusplus
}
#endif

#endif
