/* COPY (any dtype pair, any strides on both sides) and FILL.
 *
 * COPY converts per strided.h: same dtype copies the bytes (NaN payloads
 * kept); to f32/f16/bf16 through f32; to f64 through f64; integers to
 * integers through int64 (wrapping); floats to integers as PyTorch's CPU
 * backend does (tpu_k_f64_to_int: through int32 for i32/i16/i8, through
 * int64 for i64/u8); to bool, value != 0.
 * FILL stores p.fill.value: .f for float outputs (rounded to out.dtype),
 * .i for integer outputs (wrapped), .i != 0 for bool.
 *
 * Work split: contiguous ranges of out's row-major element index (memory
 * offsets on the flat path, strips of tiles on the transpose path);
 * elements are independent, so any split writes the same bytes. */
#include <string.h>

#include "convert.h"
#include "kernels_internal.h"
#include "strided.h"

#if TPU_K_X86
#include <immintrin.h>
#endif

/* ------------------------------------------------------------- COPY */

/* Copies one element from `in` (dtype idt) to `out` (dtype odt). */
static inline __attribute__((always_inline)) void convert_one(char *out, tpu_dtype odt,
                                                              const char *in, tpu_dtype idt) {
    if (odt == idt) {
        memcpy(out, in, tpu_dtype_size(odt));
        return;
    }
    switch (odt) {
    case TPU_DTYPE_F32:
    case TPU_DTYPE_F16:
    case TPU_DTYPE_BF16: tpu_k_store_f32(out, odt, tpu_k_load_f32(in, idt)); return;
    case TPU_DTYPE_F64: tpu_k_store_f64(out, odt, tpu_k_load_f64(in, idt)); return;
    case TPU_DTYPE_BOOL: tpu_k_store_bool(out, odt, tpu_k_load_bool(in, idt)); return;
    default: tpu_k_store_i64(out, odt, tpu_k_load_int(in, idt, odt)); return;
    }
}

/* TRIL and TRIU: a copy that writes 0 outside the kept triangle of the
 * last two dims. Position (i, j) is read off the walk's row-major index.
 * In place (out == in[0]), each element is read just before it is
 * written, as for a plain copy. */
static tpu_status copy_triangle(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    const int64_t rows = o->sizes[o->ndim - 2], cols = o->sizes[o->ndim - 1];
    const int64_t k = op->p.tri.diagonal;
    const bool lower = op->fn == TPU_COPY_TRIL;
    const int64_t *strides[2] = {o->strides, in->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 2, strides, start);
    const size_t es = tpu_dtype_size(o->dtype);
    for (int64_t e = start; e < end; e++, tpu_k_iter_next(&it)) {
        int64_t j = e % cols, i = (e / cols) % rows;
        /* j - i cannot overflow: both lie in [0, INT64_MAX). */
        bool keep = lower ? j - i <= k : j - i >= k;
        char *dst = tpu_k_ptr(o, it.off[0]);
        if (keep)
            convert_one(dst, o->dtype, tpu_k_ptr(in, it.off[1]), in->dtype);
        else
            memset(dst, 0, es); /* 0 in every dtype */
    }
    return TPU_OK;
}

tpu_status tpu_k_copy_ref(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    if (op->fn != TPU_COPY_PLAIN)
        return copy_triangle(op, ith, nth);
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    const int64_t *strides[2] = {o->strides, in->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 2, strides, start);
    for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it))
        convert_one(tpu_k_ptr(o, it.off[0]), o->dtype, tpu_k_ptr(in, it.off[1]), in->dtype);
    return TPU_OK;
}

/* Copies n elements of size es between strided runs (strides in
 * elements). Element-size loops let the compiler use plain moves. */
static void copy_run_same(char *out, int64_t so, const char *in, int64_t si, int64_t n,
                          size_t es) {
    if (so == 1 && si == 1) {
        memmove(out, in, (size_t)n * es); /* memmove: out may be in itself */
        return;
    }
    int64_t bo = so * (int64_t)es, bi = si * (int64_t)es;
    switch (es) {
    case 1: for (int64_t j = 0; j < n; j++) memcpy(out + j * bo, in + j * bi, 1); break;
    case 2: for (int64_t j = 0; j < n; j++) memcpy(out + j * bo, in + j * bi, 2); break;
    case 4: for (int64_t j = 0; j < n; j++) memcpy(out + j * bo, in + j * bi, 4); break;
    default: for (int64_t j = 0; j < n; j++) memcpy(out + j * bo, in + j * bi, 8); break;
    }
}

