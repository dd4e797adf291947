/* INDEX INTERP and INTERP_BACKWARD: one dim of a separable interpolation
 * (PyTorch's linear, bilinear, bicubic, trilinear and antialiased
 * resizing are one record per dim) and its adjoint.
 *
 * A "line" is the set of elements that differ only along the
 * interpolated dim. INTERP writes out's line from x's line:
 * out[o] = sum_t w[o, t] x[idx[o, t]]; INTERP_BACKWARD zeroes its out line
 * and adds w[o, t] g[o] into out[idx[o, t]] for (o, t) in row-major
 * order. Every line is written by one share, so no two shares touch one
 * element and the sums do not depend on the thread count.
 *
 * The table is checked before any line is computed: every share reads all
 * of it first (it is small), and an index outside [-1, size) stops the
 * share with TPU_ERR_INDEX. The hot loops then index without checks.
 *
 * Reference kernels walk out element by element (INTERP) or line by line
 * (INTERP_BACKWARD) with the generic loads. The fast kernels take blocks
 * of up to TPU_K_INTERP_BLOCK neighbouring lines (along the line-space dim
 * of smallest stride, the "inner" dim) and choose the loop order by
 * layout: when the interpolated dim is the more contiguous one, line by
 * line (a gather along it); otherwise tap by tap across the block (a
 * vectorisable pass over the inner dim). Both orders compute every
 * element with the same operations in the same order as the reference,
 * so all paths give the same bytes. */
#include <string.h>

#include "kernels_internal.h"
#include "strided.h"

/* Checks every tap index: -1 (absent) or in [0, size). */
static tpu_status check_taps(const tpu_op *op, int64_t size) {
    const tpu_tensor *idx = &op->in[1];
    for (int64_t o = 0; o < idx->sizes[0]; o++)
        for (int64_t t = 0; t < idx->sizes[1]; t++) {
            int64_t v = tpu_k_load_index(tpu_k_ptr(idx, o * idx->strides[0] + t * idx->strides[1]),
                                         idx->dtype);
            if (v < -1 || v >= size)
                return tpu_set_error(TPU_ERR_INDEX, "%s: tap index %lld (row %lld, tap %lld) is out "
                                     "of bounds for dimension %d with size %lld",
                                     tpu_k_op_label(op), (long long)v, (long long)o, (long long)t,
                                     (int)op->p.index.dim, (long long)size);
        }
    return TPU_OK;
}

static inline int64_t tap_index(const tpu_tensor *idx, int64_t o, int64_t t) {
    return tpu_k_load_index(tpu_k_ptr(idx, o * idx->strides[0] + t * idx->strides[1]), idx->dtype);
}

static inline double tap_weight(const tpu_tensor *w, int64_t o, int64_t t) {
    return tpu_k_load_f64(tpu_k_ptr(w, o * w->strides[0] + t * w->strides[1]), w->dtype);
}

/* ------------------------------------------------------------ reference */

/* INTERP: out elements [start, end) in row-major order. */
static tpu_status interp_ref(const tpu_op *op, int64_t start, int64_t end) {
    const tpu_tensor *x = &op->in[0], *o = &op->out, *idx = &op->in[1], *w = &op->in[2];
    const int32_t dim = op->p.index.dim;
    const bool wide = x->dtype == TPU_DTYPE_F64;
    int64_t xs[TPU_MAX_DIMS];
    for (int32_t d = 0; d < o->ndim; d++)
        xs[d] = d == dim ? 0 : x->strides[d];
    const int64_t *strides[2] = {o->strides, xs};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, o->sizes, 2, strides, start);
    const int64_t taps = idx->sizes[1], sd = x->strides[dim];
    for (int64_t e = start; e < end; e++, tpu_k_iter_next(&it)) {
        const int64_t r = it.idx[dim];
        bool first = true;
        double acc64 = 0.0;
        float acc32 = 0.0f;
        for (int64_t t = 0; t < taps; t++) {
            int64_t i = tap_index(idx, r, t);
            if (i < 0)
                continue;
            const char *p = tpu_k_ptr(x, it.off[1] + i * sd);
            if (wide) {
                double v = tap_weight(w, r, t) * tpu_k_load_f64(p, x->dtype);
                acc64 = first ? v : acc64 + v;
            } else {
                float v = (float)tap_weight(w, r, t) * tpu_k_load_f32(p, x->dtype);
                acc32 = first ? v : acc32 + v;
            }
            first = false;
        }
        char *dst = tpu_k_ptr(o, it.off[0]);
        if (wide)
            tpu_k_store_f64(dst, o->dtype, acc64);
        else
            tpu_k_store_f32(dst, o->dtype, acc32);
    }
    return TPU_OK;
}

