/* Helpers shared by the tests of the record families that read and write
 * several tensors (test_kernels_norm.c, test_kernels_index_loss.c,
 * test_kernels_reduce_more.c): strided test buffers whose gaps are
 * poisoned, element access by row-major logical index (own decoding, from
 * kernel_test.h), and one runner that executes a record in both kernel
 * modes with several thread counts and checks that every run writes the
 * same bytes, inside the written views only.
 *
 * Every buffer starts as 0xff bytes: a NaN in every float dtype, -1 in
 * the signed integers (an out-of-range index), true as a bool. A kernel
 * that reads a gap therefore produces a NaN or an index error, and one
 * that writes a gap is caught by the untouched-bytes check. */
#ifndef TPU_TESTS_FAMILY_TEST_H
#define TPU_TESTS_FAMILY_TEST_H

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernel_test.h"

/* ------------------------------------------------------------ buffers */

/* Layouts: row-major; column-major (every stride reversed: a transposed
 * view); row-major with gaps (each dim's stride one element wider than
 * dense, the innermost 2); row-major with the first and last dims
 * walked backwards (negative strides). */
enum { L_CONTIG, L_TRANS, L_GAP, L_NEG, L_COUNT };
static const char *const k_layout_names[L_COUNT] = {"contig", "trans", "gap", "neg"};

typedef struct {
    tpu_tensor t;
    unsigned char *alloc;    /* the storage, every byte 0xff until written */
    unsigned char *pristine; /* a copy taken by fb_snap */
    unsigned char *in_view;  /* 1 for each byte some element of t covers */
    size_t bytes;
} fbuf;

static inline const char *dt_str(tpu_dtype dt) {
    static const char *const n[] = {"f32", "f64", "f16", "bf16", "i8",
                                    "i16", "i32", "i64", "u8",   "bool"};
    return (unsigned)dt < TPU_DTYPE_COUNT ? n[dt] : "?";
}

/* Builds a tensor of dtype dt, rank ndim and `sizes` in `layout`. */
static inline void fb_make(fbuf *b, tpu_dtype dt, int ndim, const int64_t *sizes, int layout) {
    memset(b, 0, sizeof *b);
    b->t.ndim = ndim;
    b->t.dtype = dt;
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        b->t.sizes[d] = sizes[d];
        numel *= sizes[d];
    }
    int64_t stride = 1;
    if (layout == L_TRANS) {
        for (int d = 0; d < ndim; d++) {
            b->t.strides[d] = stride;
            stride *= sizes[d] > 0 ? sizes[d] : 1;
        }
    } else {
        for (int d = ndim - 1; d >= 0; d--) {
            b->t.strides[d] = layout == L_GAP && d == ndim - 1 ? 2 : stride;
            stride = b->t.strides[d] * (sizes[d] > 0 ? sizes[d] : 1) + (layout == L_GAP ? 1 : 0);
        }
    }
    if (layout == L_NEG && ndim > 0) {
        b->t.strides[0] = -b->t.strides[0];
        if (ndim > 1)
            b->t.strides[ndim - 1] = -b->t.strides[ndim - 1];
    }
    /* The lowest and highest element offsets bound the storage. */
    int64_t lo = 0, hi = 0;
    for (int d = 0; d < ndim && numel > 0; d++) {
        int64_t span = b->t.strides[d] * (sizes[d] - 1);
        if (span < 0)
            lo += span;
        else
            hi += span;
    }
    size_t es = t_size(dt);
    b->bytes = (size_t)(hi - lo + 1) * es;
    b->alloc = malloc(b->bytes);
    b->pristine = malloc(b->bytes);
    b->in_view = calloc(b->bytes, 1);
    memset(b->alloc, 0xff, b->bytes);
    b->t.data = b->alloc + (size_t)(-lo) * es;
    b->t.storage = b->alloc;
    b->t.storage_nbytes = (int64_t)b->bytes;
    for (int64_t i = 0; i < numel; i++)
        memset(b->in_view + (t_at(&b->t, i) - b->alloc), 1, es);
}

/* Shorthands for 0-d, 1-d and 2-d buffers. */
static inline void fb_make0(fbuf *b, tpu_dtype dt) {
    fb_make(b, dt, 0, NULL, L_CONTIG);
}

static inline void fb_make1(fbuf *b, tpu_dtype dt, int64_t n, int layout) {
    fb_make(b, dt, 1, &n, layout);
}

static inline void fb_make2(fbuf *b, tpu_dtype dt, int64_t m, int64_t n, int layout) {
    const int64_t s[2] = {m, n};
    fb_make(b, dt, 2, s, layout);
}