/* Converts n elements between strided runs with the dtypes fixed at the
 * call site, so that the inlined load/store switches fold away. */
static inline __attribute__((always_inline)) void convert_run(char *out, tpu_dtype odt,
                                                              int64_t so, const char *in,
                                                              tpu_dtype idt, int64_t si,
                                                              int64_t n) {
    int64_t bo = so * (int64_t)tpu_dtype_size(odt), bi = si * (int64_t)tpu_dtype_size(idt);
    for (int64_t j = 0; j < n; j++)
        convert_one(out + j * bo, odt, in + j * bi, idt);
}

/* Every dtype pair as its own loop (the pair fixed at compile time, so
 * convert_one's switches fold away and the compiler vectorises what it
 * can): masks to floats (dropout), ids to floats, floats to ids, autocast
 * and .float() / .double() alike, at memory speed instead of per element
 * through both switches. */
#define COPY_EACH_OUT(X)                                                                           \
    X(F32) X(F64) X(F16) X(BF16) X(I8) X(I16) X(I32) X(I64) X(U8) X(BOOL)
#define COPY_EACH_IN(X, O)                                                                         \
    X(O, F32) X(O, F64) X(O, F16) X(O, BF16) X(O, I8) X(O, I16) X(O, I32) X(O, I64) X(O, U8)       \
    X(O, BOOL)
#define COPY_IN_CASE(O, I)                                                                         \
    case TPU_DTYPE_##I: convert_run(out, TPU_DTYPE_##O, so, in, TPU_DTYPE_##I, si, n); return;
#define COPY_OUT_CASE(O)                                                                           \
    case TPU_DTYPE_##O:                                                                            \
        switch (idt) {                                                                             \
            COPY_EACH_IN(COPY_IN_CASE, O)                                                          \
        default: break;                                                                            \
        }                                                                                          \
        break;

static void convert_run_typed(char *out, tpu_dtype odt, int64_t so, const char *in, tpu_dtype idt,
                              int64_t si, int64_t n) {
    switch (odt) {
        COPY_EACH_OUT(COPY_OUT_CASE)
    default: break;
    }
    convert_run(out, odt, so, in, idt, si, n); /* not reached: tpu_op_check validated both */
}
#undef COPY_EACH_OUT
#undef COPY_EACH_IN
#undef COPY_IN_CASE
#undef COPY_OUT_CASE

/* Converts n contiguous elements with the run conversions when both
 * sides are f32/f16/bf16, or f32 -> i64 where the CPU has its vector
 * form, and aligned; returns false otherwise. */
static bool convert_run_contig(char *out, tpu_dtype odt, const char *in, tpu_dtype idt, int64_t n,
                               bool aligned) {
    if (aligned && idt == TPU_DTYPE_F32 && odt == TPU_DTYPE_I64) /* ids from floats */
        return tpu_k_cvt_f32_to_i64((int64_t *)out, (const float *)in, n);
    if (!aligned || !tpu_k_cvt_supported(odt) || !tpu_k_cvt_supported(idt) ||
        (odt != TPU_DTYPE_F32 && idt != TPU_DTYPE_F32))
        return false;
    if (odt == TPU_DTYPE_F32)
        tpu_k_cvt_to_f32((float *)out, in, idt, n);
    else
        tpu_k_cvt_from_f32(out, odt, (const float *)in, n);
    return true;
}

/* Copies one tile, rows [0, nr) x columns [0, nc), element (r, c) from
 * in + (r * ir + c * ic) * es to out + (r * or + c) * es (strides in
 * elements). Columns outermost: in's rows are its contiguous direction. */
static inline __attribute__((always_inline)) void tile_copy(char *out, int64_t orow,
                                                            const char *in, int64_t ir,
                                                            int64_t ic, int64_t nr, int64_t nc,
                                                            size_t es) {
    for (int64_t c = 0; c < nc; c++)
        for (int64_t r = 0; r < nr; r++)
            memcpy(out + (r * orow + c) * (int64_t)es, in + (r * ir + c * ic) * (int64_t)es, es);
}

