/* The machine probes (tpu/probe.h): positive, finite rates at every
 * instruction-set level the machine has, bf16 only where the CPU has it,
 * and clear errors for bad arguments. Speeds themselves are the benchmark
 * suite's business, not a test's. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>

#include "check.h"
#include "tpu/op.h"
#include "tpu/probe.h"

int main(void) {
    for (int isa = 0; isa <= (int)tpu_kernels_best_isa(); isa++) {
        CHECK_OK(tpu_kernels_set_isa((tpu_isa)isa));
        double g = -1;
        CHECK_OK(tpu_probe_fma_f32(1, 0.05, &g));
        CHECK(g > 0 && isfinite(g));
        double b = -1;
        CHECK_OK(tpu_probe_dot_bf16(2, 0.05, &b));
        CHECK(b >= 0 && isfinite(b));
        if (isa < (int)TPU_ISA_AVX512)
            CHECK(b == 0);
    }
    double bw = -1;
    CHECK_OK(tpu_probe_stream_triad(2, 3 << 20, 0.05, &bw));
    CHECK(bw > 0 && isfinite(bw));
    CHECK_STATUS(tpu_probe_fma_f32(1, 0, &bw), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_probe_fma_f32(1, 0.1, NULL), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_probe_stream_triad(1, 10, 0.1, &bw), TPU_ERR_INVALID_ARG);
    return check_report();
}
