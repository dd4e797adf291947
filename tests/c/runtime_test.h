/* Helpers shared by the runtime tests (test_runtime_*.c): a gate that keeps
 * a stream busy, and builders for small op records. Include after defining
 * _POSIX_C_SOURCE. */
#ifndef TPU_TESTS_RUNTIME_TEST_H
#define TPU_TESTS_RUNTIME_TEST_H

#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "tpu/op.h"
#include "tpu/runtime.h"

static inline void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A host function queued with gate_wait keeps its stream busy until
 * gate_open is called; `entered` tells that the stream reached it. */
typedef struct {
    atomic_int open;
    atomic_int entered;
} gate;

static inline void gate_wait(void *ctx) {
    gate *g = ctx;
    atomic_store(&g->entered, 1);
    while (!atomic_load(&g->open))
        sleep_ms(1);
}

static inline void gate_open(gate *g) {
    atomic_store(&g->open, 1);
}

/* Waits (up to ~5 s) until the stream has reached the gate. */
static inline int gate_reached(gate *g) {
    for (int i = 0; i < 5000 && !atomic_load(&g->entered); i++)
        sleep_ms(1);
    return atomic_load(&g->entered);
}

/* A host function that sets an atomic_int to 1. */
static inline void set_flag(void *ctx) {
    atomic_store((atomic_int *)ctx, 1);
}

/* A contiguous 1-d tensor of n elements at data, which is also its
 * storage. */
static inline tpu_tensor vec(void *data, int64_t n, tpu_dtype dtype) {
    tpu_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.ndim = 1;
    t.sizes[0] = n;
    t.strides[0] = 1;
    t.dtype = dtype;
    t.storage = data;
    t.storage_nbytes = n * (int64_t)tpu_dtype_size(dtype);
    return t;
}

static inline tpu_op fill_op(tpu_tensor out, double value) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_FILL;
    op.out = out;
    op.p.fill.value.f = value;
    op.p.fill.value.i = (int64_t)value;
    return op;
}

static inline tpu_op copy_op(tpu_tensor out, tpu_tensor in) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_COPY;
    op.n_in = 1;
    op.out = out;
    op.in[0] = in;
    return op;
}

/* A copy from device memory `in` to host memory `out`. */
static inline tpu_op d2h_op(tpu_tensor out, tpu_tensor in) {
    tpu_op op = copy_op(out, in);
    op.code = TPU_OP_COPY_D2H;
    return op;
}

/* out = a / b with integer truncation (b a tensor). */
static inline tpu_op div_trunc_op(tpu_tensor out, tpu_tensor a, tpu_tensor b) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_BINARY;
    op.fn = TPU_BINARY_DIV;
    op.p.ew.common = out.dtype;
    op.n_in = 2;
    op.out = out;
    op.in[0] = a;
    op.in[1] = b;
    op.p.ew.rounding = TPU_ROUND_TRUNC;
    return op;
}

#endif