#if TPU_K_X86
/* One 8x8 block of 4-byte elements: out[r * orow + c] = in[r + c * ic]
 * for r, c < 8. The 8 columns are contiguous loads, transposed in
 * registers (pure data movement: the bits are copied unchanged). */
__attribute__((target("avx2,fma"))) static void transpose8x8_avx2(float *out, int64_t orow,
                                                                  const float *in, int64_t ic) {
    __m256 r[8], t[8], u[8];
    for (int c = 0; c < 8; c++)
        r[c] = _mm256_loadu_ps(in + c * ic);
    /* Interleave pairs, then quads, then swap 128-bit halves. */
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
        u[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
        u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xee);
        u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
        u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xee);
    }
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_ps(out + k * orow, _mm256_permute2f128_ps(u[k], u[k + 4], 0x20));
        _mm256_storeu_ps(out + (k + 4) * orow, _mm256_permute2f128_ps(u[k], u[k + 4], 0x31));
    }
}

/* A tile of 4-byte elements with in contiguous along rows (ir == 1):
 * whole 8x8 blocks in registers, the ragged edges element by element. */
__attribute__((target("avx2,fma"))) static void tile_copy4_avx2(char *out, int64_t orow,
                                                                const char *in, int64_t ic,
                                                                int64_t nr, int64_t nc) {
    int64_t r8 = nr / 8 * 8, c8 = nc / 8 * 8;
    for (int64_t r = 0; r < r8; r += 8)
        for (int64_t c = 0; c < c8; c += 8)
            transpose8x8_avx2((float *)out + r * orow + c, orow, (const float *)in + r + c * ic,
                              ic);
    for (int64_t r = 0; r < nr; r++)
        for (int64_t c = r < r8 ? c8 : 0; c < nc; c++)
            memcpy(out + (r * orow + c) * 4, in + (r + c * ic) * 4, 4);
}
#endif

/* Blocked transpose for a same-dtype copy whose coalesced shape sh has
 * out contiguous along the last dim and in nearly contiguous along the
 * one before it: 2-d planes [R, C] are copied in square tiles, so that
 * reads and writes both stay within a few cache lines. Work unit: one
 * strip of TRANSPOSE_TILE rows of one plane; shares take contiguous
 * ranges of units (elements are independent, so any split is exact). */
static void copy_transposed(const tpu_op *op, const tpu_k_shape *sh, int ith, int nth) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    size_t es = tpu_dtype_size(o->dtype);
    bool aligned = tpu_k_is_aligned(o) && tpu_k_is_aligned(in);
    int32_t nd = sh->ndim;
    int64_t rows = sh->sizes[nd - 2], cols = sh->sizes[nd - 1];
    int64_t orow = sh->strides[0][nd - 2], ir = sh->strides[1][nd - 2], ic = sh->strides[1][nd - 1];
    int64_t strips = (rows + TPU_K_TRANSPOSE_TILE - 1) / TPU_K_TRANSPOSE_TILE;
    int64_t planes = 1;
    for (int32_t d = 0; d < nd - 2; d++)
        planes *= sh->sizes[d];
    int64_t u0, u1;
    tpu_k_split(planes * strips, ith, nth, &u0, &u1);
    /* Plane offsets come from an iterator over the leading dims. */
    const int64_t *st[2] = {sh->strides[0], sh->strides[1]};
    tpu_k_iter it;
    tpu_k_iter_init(&it, nd - 2, sh->sizes, 2, st, u0 < u1 ? u0 / strips : 0);
    for (int64_t u = u0; u < u1; u++) {
        int64_t r0 = (u % strips) * TPU_K_TRANSPOSE_TILE;
        int64_t nr = rows - r0 < TPU_K_TRANSPOSE_TILE ? rows - r0 : TPU_K_TRANSPOSE_TILE;
        char *po = tpu_k_ptr(o, it.off[0] + r0 * orow);
        const char *pi = tpu_k_ptr(in, it.off[1] + r0 * ir);
        for (int64_t c0 = 0; c0 < cols; c0 += TPU_K_TRANSPOSE_TILE) {
            int64_t nc = cols - c0 < TPU_K_TRANSPOSE_TILE ? cols - c0 : TPU_K_TRANSPOSE_TILE;
            char *to = po + c0 * (int64_t)es;
            const char *ti = pi + c0 * ic * (int64_t)es;
            /* Fixed element sizes let the compiler use plain moves. */
#if TPU_K_X86
            if (es == 4 && ir == 1 && aligned && tpu_k_cpu_has_avx2_fma()) {
                tile_copy4_avx2(to, orow, ti, ic, nr, nc);
                continue;
            }
#endif
            switch (es) {
            case 1: tile_copy(to, orow, ti, ir, ic, nr, nc, 1); break;
            case 2: tile_copy(to, orow, ti, ir, ic, nr, nc, 2); break;
            case 4: tile_copy(to, orow, ti, ir, ic, nr, nc, 4); break;
            default: tile_copy(to, orow, ti, ir, ic, nr, nc, 8); break;
            }
        }
        /* The strip was the plane's last: move to the next plane. */
        if (u % strips == strips - 1)
            tpu_k_iter_next(&it);
    }
}