/* INTERP_BACKWARD: lines [start, end) of out, in row-major order of its
 * other dims. */
static tpu_status interp_backward_ref(const tpu_op *op, int64_t start, int64_t end) {
    const tpu_tensor *g = &op->in[0], *o = &op->out, *idx = &op->in[1], *w = &op->in[2];
    const int32_t dim = op->p.index.dim;
    const bool wide = o->dtype == TPU_DTYPE_F64;
    int64_t line_sizes[TPU_MAX_DIMS];
    for (int32_t d = 0; d < o->ndim; d++)
        line_sizes[d] = d == dim ? 1 : o->sizes[d];
    const int64_t *strides[2] = {o->strides, g->strides};
    tpu_k_iter it;
    tpu_k_iter_init(&it, o->ndim, line_sizes, 2, strides, start);
    const int64_t rows = idx->sizes[0], taps = idx->sizes[1], size = o->sizes[dim];
    for (int64_t l = start; l < end; l++, tpu_k_iter_next(&it)) {
        for (int64_t i = 0; i < size; i++)
            tpu_k_store_f64(tpu_k_ptr(o, it.off[0] + i * o->strides[dim]), o->dtype, 0.0);
        for (int64_t r = 0; r < rows; r++) {
            const char *gp = tpu_k_ptr(g, it.off[1] + r * g->strides[dim]);
            for (int64_t t = 0; t < taps; t++) {
                int64_t i = tap_index(idx, r, t);
                if (i < 0)
                    continue;
                char *dst = tpu_k_ptr(o, it.off[0] + i * o->strides[dim]);
                if (wide)
                    tpu_k_store_f64(dst, o->dtype, tpu_k_load_f64(dst, o->dtype) +
                                    tap_weight(w, r, t) * tpu_k_load_f64(gp, g->dtype));
                else
                    tpu_k_store_f32(dst, o->dtype, tpu_k_load_f32(dst, o->dtype) +
                                    (float)tap_weight(w, r, t) * tpu_k_load_f32(gp, g->dtype));
            }
        }
    }
    return TPU_OK;
}

/* Lines of out (the elements along every dim but `dim`). */
static int64_t line_count(const tpu_op *op) {
    const tpu_tensor *o = &op->out;
    int64_t n = 1;
    for (int32_t d = 0; d < o->ndim; d++)
        n *= d == op->p.index.dim ? 1 : o->sizes[d];
    return n;
}

/* Size of the dim the tap indices point into. */
static int64_t tap_range(const tpu_op *op) {
    const tpu_tensor *t = op->fn == TPU_INDEX_INTERP ? &op->in[0] : &op->out;
    return t->sizes[op->p.index.dim];
}

tpu_status tpu_k_interp_ref(const tpu_op *op, int ith, int nth) {
    const bool fwd = op->fn == TPU_INDEX_INTERP;
    int64_t start, end;
    tpu_k_split(fwd ? tpu_k_numel(&op->out) : line_count(op), ith, nth, &start, &end);
    if (start >= end || tpu_k_numel(&op->out) == 0)
        return TPU_OK;
    tpu_status st = check_taps(op, tap_range(op));
    if (st != TPU_OK)
        return st;
    return fwd ? interp_ref(op, start, end) : interp_backward_ref(op, start, end);
}

/* ----------------------------------------------------------------- fast */

