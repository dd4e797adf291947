/* The compact form of records (src/runtime/record.c): for records with
 * every count of inputs, further outputs and dims, packing then unpacking
 * gives back every field in use, the unused slots and dims read as zero,
 * and the packed size is what it says, a multiple of 16 well under a
 * full record's size for small ops. */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/runtime/runtime_internal.h"
#include "check.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static uint64_t next(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static void fill_random(void *p, size_t n) {
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)next();
}

static void random_tensor(tpu_tensor *t, int ndim) {
    memset(t, 0, sizeof *t);
    t->data = (void *)(uintptr_t)(next() | 8);
    t->storage = (void *)(uintptr_t)next();
    t->storage_nbytes = (int64_t)(next() >> 1);
    t->ndim = ndim;
    t->dtype = (tpu_dtype)(next() % TPU_DTYPE_COUNT);
    for (int d = 0; d < ndim; d++) {
        t->sizes[d] = (int64_t)(next() >> 2);
        t->strides[d] = (int64_t)next();
    }
}

/* The record as unpacking must give it back: slots past n_in and n_aux,
 * and dims past each ndim, zero. */
static tpu_op random_op(int n_in, int n_aux, int max_dims) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    op.code = (tpu_op_code)(next() % TPU_OP_COUNT);
    op.fn = (int32_t)(next() % 64);
    op.n_in = n_in;
    op.n_aux = n_aux;
    fill_random(&op.p, sizeof op.p);
    op.scratch = (void *)(uintptr_t)next();
    op.scratch_nbytes = (int64_t)(next() >> 1);
    op.name = (const char *)(uintptr_t)next();
    random_tensor(&op.out, (int)(next() % (unsigned)(max_dims + 1)));
    for (int k = 0; k < n_in; k++)
        random_tensor(&op.in[k], (int)(next() % (unsigned)(max_dims + 1)));
    for (int k = 0; k < n_aux; k++)
        random_tensor(&op.aux[k], (int)(next() % (unsigned)(max_dims + 1)));
    return op;
}

static void test_round_trip(void) {
    enum { CANARY = 64 };
    unsigned char *buf = aligned_alloc(16, (sizeof(tpu_op) + 256 + CANARY + 15) / 16 * 16);
    int same = 1, sizes_ok = 1, canary_ok = 1;
    for (int trial = 0; trial < 20000; trial++) {
        int n_in = (int)(next() % (TPU_OP_MAX_IN + 1)), n_aux = (int)(next() % (TPU_OP_MAX_AUX + 1));
        tpu_op op = random_op(n_in, n_aux, trial % 2 ? TPU_MAX_DIMS : 3);
        size_t n = tpu_record_packed_size(&op);
        sizes_ok &= n % 16 == 0 && n <= sizeof(tpu_op) + 256;
        memset(buf, 0xA5, n + CANARY);
        tpu_record_pack(&op, buf);
        for (size_t i = n; i < n + CANARY; i++)
            canary_ok &= buf[i] == 0xA5;
        tpu_op back;
        memset(&back, 0x5A, sizeof back);
        tpu_record_unpack(buf, &back);
        same &= memcmp(&op.out, &back.out, sizeof op.out) == 0;
        same &= memcmp(op.in, back.in, sizeof op.in) == 0;
        same &= memcmp(op.aux, back.aux, sizeof op.aux) == 0;
        same &= memcmp(&op.p, &back.p, sizeof op.p) == 0;
        same &= op.code == back.code && op.fn == back.fn && op.n_in == back.n_in &&
                op.n_aux == back.n_aux && op.scratch == back.scratch &&
                op.scratch_nbytes == back.scratch_nbytes && op.name == back.name;
    }
    CHECK(same);
    CHECK(sizes_ok);
    CHECK(canary_ok);
    free(buf);
}

/* What the ring saves: a binary op on matrices packs into a fifth of a
 * full record. */
static void test_small_ops_pack_small(void) {
    tpu_op op = random_op(2, 0, 0);
    random_tensor(&op.out, 2);
    random_tensor(&op.in[0], 2);
    random_tensor(&op.in[1], 2);
    size_t n = tpu_record_packed_size(&op);
    CHECK(n <= 400);
    CHECK(5 * n <= sizeof(tpu_op));
}

int main(void) {
    test_round_trip();
    test_small_ops_pack_small();
    return check_report();
}