/* True for a coalesced same-dtype copy worth tiling: out contiguous in
 * the last dim, in strided there but closer to contiguous in the dim
 * before it. */
static bool wants_tiles(const tpu_k_shape *sh) {
    int32_t nd = sh->ndim;
    if (nd < 2 || sh->strides[0][nd - 1] != 1)
        return false;
    int64_t ic = sh->strides[1][nd - 1], ir = sh->strides[1][nd - 2];
    int64_t aic = ic < 0 ? -ic : ic, air = ir < 0 ? -ir : ir;
    return aic > 1 && air < aic;
}

/* The flat run: both sides the same flat array (out dense, in laid out
 * like it), copied or converted. */
typedef struct {
    bool same, aligned;
} copy_span_state;
TPU_K_SPAN_STATE_FITS(copy_span_state);

static void copy_span_run(const tpu_op_span *s, char *out, const char *const *in, int64_t n) {
    copy_span_state state;
    memcpy(&state, s->state, sizeof state); /* not through a cast: uint64_t storage */
    const copy_span_state *st = &state;
    const tpu_dtype odt = s->op->out.dtype, idt = s->op->in[0].dtype;
    if (st->same)
        copy_run_same(out, 1, in[0], 1, n, (size_t)s->out_size);
    else if (!convert_run_contig(out, odt, in[0], idt, n, st->aligned))
        convert_run_typed(out, odt, 1, in[0], idt, 1, n);
}

/* Plain copies, not a transpose (the fast path tiles those), over the
 * same flat array. */
bool tpu_k_copy_span(const tpu_op *op, tpu_op_span *s) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    const bool same = o->dtype == in->dtype;
    if (op->fn != TPU_COPY_PLAIN || !tpu_k_is_dense(o) || !tpu_k_same_layout(in, o))
        return false;
    const int64_t *strides[2] = {o->strides, in->strides};
    tpu_k_shape sh;
    tpu_k_shape_coalesce(&sh, o->ndim, o->sizes, 2, strides);
    if (same && tpu_k_numel(o) > 0 && wants_tiles(&sh))
        return false;
    tpu_k_span_init(s, op, copy_span_run);
    copy_span_state st = {same, tpu_k_is_aligned(o) && tpu_k_is_aligned(in)};
    memcpy(s->state, &st, sizeof st);
    return true;
}

/* Fast path for what has no flat run (op_table.c runs those): same-dtype
 * copies (tiles for transposes, else strided row runs of the coalesced
 * shape) and conversions (by row runs, one loop per dtype pair, the run
 * conversions for contiguous aligned f32/f16/bf16 runs); TRIL and TRIU
 * by rows (copy_triangle_rows). */
/* TRIL and TRIU by rows of the last dim: each row's kept columns are one
 * run, copied (or converted) as a plain copy's run is, and the rest set
 * to 0, instead of deciding per element. Rows are split across shares;
 * every element is written once from its own input, so any split gives
 * the reference's bytes (in place too: a kept run is copied onto itself,
 * a dropped one zeroed). */