enum { BLOCK = TPU_K_INTERP_BLOCK };

/* The lines of out, as units of work: every position of the line-space
 * dims other than the inner one (`outer`), times blocks of the inner dim. */
typedef struct {
    int32_t n;                       /* outer dims */
    int64_t sizes[TPU_MAX_DIMS];     /* their sizes, in dim order */
    int64_t s_in[TPU_MAX_DIMS];      /* and strides in in[0] and out */
    int64_t s_out[TPU_MAX_DIMS];
    int64_t inner, in_q, out_q;      /* inner dim size (1 if none) and strides */
    int64_t blocks;                  /* blocks per outer position */
    int64_t units;
} line_units;

static void make_units(const tpu_op *op, line_units *u) {
    const tpu_tensor *in = &op->in[0], *o = &op->out;
    const int32_t dim = op->p.index.dim;
    /* The inner dim: of size > 1, the smallest |stride| in out. */
    int32_t q = -1;
    for (int32_t d = 0; d < o->ndim; d++) {
        if (d == dim || o->sizes[d] < 2)
            continue;
        int64_t s = o->strides[d] < 0 ? -o->strides[d] : o->strides[d];
        int64_t best = q < 0 ? 0 : o->strides[q] < 0 ? -o->strides[q] : o->strides[q];
        if (q < 0 || s < best)
            q = d;
    }
    memset(u, 0, sizeof *u);
    for (int32_t d = 0; d < o->ndim; d++) {
        if (d == dim || d == q)
            continue;
        u->sizes[u->n] = o->sizes[d];
        u->s_in[u->n] = in->strides[d];
        u->s_out[u->n] = o->strides[d];
        u->n++;
    }
    u->inner = q < 0 ? 1 : o->sizes[q];
    u->in_q = q < 0 ? 0 : in->strides[q];
    u->out_q = q < 0 ? 0 : o->strides[q];
    u->blocks = (u->inner + BLOCK - 1) / BLOCK;
    int64_t outer = 1;
    for (int32_t k = 0; k < u->n; k++)
        outer *= u->sizes[k];
    u->units = outer * u->blocks;
}

/* Unit k: its first line's offsets in in[0] and out, and its inner range. */
static void unit_at(const line_units *u, int64_t k, int64_t *off_in, int64_t *off_out, int64_t *j0,
                    int64_t *j1) {
    int64_t outer = k / u->blocks, blk = k % u->blocks;
    *off_in = *off_out = 0;
    for (int32_t d = u->n - 1; d >= 0; d--) {
        int64_t c = outer % u->sizes[d];
        outer /= u->sizes[d];
        *off_in += c * u->s_in[d];
        *off_out += c * u->s_out[d];
    }
    *j0 = blk * BLOCK;
    *j1 = *j0 + BLOCK < u->inner ? *j0 + BLOCK : u->inner;
}

/* Typed element access; with constant dtypes (the callers below pass
 * literals) the switches fold away and the loops vectorise. The f32
 * compute path reads and writes f32, f16 and bf16 only. */
static inline __attribute__((always_inline)) int64_t fsize(tpu_dtype dt) {
    return dt == TPU_DTYPE_F32 ? 4 : 2;
}

static inline __attribute__((always_inline)) float ld32(const void *base, int64_t off, tpu_dtype dt) {
    return tpu_k_load_f32((const char *)base + off * fsize(dt), dt);
}

static inline __attribute__((always_inline)) void st32(void *base, int64_t off, tpu_dtype dt, float v) {
    tpu_k_store_f32((char *)base + off * fsize(dt), dt, v);
}

static inline __attribute__((always_inline)) double ld64(const void *base, int64_t off) {
    double v;
    memcpy(&v, (const char *)base + off * 8, 8);
    return v;
}

static inline __attribute__((always_inline)) void st64(void *base, int64_t off, double v) {
    memcpy((char *)base + off * 8, &v, 8);
}

