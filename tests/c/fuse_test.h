/* Records and entries the fusion planner's tests build (test_fuse_*.c). */
#ifndef TPU_TESTS_FUSE_TEST_H
#define TPU_TESTS_FUSE_TEST_H

#include <stdint.h>
#include <string.h>

#include "fuse.h"
#include "tpu/dtype.h"
#include "tpu/op.h"

/* A 2-d view of `base` (its storage: nbytes) at element offset `off`. */
static inline tpu_tensor view2(void *base, int64_t nbytes, tpu_dtype dt, int64_t off,
                               int64_t r, int64_t c, int64_t s0, int64_t s1) {
    tpu_tensor t;
    memset(&t, 0, sizeof t);
    t.data = (char *)base + off * (int64_t)tpu_dtype_size(dt);
    t.ndim = 2;
    t.sizes[0] = r;
    t.sizes[1] = c;
    t.strides[0] = s0;
    t.strides[1] = s1;
    t.dtype = dt;
    t.storage = base;
    t.storage_nbytes = nbytes;
    return t;
}

static inline tpu_op binary(int fn, tpu_tensor out, tpu_tensor a, tpu_tensor b) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = TPU_OP_BINARY;
    op.fn = fn;
    op.n_in = 2;
    op.out = out;
    op.in[0] = a;
    op.in[1] = b;
    op.p.ew.common = out.dtype == TPU_DTYPE_BF16 && a.dtype == TPU_DTYPE_BF16 ? TPU_DTYPE_BF16
                                                                             : TPU_DTYPE_F32;
    op.p.ew.alpha.f = 1;
    op.p.ew.alpha.i = 1;
    return op;
}

/* out = a <fn> scalar */
static inline tpu_op binary_scalar(int fn, tpu_tensor out, tpu_tensor a, double b) {
    tpu_op op = binary(fn, out, a, a);
    op.n_in = 1;
    memset(&op.in[1], 0, sizeof op.in[1]);
    op.p.ew.other.f = b;
    op.p.ew.other.i = (int64_t)b;
    return op;
}

static inline tpu_op unary(int fn, tpu_tensor out, tpu_tensor a) {
    tpu_op op = binary(0, out, a, a);
    op.code = TPU_OP_UNARY;
    op.fn = fn;
    op.n_in = 1;
    memset(&op.in[1], 0, sizeof op.in[1]);
    return op;
}

static inline tpu_fuse_entry rec(const tpu_op *op) {
    return (tpu_fuse_entry){.kind = TPU_FUSE_RECORD, .op = op};
}

static inline tpu_fuse_entry freed(const void *p, uint64_t n) {
    return (tpu_fuse_entry){.kind = TPU_FUSE_FREED, .block = p, .nbytes = n, .pairs = true};
}

static inline tpu_fuse_entry allocated(const void *p, uint64_t n) {
    return (tpu_fuse_entry){.kind = TPU_FUSE_ALLOCATED, .block = p, .nbytes = n};
}

#endif