static void copy_triangle_rows(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    const int32_t nd = o->ndim;
    const int64_t rows = o->sizes[nd - 2], cols = o->sizes[nd - 1];
    const int64_t n_rows = cols > 0 ? tpu_k_numel(o) / cols : 0;
    int64_t start, end;
    tpu_k_split(n_rows, ith, nth, &start, &end);
    if (start >= end)
        return;
    const int64_t k = op->p.tri.diagonal;
    const bool lower = op->fn == TPU_COPY_TRIL;
    const bool same = o->dtype == in->dtype;
    const size_t es = tpu_dtype_size(o->dtype);
    const int64_t so = o->strides[nd - 1], si = in->strides[nd - 1];
    /* Walk the rows: every dim but the last. */
    const int64_t *strides[2] = {o->strides, in->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, nd - 1, o->sizes, 2, strides, start);
    for (int64_t r = start; r < end; r++, tpu_k_iter_next(&it)) {
        const int64_t i = r % rows;
        /* Kept columns [c0, c1): tril j <= i + k, triu j >= i + k, with
         * the comparisons ordered so that i + k is only formed in range. */
        int64_t c0 = 0, c1 = cols;
        if (lower)
            c1 = k >= cols - i ? cols : k < -i ? 0 : i + k + 1;
        else
            c0 = k >= cols - i ? cols : k <= -i ? 0 : i + k;
        char *po = tpu_k_ptr(o, it.off[0]);
        const char *pi = tpu_k_ptr(in, it.off[1]);
        if (c1 > c0) {
            char *dst = po + c0 * so * (int64_t)es;
            const char *src = pi + c0 * si * (int64_t)tpu_dtype_size(in->dtype);
            if (same)
                copy_run_same(dst, so, src, si, c1 - c0, es);
            else
                convert_run_typed(dst, o->dtype, so, src, in->dtype, si, c1 - c0);
        } else {
            c0 = c1 = cols; /* nothing kept: zero the whole row below */
        }
        /* The dropped columns [0, c0) and [c1, cols): 0 in every dtype. */
        if (so == 1) {
            memset(po, 0, (size_t)c0 * es);
            memset(po + c1 * (int64_t)es, 0, (size_t)(cols - c1) * es);
            continue;
        }
        for (int64_t j = 0; j < c0; j++)
            memset(po + j * so * (int64_t)es, 0, es);
        for (int64_t j = c1; j < cols; j++)
            memset(po + j * so * (int64_t)es, 0, es);
    }
}