/* The per-unit bodies, written for a compute type (f32 over in/out dtypes
 * xdt/odt, or f64) and inlined into specialisations below. The table is
 * read in place (tab_idx, tab_w: row-major, contiguous). */
typedef struct {
    const tpu_op *op;
    line_units u;
    int64_t rows, taps;        /* table sizes */
    int64_t sd_in, sd_out;     /* strides along the interpolated dim */
    int64_t size_out_dim;      /* INTERP_BACKWARD: out's size along it */
    bool gather;               /* loop order: line by line */
    bool full;                 /* no tap is absent */
    const int64_t *tab_idx;    /* [rows * taps] */
    const void *tab_w;         /* [rows * taps], float or double */
} interp_ctx;

/* One output of a line: the taps' weighted sum, from the first present
 * tap (every tap is present when `full`). */
static inline __attribute__((always_inline)) float gather_f32(const void *x, int64_t line, int64_t sd,
                                                              const int64_t *ti, const float *tv,
                                                              int64_t taps, bool full, tpu_dtype xdt) {
    if (full) {
        float acc = tv[0] * ld32(x, line + ti[0] * sd, xdt);
        for (int64_t t = 1; t < taps; t++)
            acc = acc + tv[t] * ld32(x, line + ti[t] * sd, xdt);
        return acc;
    }
    bool first = true;
    float acc = 0.0f;
    for (int64_t t = 0; t < taps; t++) {
        if (ti[t] < 0)
            continue;
        float v = tv[t] * ld32(x, line + ti[t] * sd, xdt);
        acc = first ? v : acc + v;
        first = false;
    }
    return acc;
}

static inline __attribute__((always_inline)) void fwd_unit_f32(const interp_ctx *c, int64_t bi,
                                                               int64_t bo, int64_t j0, int64_t j1,
                                                               tpu_dtype xdt, tpu_dtype odt) {
    const tpu_tensor *x = &c->op->in[0], *o = &c->op->out;
    const float *tw = c->tab_w;
    const int64_t taps = c->taps, sdi = c->sd_in, sdo = c->sd_out, qi = c->u.in_q, qo = c->u.out_q;
    if (c->gather) {
        for (int64_t j = j0; j < j1; j++) {
            const int64_t li = bi + j * qi, lo = bo + j * qo;
            if (c->full && taps == 2 && sdi == 1) {
                for (int64_t r = 0; r < c->rows; r++)
                    st32(o->data, lo + r * sdo, odt, gather_f32(x->data, li, 1, c->tab_idx + r * 2,
                                                                tw + r * 2, 2, true, xdt));
            } else if (c->full && taps == 4 && sdi == 1) {
                for (int64_t r = 0; r < c->rows; r++)
                    st32(o->data, lo + r * sdo, odt, gather_f32(x->data, li, 1, c->tab_idx + r * 4,
                                                                tw + r * 4, 4, true, xdt));
            } else {
                for (int64_t r = 0; r < c->rows; r++)
                    st32(o->data, lo + r * sdo, odt, gather_f32(x->data, li, sdi, c->tab_idx + r * taps,
                                                                tw + r * taps, taps, c->full, xdt));
            }
        }
        return;
    }
    float acc[BLOCK];
    const int64_t n = j1 - j0;
    for (int64_t r = 0; r < c->rows; r++) {
        const int64_t *ti = c->tab_idx + r * taps;
        const float *tv = tw + r * taps;
        bool first = true;
        for (int64_t t = 0; t < taps; t++) {
            if (ti[t] < 0)
                continue;
            const float wv = tv[t];
            const int64_t base = bi + ti[t] * sdi + j0 * qi;
            if (first && qi == 1) {
                for (int64_t k = 0; k < n; k++)
                    acc[k] = wv * ld32(x->data, base + k, xdt);
            } else if (first) {
                for (int64_t k = 0; k < n; k++)
                    acc[k] = wv * ld32(x->data, base + k * qi, xdt);
            } else if (qi == 1) {
                for (int64_t k = 0; k < n; k++)
                    acc[k] = acc[k] + wv * ld32(x->data, base + k, xdt);
            } else {
                for (int64_t k = 0; k < n; k++)
                    acc[k] = acc[k] + wv * ld32(x->data, base + k * qi, xdt);
            }
            first = false;
        }
        if (first)
            memset(acc, 0, sizeof acc);
        const int64_t ob = bo + r * sdo + j0 * qo;
        if (qo == 1) {
            for (int64_t k = 0; k < n; k++)
                st32(o->data, ob + k, odt, acc[k]);
        } else {
            for (int64_t k = 0; k < n; k++)
                st32(o->data, ob + k * qo, odt, acc[k]);
        }
    }
}