static inline void fb_free(fbuf *b) {
    free(b->alloc);
    free(b->pristine);
    free(b->in_view);
    memset(b, 0, sizeof *b);
}

/* Remembers the current bytes (the state each run starts from). */
static inline void fb_snap(fbuf *b) {
    memcpy(b->pristine, b->alloc, b->bytes);
}

static inline void fb_restore(fbuf *b) {
    memcpy(b->alloc, b->pristine, b->bytes);
}

/* Bytes outside the view that differ from the snapshot. */
static inline int64_t fb_gap_writes(const fbuf *b) {
    int64_t n = 0;
    for (size_t i = 0; i < b->bytes; i++)
        n += !b->in_view[i] && b->alloc[i] != b->pristine[i];
    return n;
}

/* Appends "[2,3,4]" (ndim sizes) to buf at *k, keeping within cap. */
static inline void fmt_dims(char *buf, size_t cap, int *k, int ndim, const int64_t *sizes) {
    *k += snprintf(buf + *k, cap - (size_t)*k, "[");
    for (int d = 0; d < ndim && (size_t)*k < cap; d++)
        *k += snprintf(buf + *k, cap - (size_t)*k, "%s%lld", d ? "," : "", (long long)sizes[d]);
    if ((size_t)*k < cap)
        *k += snprintf(buf + *k, cap - (size_t)*k, "]");
}

/* ------------------------------------------------------ element access */

/* Stores v as float dtype dt (f16/bf16 through f32) at p; the library's
 * rounding is fine here: the tests read every input back with their own
 * decoding (t_read_f) and compute from what was stored. */
static inline void put_float(unsigned char *p, tpu_dtype dt, double v) {
    switch (dt) {
    case TPU_DTYPE_F32: { float f = (float)v; memcpy(p, &f, 4); return; }
    case TPU_DTYPE_F64: memcpy(p, &v, 8); return;
    case TPU_DTYPE_F16: { uint16_t h = tpu_f32_to_f16((float)v); memcpy(p, &h, 2); return; }
    default: { uint16_t h = tpu_f32_to_bf16((float)v); memcpy(p, &h, 2); return; }
    }
}

/* Stores the low bits of v as integer dtype dt (bool: v != 0). */
static inline void put_int(unsigned char *p, tpu_dtype dt, int64_t v) {
    uint64_t u = (uint64_t)v;
    switch (dt) {
    case TPU_DTYPE_BOOL: p[0] = v != 0; return;
    case TPU_DTYPE_I8:
    case TPU_DTYPE_U8: p[0] = (uint8_t)u; return;
    case TPU_DTYPE_I16: { uint16_t x = (uint16_t)u; memcpy(p, &x, 2); return; }
    case TPU_DTYPE_I32: { uint32_t x = (uint32_t)u; memcpy(p, &x, 4); return; }
    default: memcpy(p, &v, 8); return;
    }
}

/* Any dtype: floats get v, integers trunc(v). */
static inline void put_any(unsigned char *p, tpu_dtype dt, double v) {
    if (t_is_float(dt))
        put_float(p, dt, v);
    else
        put_int(p, dt, (int64_t)v);
}

/* Element i (row-major) of b: set, and read back as the kernel sees it. */
static inline double fb_set(fbuf *b, int64_t i, double v) {
    unsigned char *p = t_at(&b->t, i);
    put_any(p, b->t.dtype, v);
    return t_read_f(p, b->t.dtype);
}

static inline double fb_get(const fbuf *b, int64_t i) {
    return t_read_f(t_at(&b->t, i), b->t.dtype);
}

static inline int64_t fb_get_i(const fbuf *b, int64_t i) {
    return t_read_i(t_at(&b->t, i), b->t.dtype);
}

/* Element (i, j) of a 2-d buffer. */
static inline double fb_get2(const fbuf *b, int64_t i, int64_t j) {
    return t_read_f(t_at2(&b->t, i, j), b->t.dtype);
}

static inline double fb_set2(fbuf *b, int64_t i, int64_t j, double v) {
    unsigned char *p = t_at2(&b->t, i, j);
    put_any(p, b->t.dtype, v);
    return t_read_f(p, b->t.dtype);
}

/* ---------------------------------------------------------- tolerance */

/* What one rounding to dt (f64 -> dt, through f32 for the halves) may
 * cost at |want|: one unit of t_eps relative (at least one ulp, which
 * also covers the double rounding), plus the dtype's smallest step for
 * results in its subnormal range. */