tpu_status tpu_k_copy_fast(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *in = &op->in[0];
    bool same = o->dtype == in->dtype;
    if (op->fn != TPU_COPY_PLAIN) {
        copy_triangle_rows(op, ith, nth);
        return TPU_OK;
    }
    int64_t numel = tpu_k_numel(o);
    bool aligned = tpu_k_is_aligned(o) && tpu_k_is_aligned(in);
    size_t es = tpu_dtype_size(o->dtype);
    const int64_t *strides[2] = {o->strides, in->strides};
    tpu_k_shape sh;
    tpu_k_shape_coalesce(&sh, o->ndim, o->sizes, 2, strides);
    if (same && numel > 0 && wants_tiles(&sh)) {
        copy_transposed(op, &sh, ith, nth);
        return TPU_OK;
    }
    int64_t start, end;
    tpu_k_split(numel, ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    /* Walk the coalesced shape one innermost-row run at a time. */
    const int64_t *cs[2] = {sh.strides[0], sh.strides[1]};
    tpu_k_iter it;
    tpu_k_iter_init(&it, sh.ndim, sh.sizes, 2, cs, start);
    int64_t so = sh.ndim ? sh.strides[0][sh.ndim - 1] : 0;
    int64_t si = sh.ndim ? sh.strides[1][sh.ndim - 1] : 0;
    for (int64_t i = start; i < end;) {
        int64_t run = tpu_k_iter_row_left(&it);
        if (run > end - i)
            run = end - i;
        char *po = tpu_k_ptr(o, it.off[0]);
        const char *pi = tpu_k_ptr(in, it.off[1]);
        if (same)
            copy_run_same(po, so, pi, si, run, es);
        else if (so != 1 || si != 1 ||
                 !convert_run_contig(po, o->dtype, pi, in->dtype, run, aligned))
            convert_run_typed(po, o->dtype, so, pi, in->dtype, si, run);
        tpu_k_iter_advance_in_row(&it, run);
        i += run;
    }
    return TPU_OK;
}

/* ------------------------------------------------------------- FILL */

/* Stores the fill value into one element of out's dtype. */
static void fill_one(char *p, const tpu_op *op) {
    tpu_dtype dt = op->out.dtype;
    const tpu_scalar v = op->p.fill.value;
    switch (dt) {
    case TPU_DTYPE_F32:
    case TPU_DTYPE_F16:
    case TPU_DTYPE_BF16:
    case TPU_DTYPE_F64: tpu_k_store_f64(p, dt, v.f); return;
    case TPU_DTYPE_BOOL: tpu_k_store_bool(p, dt, v.i != 0); return;
    default: tpu_k_store_i64(p, dt, v.i); return;
    }
}

/* Stores element k of an ARANGE into p. */
static void arange_one(char *p, const tpu_op *op, int64_t k) {
    const tpu_dtype dt = op->out.dtype;
    const tpu_scalar v = op->p.fill.value, st = op->p.fill.step;
    if (tpu_dtype_is_float(dt))
        tpu_k_store_f64(p, dt, v.f + st.f * (double)k);
    else
        tpu_k_store_i64(p, dt, tpu_k_u64_to_i64((uint64_t)v.i + (uint64_t)st.i * (uint64_t)k));
}

tpu_status tpu_k_fill_ref(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out;
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    const int64_t *strides[1] = {o->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 1, strides, start);
    const bool ramp = op->fn == TPU_FILL_ARANGE;
    for (int64_t i = start; i < end; i++, tpu_k_iter_next(&it)) {
        if (ramp)
            arange_one(tpu_k_ptr(o, it.off[0]), op, i);
        else
            fill_one(tpu_k_ptr(o, it.off[0]), op);
    }
    return TPU_OK;
}

/* Writes the element pattern `elem` (es bytes) to n strided elements. */
static void fill_run(char *p, int64_t stride, const char *elem, size_t es, int64_t n) {
    int64_t step = stride * (int64_t)es;
    if (es == 1 && stride == 1) {
        memset(p, elem[0], (size_t)n);
        return;
    }
    switch (es) {
    case 1: for (int64_t j = 0; j < n; j++) memcpy(p + j * step, elem, 1); break;
    case 2: for (int64_t j = 0; j < n; j++) memcpy(p + j * step, elem, 2); break;
    case 4: for (int64_t j = 0; j < n; j++) memcpy(p + j * step, elem, 4); break;
    default: for (int64_t j = 0; j < n; j++) memcpy(p + j * step, elem, 8); break;
    }
}

/* The flat run of a constant fill of a dense out: the value's bytes,
 * converted once. */
static void fill_span_run(const tpu_op_span *s, char *out, const char *const *in, int64_t n) {
    (void)in;
    fill_run(out, 1, (const char *)s->state, (size_t)s->out_size, n);
}

bool tpu_k_fill_span(const tpu_op *op, tpu_op_span *s) {
    if (op->fn != TPU_FILL_CONSTANT || !tpu_k_is_dense(&op->out))
        return false;
    tpu_k_span_init(s, op, fill_span_run);
    fill_one((char *)s->state, op);
    return true;
}

/* Fast path for a strided out (a dense one has a flat run): convert the
 * value once, then replicate its bytes by row runs. Same bytes as the
 * reference because both go through fill_one. */
tpu_status tpu_k_fill_fast(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out;
    int64_t start, end;
    if (op->fn == TPU_FILL_ARANGE) {
        /* A contiguous int64 ramp (position ids, a vocabulary's indices):
         * arange_one's wrapping arithmetic without the walk and the
         * dtype dispatch per element. Anything else is the reference's
         * one multiply-add per element. */
        if (o->dtype != TPU_DTYPE_I64 || o->ndim != 1 || (o->strides[0] != 1 && o->sizes[0] > 1))
            return tpu_k_fill_ref(op, ith, nth);
        tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
        int64_t *p = o->data;
        const uint64_t v = (uint64_t)op->p.fill.value.i, st = (uint64_t)op->p.fill.step.i;
        for (int64_t k = start; k < end; k++)
            p[k] = tpu_k_u64_to_i64(v + st * (uint64_t)k);
        return TPU_OK;
    }
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return TPU_OK;
    char elem[8];
    fill_one(elem, op);
    size_t es = tpu_dtype_size(o->dtype);
    const int64_t *strides[1] = {o->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 1, strides, start);
    int64_t so = o->ndim ? o->strides[o->ndim - 1] : 0;
    for (int64_t i = start; i < end;) {
        int64_t run = tpu_k_iter_row_left(&it);
        if (run > end - i)
            run = end - i;
        fill_run(tpu_k_ptr(o, it.off[0]), so, elem, es, run);
        tpu_k_iter_advance_in_row(&it, run);
        i += run;
    }
    return TPU_OK;
}