static inline __attribute__((always_inline)) void fwd_unit_f64(const interp_ctx *c, int64_t bi,
                                                               int64_t bo, int64_t j0, int64_t j1) {
    const tpu_tensor *x = &c->op->in[0], *o = &c->op->out;
    const double *tw = c->tab_w;
    const int64_t taps = c->taps, sdi = c->sd_in, sdo = c->sd_out, qi = c->u.in_q, qo = c->u.out_q;
    if (c->gather) {
        for (int64_t j = j0; j < j1; j++) {
            const int64_t li = bi + j * qi, lo = bo + j * qo;
            for (int64_t r = 0; r < c->rows; r++) {
                const int64_t *ti = c->tab_idx + r * taps;
                const double *tv = tw + r * taps;
                bool first = true;
                double acc = 0.0;
                for (int64_t t = 0; t < taps; t++) {
                    if (ti[t] < 0)
                        continue;
                    double v = tv[t] * ld64(x->data, li + ti[t] * sdi);
                    acc = first ? v : acc + v;
                    first = false;
                }
                st64(o->data, lo + r * sdo, acc);
            }
        }
        return;
    }
    double acc[BLOCK];
    const int64_t n = j1 - j0;
    for (int64_t r = 0; r < c->rows; r++) {
        const int64_t *ti = c->tab_idx + r * taps;
        const double *tv = tw + r * taps;
        bool first = true;
        for (int64_t t = 0; t < taps; t++) {
            if (ti[t] < 0)
                continue;
            const double wv = tv[t];
            const int64_t base = bi + ti[t] * sdi + j0 * qi;
            for (int64_t k = 0; k < n; k++) {
                double v = wv * ld64(x->data, base + k * qi);
                acc[k] = first ? v : acc[k] + v;
            }
            first = false;
        }
        if (first)
            memset(acc, 0, sizeof acc);
        const int64_t ob = bo + r * sdo + j0 * qo;
        for (int64_t k = 0; k < n; k++)
            st64(o->data, ob + k * qo, acc[k]);
    }
}

/* INTERP_BACKWARD: out (f32 or f64, the compute type) accumulates in
 * place; in[0] is the gradient, of dtype gdt. */
static inline __attribute__((always_inline)) void bwd_unit_f32(const interp_ctx *c, int64_t bg,
                                                               int64_t bo, int64_t j0, int64_t j1,
                                                               tpu_dtype gdt) {
    const tpu_tensor *g = &c->op->in[0], *o = &c->op->out;
    const float *tw = c->tab_w;
    float *od = o->data;
    const int64_t taps = c->taps, sdg = c->sd_in, sdo = c->sd_out, qg = c->u.in_q, qo = c->u.out_q;
    if (c->gather) {
        for (int64_t j = j0; j < j1; j++) {
            const int64_t lg = bg + j * qg, lo = bo + j * qo;
            for (int64_t i = 0; i < c->size_out_dim; i++)
                od[lo + i * sdo] = 0.0f;
            for (int64_t r = 0; r < c->rows; r++) {
                const float gv = ld32(g->data, lg + r * sdg, gdt);
                for (int64_t t = 0; t < taps; t++) {
                    const int64_t i = c->tab_idx[r * taps + t];
                    if (i >= 0)
                        od[lo + i * sdo] = od[lo + i * sdo] + tw[r * taps + t] * gv;
                }
            }
        }
        return;
    }
    const int64_t n = j1 - j0;
    for (int64_t i = 0; i < c->size_out_dim; i++)
        for (int64_t k = 0; k < n; k++)
            od[bo + i * sdo + (j0 + k) * qo] = 0.0f;
    for (int64_t r = 0; r < c->rows; r++) {
        const int64_t gb = bg + r * sdg + j0 * qg;
        for (int64_t t = 0; t < taps; t++) {
            const int64_t i = c->tab_idx[r * taps + t];
            if (i < 0)
                continue;
            const float wv = tw[r * taps + t];
            float *dst = od + bo + i * sdo + j0 * qo;
            if (qo == 1 && qg == 1) {
                for (int64_t k = 0; k < n; k++)
                    dst[k] = dst[k] + wv * ld32(g->data, gb + k, gdt);
            } else {
                for (int64_t k = 0; k < n; k++)
                    dst[k * qo] = dst[k * qo] + wv * ld32(g->data, gb + k * qg, gdt);
            }
        }
    }
}