static inline double tol_store(tpu_dtype dt, double want) {
    double step = dt == F16 ? 0x1p-24 : dt == BF16 ? 0x1p-133 : dt == F32 ? 0x1p-149 : 0x1p-1074;
    return t_eps(dt) * fabs(want) + step;
}

/* got matches want within tol: NaN only with NaN, infinities exactly. */
static inline bool close_to(double got, double want, double tol) {
    if (isnan(want) || isnan(got))
        return isnan(want) && isnan(got);
    if (isinf(want) || isinf(got))
        return got == want;
    return fabs(got - want) <= tol;
}

/* ------------------------------------------------------------- runner */

/* A record's written buffers (out, aux) and read-only inputs, as the
 * runner checks them. A written buffer may also be an input (in place);
 * list it only as written. */
typedef struct {
    fbuf *written[4];
    int n_written;
    fbuf *read[6];
    int n_read;
} op_bufs;

/* Shares per run; a negative count -n runs n threads at once, each
 * phase's shares taking work from one counter (tpu_op_run_phase_claimed),
 * as the target's pool runs them. */
static const int k_nths[] = {1, 2, 3, 7, -3};
enum { N_NTHS = sizeof k_nths / sizeof k_nths[0] };

/* Kernel modes: the reference kernels, and the fast ones capped at each
 * instruction-set level (a level above the CPU's runs as its best). */
static const struct {
    bool ref;
    tpu_isa isa;
    const char *name;
} k_modes[] = {
    {true, TPU_ISA_AVX512, "ref"},
    {false, TPU_ISA_PORTABLE, "fast/portable"},
    {false, TPU_ISA_AVX2, "fast/avx2"},
    {false, TPU_ISA_AVX512, "fast/avx512"},
};
enum { N_MODES = sizeof k_modes / sizeof k_modes[0] };

/* Runs every phase of `op` over all nth shares, phase after phase, with
 * exactly tpu_op_scratch_bytes(op) bytes of scratch (poisoned with 0xff,
 * so that a kernel relying on zeroed scratch fails). Returns the first
 * error. */
typedef struct {
    const tpu_op *op;
    int phase, ith, nth;
    int64_t *claims;
    tpu_status st;
} claimed_share;

static inline void *run_claimed_share(void *arg) {
    claimed_share *c = arg;
    c->st = tpu_op_run_phase_claimed(c->op, c->phase, c->ith, c->nth, c->claims);
    return NULL;
}

/* One phase of op on n threads at once, claiming from one counter. */
static inline tpu_status run_phase_claimed(const tpu_op *op, int phase, int n) {
    claimed_share shares[8];
    pthread_t tids[8];
    bool started[8];
    int64_t claims = 0;
    for (int i = 0; i < n; i++) {
        shares[i] = (claimed_share){op, phase, i, n, &claims, TPU_OK};
        started[i] = pthread_create(&tids[i], NULL, run_claimed_share, &shares[i]) == 0;
        if (!started[i]) /* no thread to be had: this one runs the share */
            run_claimed_share(&shares[i]);
    }
    tpu_status first = TPU_OK;
    for (int i = 0; i < n; i++) {
        if (started[i])
            pthread_join(tids[i], NULL);
        if (shares[i].st != TPU_OK && first == TPU_OK)
            first = shares[i].st;
    }
    return first;
}

static inline tpu_status run_phases(const tpu_op *op_in, int nth) {
    tpu_op op = *op_in;
    int64_t need = tpu_op_scratch_bytes(&op);
    void *scratch = NULL;
    if (need > 0) {
        scratch = malloc((size_t)need);
        memset(scratch, 0xff, (size_t)need);
        op.scratch = scratch;
        op.scratch_nbytes = need;
    }
    tpu_status first = TPU_OK;
    int phases = tpu_op_phases(&op);
    for (int phase = 0; phase < phases; phase++)
        for (int i = 0; i < (nth < 0 ? 1 : nth); i++) {
            tpu_status st = nth < 0 ? run_phase_claimed(&op, phase, -nth)
                                    : tpu_op_run_phase(&op, phase, i, nth);
            if (st != TPU_OK && first == TPU_OK)
                first = st;
        }
    free(scratch);
    return first;
}

/* Gives op the scratch it needs (a dummy block the caller frees), so
 * that tpu_op_check accepts it. */
static inline void *give_scratch(tpu_op *op) {
    int64_t need = tpu_op_scratch_bytes(op);
    if (need <= 0)
        return NULL;
    op->scratch = malloc((size_t)need);
    op->scratch_nbytes = need;
    return op->scratch;
}

/* Checks `op`, then runs it in every kernel mode (k_modes) with nth 1, 2,
 * 3 and 7, each run starting from the buffers' snapshots. After the first
 * run `verify(ctx)` checks the values; every later run must leave the
 * written buffers byte for byte as the first did. No run may fail, write
 * outside the written views, or change an input. Returns false if the
 * record was refused (nothing ran). */
static inline bool run_everywhere(const tpu_op *op_in, op_bufs *bufs, void (*verify)(void *),
                                  void *ctx, const char *what) {
    tpu_op op = *op_in;
    void *dummy = give_scratch(&op);
    tpu_status st = tpu_op_check(&op);
    free(dummy);
    op.scratch = NULL;
    op.scratch_nbytes = 0;
    CHECK_OK(st);
    if (st != TPU_OK) {
        fprintf(stderr, "    refused: %s\n", what);
        return false;
    }
    CHECK(tpu_op_max_threads(&op) >= 1);
    for (int w = 0; w < bufs->n_written; w++)
        fb_snap(bufs->written[w]);
    for (int r = 0; r < bufs->n_read; r++)
        fb_snap(bufs->read[r]);
    unsigned char *first[4] = {0};
    bool verified = false;
    int64_t failed = 0, differ = 0, gap = 0, changed = 0;
    for (int mode = 0; mode < N_MODES; mode++) {
        tpu_kernels_set_reference(k_modes[mode].ref);
        tpu_kernels_set_isa(k_modes[mode].isa);
        for (int k = 0; k < N_NTHS; k++) {
            for (int w = 0; w < bufs->n_written; w++)
                fb_restore(bufs->written[w]);
            st = run_phases(&op, k_nths[k]);
            if (st != TPU_OK) {
                if (failed++ == 0)
                    fprintf(stderr, "    %s [%s nth=%d]: %s: %s\n", what, k_modes[mode].name,
                            k_nths[k], tpu_status_str(st), tpu_last_error_message());
                continue;
            }
            for (int w = 0; w < bufs->n_written; w++)
                gap += fb_gap_writes(bufs->written[w]);
            for (int r = 0; r < bufs->n_read; r++)
                changed += memcmp(bufs->read[r]->alloc, bufs->read[r]->pristine,
                                  bufs->read[r]->bytes) != 0;
            if (!verified) {
                verified = true;
                if (verify)
                    verify(ctx);
                for (int w = 0; w < bufs->n_written; w++) {
                    first[w] = malloc(bufs->written[w]->bytes);
                    memcpy(first[w], bufs->written[w]->alloc, bufs->written[w]->bytes);
                }
                continue;
            }
            for (int w = 0; w < bufs->n_written; w++)
                if (memcmp(first[w], bufs->written[w]->alloc, bufs->written[w]->bytes) != 0) {
                    if (differ++ == 0)
                        fprintf(stderr, "    %s [%s nth=%d]: written buffer %d differs from the "
                                "first run\n", what, k_modes[mode].name, k_nths[k], w);
                }
        }
    }
    tpu_kernels_set_reference(false);
    tpu_kernels_set_isa(TPU_ISA_COUNT - 1);
    CHECK(failed == 0);
    CHECK(differ == 0);
    CHECK(gap == 0);
    CHECK(changed == 0);
    if (gap)
        fprintf(stderr, "    %s: %lld bytes written outside a view\n", what, (long long)gap);
    if (changed)
        fprintf(stderr, "    %s: an input changed\n", what);
    for (int w = 0; w < 4; w++)
        free(first[w]);
    return true;
}

/* Runs op with tpu_op_run on one share and expects `want`, with a message
 * containing each of the NULL-terminated parts. */
static inline void expect_run_error(const tpu_op *op, tpu_status want,
                                    const char *const *parts, const char *what) {
    tpu_status st = tpu_op_check(op);
    CHECK_OK(st);
    if (st != TPU_OK) {
        fprintf(stderr, "    refused: %s\n", what);
        return;
    }
    tpu_clear_error();
    st = tpu_op_run(op, 0, 1);
    CHECK_STATUS(st, want);
    for (int i = 0; parts[i] != NULL; i++)
        CHECK_CONTAINS(tpu_last_error_message(), parts[i]);
    if (st != want)
        fprintf(stderr, "    case: %s\n", what);
}

/* tpu_op_check must refuse op with `want` and a message containing part. */
#define CHECK_REFUSED(op, want, part)                                                             \
    do {                                                                                          \
        CHECK_STATUS(tpu_op_check(op), want);                                                     \
        CHECK_CONTAINS(tpu_last_error_message(), part);                                           \
    } while (0)

#endif