static inline __attribute__((always_inline)) void bwd_unit_f64(const interp_ctx *c, int64_t bg,
                                                               int64_t bo, int64_t j0, int64_t j1) {
    const tpu_tensor *g = &c->op->in[0], *o = &c->op->out;
    const double *tw = c->tab_w;
    double *od = o->data;
    const int64_t taps = c->taps, sdg = c->sd_in, sdo = c->sd_out, qg = c->u.in_q, qo = c->u.out_q;
    if (c->gather) {
        for (int64_t j = j0; j < j1; j++) {
            const int64_t lg = bg + j * qg, lo = bo + j * qo;
            for (int64_t i = 0; i < c->size_out_dim; i++)
                od[lo + i * sdo] = 0.0;
            for (int64_t r = 0; r < c->rows; r++) {
                const double gv = ld64(g->data, lg + r * sdg);
                for (int64_t t = 0; t < taps; t++) {
                    const int64_t i = c->tab_idx[r * taps + t];
                    if (i >= 0)
                        od[lo + i * sdo] = od[lo + i * sdo] + tw[r * taps + t] * gv;
                }
            }
        }
        return;
    }
    const int64_t n = j1 - j0;
    for (int64_t i = 0; i < c->size_out_dim; i++)
        for (int64_t k = 0; k < n; k++)
            od[bo + i * sdo + (j0 + k) * qo] = 0.0;
    for (int64_t r = 0; r < c->rows; r++) {
        const int64_t gb = bg + r * sdg + j0 * qg;
        for (int64_t t = 0; t < taps; t++) {
            const int64_t i = c->tab_idx[r * taps + t];
            if (i < 0)
                continue;
            const double wv = tw[r * taps + t];
            double *dst = od + bo + i * sdo + j0 * qo;
            for (int64_t k = 0; k < n; k++)
                dst[k * qo] = dst[k * qo] + wv * ld64(g->data, gb + k * qg);
        }
    }
}

/* Forward units [k0, k1), specialised by dtype pair. */
#define FWD32(xdt, odt)                                                                           \
    for (int64_t k = k0; k < k1; k++) {                                                           \
        int64_t bi, bo, j0, j1;                                                                   \
        unit_at(&c->u, k, &bi, &bo, &j0, &j1);                                                    \
        fwd_unit_f32(c, bi, bo, j0, j1, xdt, odt);                                                \
    }

static void fwd_units(const interp_ctx *c, int64_t k0, int64_t k1) {
    const tpu_dtype xdt = c->op->in[0].dtype, odt = c->op->out.dtype;
    if (xdt == TPU_DTYPE_F64) {
        for (int64_t k = k0; k < k1; k++) {
            int64_t bi, bo, j0, j1;
            unit_at(&c->u, k, &bi, &bo, &j0, &j1);
            fwd_unit_f64(c, bi, bo, j0, j1);
        }
    } else if (xdt == TPU_DTYPE_F32 && odt == TPU_DTYPE_F32) {
        FWD32(TPU_DTYPE_F32, TPU_DTYPE_F32)
    } else if (xdt == TPU_DTYPE_BF16 && odt == TPU_DTYPE_F32) {
        FWD32(TPU_DTYPE_BF16, TPU_DTYPE_F32)
    } else if (xdt == TPU_DTYPE_F32 && odt == TPU_DTYPE_BF16) {
        FWD32(TPU_DTYPE_F32, TPU_DTYPE_BF16)
    } else {
        FWD32(xdt, odt)
    }
}
#undef FWD32

#define BWD32(gdt)                                                                                \
    for (int64_t k = k0; k < k1; k++) {                                                           \
        int64_t bg, bo, j0, j1;                                                                   \
        unit_at(&c->u, k, &bg, &bo, &j0, &j1);                                                    \
        bwd_unit_f32(c, bg, bo, j0, j1, gdt);                                                     \
    }

static void bwd_units(const interp_ctx *c, int64_t k0, int64_t k1) {
    const tpu_dtype gdt = c->op->in[0].dtype;
    if (gdt == TPU_DTYPE_F64) {
        for (int64_t k = k0; k < k1; k++) {
            int64_t bg, bo, j0, j1;
            unit_at(&c->u, k, &bg, &bo, &j0, &j1);
            bwd_unit_f64(c, bg, bo, j0, j1);
        }
    } else if (gdt == TPU_DTYPE_F32) {
        BWD32(TPU_DTYPE_F32)
    } else {
        BWD32(gdt)
    }
}
#undef BWD32

/* A table the fast kernel reads in place: int64 indices and weights of the
 * compute type, row-major contiguous and aligned. */
static bool table_in_place(const tpu_tensor *t, tpu_dtype dt) {
    return t->dtype == dt && tpu_k_is_aligned(t) && (t->sizes[1] < 2 || t->strides[1] == 1) &&
           (t->sizes[0] < 2 || t->strides[0] == t->sizes[1]);
}

tpu_status tpu_k_interp_fast(const tpu_op *op, int ith, int nth) {
    const tpu_tensor *o = &op->out, *idx = &op->in[1], *w = &op->in[2];
    const bool fwd = op->fn == TPU_INDEX_INTERP;
    const bool wide = w->dtype == TPU_DTYPE_F64;
    if (!table_in_place(idx, TPU_DTYPE_I64) ||
        !table_in_place(w, wide ? TPU_DTYPE_F64 : TPU_DTYPE_F32) || !tpu_k_is_aligned(o) ||
        !tpu_k_is_aligned(&op->in[0]))
        return tpu_k_interp_ref(op, ith, nth);
    interp_ctx c;
    memset(&c, 0, sizeof c);
    c.op = op;
    make_units(op, &c.u);
    int64_t k0, k1;
    tpu_k_split(c.u.units, ith, nth, &k0, &k1);
    if (k0 >= k1 || tpu_k_numel(o) == 0)
        return TPU_OK;
    tpu_status st = check_taps(op, tap_range(op));
    if (st != TPU_OK)
        return st;
    const int32_t dim = op->p.index.dim;
    c.rows = idx->sizes[0];
    c.taps = idx->sizes[1];
    c.tab_idx = idx->data;
    c.tab_w = w->data;
    c.sd_in = op->in[0].strides[dim];
    c.sd_out = o->strides[dim];
    c.size_out_dim = o->sizes[dim];
    /* Line by line when the interpolated dim is the more contiguous one
     * (in the tensor read from), or there is no inner dim. */
    int64_t sd = c.sd_in < 0 ? -c.sd_in : c.sd_in, sq = c.u.in_q < 0 ? -c.u.in_q : c.u.in_q;
    c.gather = c.u.inner == 1 || sd < sq;
    c.full = true;
    for (int64_t k = 0; k < c.rows * c.taps; k++)
        c.full = c.full && c.tab_idx[k] >= 0;
    if (fwd)
        fwd_units(&c, k0, k1);
    else
        bwd_units(&c, k0, k1);
    return TPU_OK;
}
