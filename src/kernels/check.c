/* tpu_op_check: validates an op record before it is queued, so that the
 * kernels can rely on it (they only assert). Every failure names the op
 * and the offending values. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels_internal.h"
#include "strided.h"
#include "tpu/op.h"

/* Formats t's sizes as "[2, 3]" into buf (truncated if too long). */
static const char *fmt_sizes(char *buf, size_t cap, const tpu_tensor *t) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int32_t d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)t->sizes[d]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
    return buf;
}

/* Every byte the view addresses, [data + first, data + end), must lie in
 * its storage. first <= 0 < end, both already known to fit in int64. */
static tpu_status check_in_storage(const char *name, const char *what, const tpu_tensor *t,
                                   int64_t first, int64_t end) {
    if (t->storage == NULL || t->storage_nbytes < 0)
        return tpu_set_error(TPU_ERR_OUT_OF_BOUNDS,
                             "%s: %s has elements but no storage bounds (storage %p, %lld bytes; "
                             "was the storage resized under it?)",
                             name, what, t->storage, (long long)t->storage_nbytes);
    /* The view's offset in its storage, in bytes; compared as integers, as
     * the pointers need not point into one object. */
    uintptr_t base = (uintptr_t)t->storage, at = (uintptr_t)t->data;
    char sz[160];
    if (at < base || at - base > (uintptr_t)(INT64_MAX / 2))
        return tpu_set_error(TPU_ERR_OUT_OF_BOUNDS,
                             "%s: %s (sizes %s) starts outside its storage of %lld bytes "
                             "(was the storage resized under it?)",
                             name, what, fmt_sizes(sz, sizeof sz, t), (long long)t->storage_nbytes);
    /* off <= INT64_MAX / 2 and first >= -INT64_MAX: no overflow below. */
    int64_t off = (int64_t)(at - base);
    if (off + first < 0 || off > t->storage_nbytes - end)
        return tpu_set_error(TPU_ERR_OUT_OF_BOUNDS,
                             "%s: %s (sizes %s) needs bytes %lld to %lld of its storage, which has "
                             "%lld bytes (was the storage resized under it?)",
                             name, what, fmt_sizes(sz, sizeof sz, t), (long long)(off + first),
                             (long long)(end > INT64_MAX - off ? INT64_MAX : off + end),
                             (long long)t->storage_nbytes);
    return TPU_OK;
}

/* Checks one tensor descriptor on its own: rank, dtype, sizes, that its
 * element count and byte offsets fit in int64, and data for elements. */
static tpu_status check_tensor(const tpu_op *op, const char *what, const tpu_tensor *t) {
    const char *name = tpu_k_op_label(op);
    if (t->ndim < 0 || t->ndim > TPU_MAX_DIMS)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: %s has rank %d (must be 0..%d)", name,
                             what, (int)t->ndim, TPU_MAX_DIMS);
    if ((unsigned)t->dtype >= (unsigned)TPU_DTYPE_COUNT)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: %s has invalid dtype value %d", name, what,
                             (int)t->dtype);
    int64_t numel = 1;
    for (int32_t d = 0; d < t->ndim; d++) {
        if (t->sizes[d] < 0)
            return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: %s has negative size %lld in dim %d",
                                 name, what, (long long)t->sizes[d], (int)d);
        if (__builtin_mul_overflow(numel, t->sizes[d], &numel))
            return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: %s has too many elements", name, what);
    }
    if (numel == 0)
        return TPU_OK; /* no element is ever addressed */
    /* Lowest and highest element offsets; their byte offsets must fit too,
     * so that every address the kernels form is well defined. */
    int64_t lo = 0, hi = 0;
    for (int32_t d = 0; d < t->ndim; d++) {
        int64_t span;
        bool bad = __builtin_mul_overflow(t->strides[d], t->sizes[d] - 1, &span);
        bad = bad || (span < 0 ? __builtin_add_overflow(lo, span, &lo)
                               : __builtin_add_overflow(hi, span, &hi));
        if (bad)
            return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: %s has strides too large for its sizes",
                                 name, what);
    }
    /* The farthest element, one past it, in bytes, must fit in int64
     * (lo == INT64_MIN cannot be negated: treat it as too large). */
    int64_t es = (int64_t)tpu_dtype_size(t->dtype), bytes;
    int64_t ext = lo == INT64_MIN ? INT64_MAX : (-lo > hi ? -lo : hi);
    if (ext == INT64_MAX || __builtin_mul_overflow(ext + 1, es, &bytes))
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: %s has strides too large for its sizes",
                             name, what);
    if (t->data == NULL)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: %s has %lld elements but data is NULL",
                             name, what, (long long)numel);
    return check_in_storage(name, what, t, lo * es, (hi + 1) * es);
}

/* The scratch the op needs must be given (the record's sizes and dtypes
 * are checked by then, so tpu_op_scratch_bytes can read them). */
static tpu_status check_scratch(const tpu_op *op) {
    int64_t need = tpu_op_scratch_bytes(op);
    if (need > 0 && (op->scratch == NULL || op->scratch_nbytes < need))
        return tpu_set_error(TPU_ERR_INVALID_ARG,
                             "%s: needs %lld bytes of scratch but has %lld (scratch %p)",
                             tpu_k_op_label(op), (long long)need, (long long)op->scratch_nbytes,
                             op->scratch);
    return TPU_OK;
}

/* An output may not overlap itself through a zero stride. */
static tpu_status check_no_self_overlap(const tpu_op *op, const char *what, const tpu_tensor *t) {
    for (int32_t d = 0; d < t->ndim; d++)
        if (t->sizes[d] > 1 && t->strides[d] == 0)
            return tpu_set_error(TPU_ERR_INVALID_ARG,
                                 "%s: %s has stride 0 in dim %d of size %lld (it would overlap itself)",
                                 tpu_k_op_label(op), what, (int)d, (long long)t->sizes[d]);
    return TPU_OK;
}

/* Bytes [*lo, *hi) that t's elements span (t has elements). */
static void byte_span(const tpu_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    int64_t first = 0, last = 0; /* element offsets, known to fit (check_tensor) */
    for (int32_t d = 0; d < t->ndim; d++) {
        int64_t span = t->strides[d] * (t->sizes[d] - 1);
        if (span < 0)
            first += span;
        else
            last += span;
    }
    int64_t es = (int64_t)tpu_dtype_size(t->dtype);
    *lo = (uintptr_t)t->data + (uintptr_t)(first * es);
    *hi = (uintptr_t)t->data + (uintptr_t)((last + 1) * es);
}

/* True if a and b are the same view: same data, element size and sizes, and the
 * same strides in every dim of size > 1. */
static bool same_view(const tpu_tensor *a, const tpu_tensor *b) {
    if (a->data != b->data || tpu_dtype_size(a->dtype) != tpu_dtype_size(b->dtype) ||
        a->ndim != b->ndim)
        return false;
    for (int32_t d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d] || (a->sizes[d] > 1 && a->strides[d] != b->strides[d]))
            return false;
    return true;
}

/* The overlap rule of every record, as PyTorch states it for its kernels:
 * out may share memory with an input only as the very same view, and
 * only in the families that compute each element from the same element
 * of their inputs (element-wise, copies, scans, ADDMM's bias); anywhere else a
 * shared byte is an error. Views whose byte spans intersect without being provably
 * overlapping (interleaved strided views, x[:, 0] and x[:, 1]) are
 * allowed, as PyTorch allows them: only two dense views are compared
 * exactly (their spans are their bytes). */
static tpu_status check_overlap(const tpu_op *op) {
    if (op->code == TPU_OP_COPY_D2H)
        return TPU_OK; /* written to host memory */
    /* Element-wise ops and copies read each element just before writing
     * it; a scan reads element k of a line before it writes it, after
     * reading every earlier one. */
    bool same_view_ok = op->code == TPU_OP_UNARY || op->code == TPU_OP_BINARY ||
                        op->code == TPU_OP_TERNARY || op->code == TPU_OP_COPY ||
                        op->code == TPU_OP_SCAN;
    /* Written tensors: out (w = 0), then aux[w - 1]; each against every
     * input and every written tensor before it. */
    for (int w = 0; w <= op->n_aux; w++) {
        const tpu_tensor *o = w == 0 ? &op->out : &op->aux[w - 1];
        if (tpu_k_numel(o) == 0 || tpu_tensor_is_absent(o))
            continue;
        uintptr_t olo, ohi;
        byte_span(o, &olo, &ohi);
        for (int i = 0; i < op->n_in + w; i++) {
            bool is_input = i < op->n_in;
            const tpu_tensor *t = is_input ? &op->in[i] : i == op->n_in ? &op->out
                                                                         : &op->aux[i - op->n_in - 1];
            if (tpu_k_numel(t) == 0 || tpu_tensor_is_absent(t) ||
                (is_input && i == 0 && op->code == TPU_OP_COPY_H2D))
                continue;
            uintptr_t lo, hi;
            byte_span(t, &lo, &hi);
            if (hi <= olo || ohi <= lo)
                continue; /* disjoint */
            if (same_view(o, t)) {
                /* ADDMM reads each bias element just before it writes that
                 * element of out, so in-place addmm_ is fine too. */
                if (w == 0 && is_input &&
                    (same_view_ok || (op->code == TPU_OP_MATMUL && i == 2)))
                    continue;
            } else if (!(tpu_k_is_dense(o) && tpu_k_is_dense(t))) {
                continue; /* spans meet, elements may not: allowed, as in PyTorch */
            }
            char ow[16], tw[16];
            snprintf(ow, sizeof ow, w == 0 ? "out" : "aux[%d]", w - 1);
            if (is_input)
                snprintf(tw, sizeof tw, "in[%d]", i);
            else
                snprintf(tw, sizeof tw, i == op->n_in ? "out" : "aux[%d]", i - op->n_in - 1);
            return tpu_set_error(TPU_ERR_INVALID_ARG,
                                 "%s: %s overlaps %s (bytes %p..%p and %p..%p); unsupported "
                                 "operation: some elements of the input tensor and the written-to "
                                 "tensor refer to a single memory location",
                                 tpu_k_op_label(op), ow, tw, (void *)olo, (void *)ohi, (void *)lo,
                                 (void *)hi);
        }
    }
    return TPU_OK;
}

/* in[i] must have exactly out's rank and sizes (already broadcast). */
static tpu_status check_same_sizes(const tpu_op *op, int i) {
    const tpu_tensor *a = &op->in[i], *o = &op->out;
    bool same = a->ndim == o->ndim;
    for (int32_t d = 0; same && d < o->ndim; d++)
        same = a->sizes[d] == o->sizes[d];
    if (!same) {
        char sa[160], so[160];
        return tpu_set_error(TPU_ERR_SHAPE, "%s: in[%d] has sizes %s but out has %s",
                             tpu_k_op_label(op), i, fmt_sizes(sa, sizeof sa, a),
                             fmt_sizes(so, sizeof so, o));
    }
    return TPU_OK;
}

static tpu_status check_float_out(const tpu_op *op, const char *why) {
    if (!tpu_dtype_is_float(op->out.dtype))
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: out dtype %s is not supported (%s)",
                             tpu_k_op_label(op), tpu_dtype_name(op->out.dtype), why);
    return TPU_OK;
}

/* UNARY, BINARY, TERNARY: inputs of out's sizes; the function's common dtype
 * and its parameters. */
static tpu_status check_elementwise(const tpu_op *op) {
    const char *name = tpu_k_op_label(op);
    const tpu_k_fn_row *row = tpu_k_fn_row_of(op);
    for (int i = 0; i < op->n_in; i++) {
        tpu_status st = check_same_sizes(op, i);
        if (st != TPU_OK)
            return st;
    }
    tpu_dtype common = op->p.ew.common;
    if ((unsigned)common >= (unsigned)TPU_DTYPE_COUNT)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: invalid common dtype value %d", name,
                             (int)common);
    if (!tpu_k_takes_dtype(row->takes, common))
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: dtype %s is not supported",
                             name, tpu_dtype_name(common));
    if (op->code == TPU_OP_BINARY && op->fn == TPU_BINARY_DIV) {
        tpu_rounding r = op->p.ew.rounding;
        if ((unsigned)r > (unsigned)TPU_ROUND_FLOOR)
            return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: invalid rounding mode %d", name,
                                 (int)r);
        if (r == TPU_ROUND_NONE && !tpu_dtype_is_float(common))
            return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: true division of dtype %s "
                                 "(it needs a floating common dtype)", name,
                                 tpu_dtype_name(common));
    }
    return TPU_OK;
}

static tpu_status check_reduce(const tpu_op *op) {
    const char *name = tpu_k_op_label(op);
    const tpu_tensor *a = &op->in[0], *o = &op->out;
    uint32_t mask = op->p.reduce.mask;
    if (a->ndim < 32 && (mask >> a->ndim) != 0)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: mask 0x%x names dims beyond rank %d", name,
                             (unsigned)mask, (int)a->ndim);
    if (o->ndim != a->ndim)
        return tpu_set_error(TPU_ERR_SHAPE, "%s: out has rank %d but in[0] has rank %d", name,
                             (int)o->ndim, (int)a->ndim);
    for (int32_t d = 0; d < a->ndim; d++) {
        int64_t want = (mask >> d) & 1u ? 1 : a->sizes[d];
        if (o->sizes[d] != want) {
            char sa[160], so[160];
            return tpu_set_error(TPU_ERR_SHAPE,
                                 "%s: out has sizes %s but in[0] %s reduced by mask 0x%x needs "
                                 "%lld in dim %d",
                                 name, fmt_sizes(so, sizeof so, o), fmt_sizes(sa, sizeof sa, a),
                                 (unsigned)mask, (long long)want, (int)d);
        }
    }
    int64_t count = 1;
    for (int32_t d = 0; d < a->ndim; d++)
        if ((mask >> d) & 1u)
            count *= a->sizes[d];
    switch ((tpu_reduce_fn)op->fn) {
    case TPU_REDUCE_MEAN: return check_float_out(op, "mean needs a floating out");
    case TPU_REDUCE_NORM:
        /* As PyTorch: no identity for inf and negative orders (the
         * formula would give inf for a finite negative one). */
        if ((isinf(op->p.reduce.ord) || op->p.reduce.ord < 0) && count == 0 &&
            tpu_k_numel(o) > 0)
            return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: a norm of order %g over zero elements "
                                 "(it has no identity)", name, op->p.reduce.ord);
        if (isnan(op->p.reduce.ord))
            return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: order is NaN", name);
        return check_float_out(op, "a norm is floating");
    case TPU_REDUCE_AMAX:
    case TPU_REDUCE_AMIN:
    case TPU_REDUCE_ARGMAX:
    case TPU_REDUCE_ARGMIN: {
        bool arg = op->fn == TPU_REDUCE_ARGMAX || op->fn == TPU_REDUCE_ARGMIN;
        if (count == 0 && tpu_k_numel(o) > 0)
            return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: cannot reduce over zero elements (it "
                                 "has no identity)", name);
        if (arg && (mask & (mask - 1u)) != 0)
            return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: mask 0x%x names more than one dim",
                                 name, (unsigned)mask);
        if (arg ? o->dtype != TPU_DTYPE_I64 : o->dtype != a->dtype)
            return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: out dtype %s is not supported "
                                 "(%s)", name, tpu_dtype_name(o->dtype),
                                 arg ? "indices are int64" : "it must be in[0]'s dtype");
        return TPU_OK;
    }
    case TPU_REDUCE_VAR:
    case TPU_REDUCE_STD:
        if (!tpu_dtype_is_float(a->dtype))
            return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: in[0] dtype %s is not supported "
                                 "(a variance is of floats)", name, tpu_dtype_name(a->dtype));
        return check_float_out(op, "a variance is floating");
    case TPU_REDUCE_ANY:
    case TPU_REDUCE_ALL:
        if (o->dtype != TPU_DTYPE_BOOL && o->dtype != TPU_DTYPE_U8)
            return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: out dtype %s is not supported "
                                 "(bool or uint8)", name, tpu_dtype_name(o->dtype));
        return TPU_OK;
    case TPU_REDUCE_SUM:
    case TPU_REDUCE_PROD:
    case TPU_REDUCE_COUNT: break;
    }
    return TPU_OK;
}

static tpu_status check_softmax(const tpu_op *op) {
    const char *name = tpu_k_op_label(op);
    bool backward = op->fn == TPU_SOFTMAX_BACKWARD || op->fn == TPU_SOFTMAX_LOG_BACKWARD;
    if (op->n_in != (backward ? 2 : 1))
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: n_in is %d (expected %d)", name, (int)op->n_in,
                             backward ? 2 : 1);
    for (int i = 0; i < op->n_in; i++) {
        tpu_status st = check_same_sizes(op, i);
        if (st != TPU_OK)
            return st;
        if (!tpu_dtype_is_float(op->in[i].dtype))
            return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: in[%d] dtype %s is not supported "
                                 "(floating types only)", name, i, tpu_dtype_name(op->in[i].dtype));
    }
    tpu_status st = check_float_out(op, "softmax is floating");
    if (st != TPU_OK)
        return st;
    int32_t d = op->p.softmax.dim;
    if (d < 0 || d >= op->out.ndim)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: dim %d is out of range for %d dims", name,
                             (int)d, (int)op->out.ndim);
    return TPU_OK;
}

static bool is_mm_dtype(tpu_dtype dt) {
    return dt == TPU_DTYPE_F32 || dt == TPU_DTYPE_F64 || dt == TPU_DTYPE_F16 ||
           dt == TPU_DTYPE_BF16;
}

static tpu_status check_mm(const tpu_op *op) {
    const char *name = tpu_k_op_label(op);
    const tpu_tensor *a = &op->in[0], *b = &op->in[1], *o = &op->out;
    static const char *const what[] = {"in[0]", "in[1]", "in[2]"};
    if (o->ndim != 2)
        return tpu_set_error(TPU_ERR_SHAPE, "%s: out must be 2-d, got %d-d", name, (int)o->ndim);
    for (int i = 0; i < op->n_in; i++)
        if (op->in[i].ndim != 2)
            return tpu_set_error(TPU_ERR_SHAPE, "%s: %s must be 2-d, got %d-d", name, what[i],
                                 (int)op->in[i].ndim);
    if (a->sizes[1] != b->sizes[0])
        return tpu_set_error(TPU_ERR_SHAPE, "%s: in[0] is %lldx%lld but in[1] is %lldx%lld (inner "
                             "sizes differ)", name, (long long)a->sizes[0], (long long)a->sizes[1],
                             (long long)b->sizes[0], (long long)b->sizes[1]);
    if (o->sizes[0] != a->sizes[0] || o->sizes[1] != b->sizes[1])
        return tpu_set_error(TPU_ERR_SHAPE, "%s: out is %lldx%lld but in[0] @ in[1] is %lldx%lld",
                             name, (long long)o->sizes[0], (long long)o->sizes[1],
                             (long long)a->sizes[0], (long long)b->sizes[1]);
    if (op->fn == TPU_MATMUL_ADDMM && (op->in[2].sizes[0] != o->sizes[0] ||
                                     op->in[2].sizes[1] != o->sizes[1]))
        return tpu_set_error(TPU_ERR_SHAPE, "%s: in[2] is %lldx%lld but out is %lldx%lld", name,
                             (long long)op->in[2].sizes[0], (long long)op->in[2].sizes[1],
                             (long long)o->sizes[0], (long long)o->sizes[1]);
    if (!is_mm_dtype(o->dtype))
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: dtype %s is not supported (float32, "
                             "float64, float16, bfloat16)", name, tpu_dtype_name(o->dtype));
    for (int i = 0; i < op->n_in; i++)
        if (op->in[i].dtype != o->dtype)
            return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: %s is %s but out is %s (operands "
                                 "must share a dtype)", name, what[i],
                                 tpu_dtype_name(op->in[i].dtype), tpu_dtype_name(o->dtype));
    if ((unsigned)op->p.mm.precision > (unsigned)TPU_PRECISION_MEDIUM)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: invalid precision %d", name,
                             (int)op->p.mm.precision);
    return TPU_OK;
}

static tpu_status check_random(const tpu_op *op) {
    const char *name = tpu_k_op_label(op);
    double a = op->p.rand.a, b = op->p.rand.b;
    if (op->fn == TPU_RANDOM_BERNOULLI) {
        if (!(a >= 0.0 && a <= 1.0))
            return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: probability %g is not in [0, 1]", name, a);
        return TPU_OK;
    }
    if (op->fn == TPU_RANDOM_INTEGERS) {
        if (op->out.dtype == TPU_DTYPE_BOOL)
            return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: out dtype bool is not supported",
                                 name);
        return TPU_OK;
    }
    tpu_status st = check_float_out(op, "random values are floating");
    if (st != TPU_OK)
        return st;
    if (op->fn == TPU_RANDOM_UNIFORM && !(isfinite(a) && isfinite(b) && a <= b && isfinite(b - a)))
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: range [%g, %g) is not a finite interval "
                             "with from <= to", name, a, b);
    if (op->fn == TPU_RANDOM_NORMAL && !(isfinite(a) && isfinite(b) && b >= 0))
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: mean %g and std %g must be finite with "
                             "std >= 0", name, a, b);
    return TPU_OK;
}

/* t must be present, of rank `ndim` with sizes s0 (and s1), and of dtype dt
 * (TPU_DTYPE_COUNT: any). `what` names it in the message. */
static tpu_status check_shape(const tpu_op *op, const char *what, const tpu_tensor *t,
                              int32_t ndim, int64_t s0, int64_t s1, tpu_dtype dt) {
    const char *name = tpu_k_op_label(op);
    char sz[160];
    if (tpu_tensor_is_absent(t))
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: %s is required", name, what);
    bool ok = t->ndim == ndim && (ndim < 1 || t->sizes[0] == s0) && (ndim < 2 || t->sizes[1] == s1);
    if (!ok) {
        char want[64];
        if (ndim == 0)
            snprintf(want, sizeof want, "[]");
        else if (ndim == 1)
            snprintf(want, sizeof want, "[%lld]", (long long)s0);
        else
            snprintf(want, sizeof want, "[%lld, %lld]", (long long)s0, (long long)s1);
        return tpu_set_error(TPU_ERR_SHAPE, "%s: %s has sizes %s, expected %s", name, what,
                             fmt_sizes(sz, sizeof sz, t), want);
    }
    if (dt != TPU_DTYPE_COUNT && t->dtype != dt)
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: %s has dtype %s, expected %s", name,
                             what, tpu_dtype_name(t->dtype), tpu_dtype_name(dt));
    return TPU_OK;
}

static bool is_index_dtype(tpu_dtype dt) {
    return dt == TPU_DTYPE_I64 || dt == TPU_DTYPE_I32;
}

/* NORM: x [M, N] of a float dtype X; parameters and statistics of dtype P
 * (X, or f32 for f16/bf16 X), given by aux[0] forward and mean backward. */
static tpu_status check_norm(const tpu_op *op) {
    const char *name = tpu_k_op_label(op);
    bool fwd = op->fn == TPU_NORM_LAYER_FORWARD;
    const tpu_tensor *x = &op->in[fwd ? 0 : 1];
    if (x->ndim != 2)
        return tpu_set_error(TPU_ERR_SHAPE, "%s: x must be 2-d [rows, columns], got %d-d", name,
                             (int)x->ndim);
    int64_t m = x->sizes[0], n = x->sizes[1];
    tpu_dtype xd = x->dtype, pd = fwd ? op->aux[0].dtype : op->in[2].dtype;
    if (!tpu_dtype_is_float(xd))
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: dtype %s is not supported (floating "
                             "types only)", name, tpu_dtype_name(xd));
    if (!(pd == xd || (pd == TPU_DTYPE_F32 && (xd == TPU_DTYPE_F16 || xd == TPU_DTYPE_BF16))))
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: parameters of dtype %s with x of "
                             "dtype %s (they must match, or be float32 for a half x)", name,
                             tpu_dtype_name(pd), tpu_dtype_name(xd));
    tpu_status st = !fwd && tpu_tensor_is_absent(&op->out)
                        ? TPU_OK
                        : check_shape(op, "out", &op->out, 2, m, n, xd);
    if (fwd) {
        if (st == TPU_OK && !tpu_tensor_is_absent(&op->in[1]))
            st = check_shape(op, "weight", &op->in[1], 1, n, 0, pd);
        if (st == TPU_OK && !tpu_tensor_is_absent(&op->in[2]))
            st = check_shape(op, "bias", &op->in[2], 1, n, 0, pd);
        if (st == TPU_OK)
            st = check_shape(op, "mean", &op->aux[0], 1, m, 0, pd);
        if (st == TPU_OK)
            st = check_shape(op, "rstd", &op->aux[1], 1, m, 0, pd);
        return st;
    }
    if (st == TPU_OK)
        st = check_shape(op, "grad", &op->in[0], 2, m, n, xd);
    if (st == TPU_OK)
        st = check_shape(op, "mean", &op->in[2], 1, m, 0, pd);
    if (st == TPU_OK)
        st = check_shape(op, "rstd", &op->in[3], 1, m, 0, pd);
    if (st == TPU_OK && !tpu_tensor_is_absent(&op->in[4]))
        st = check_shape(op, "weight", &op->in[4], 1, n, 0, pd);
    if (st == TPU_OK && !tpu_tensor_is_absent(&op->aux[0]))
        st = check_shape(op, "dweight", &op->aux[0], 1, n, 0, pd);
    if (st == TPU_OK && !tpu_tensor_is_absent(&op->aux[1]))
        st = check_shape(op, "dbias", &op->aux[1], 1, n, 0, pd);
    return st;
}

/* t must have rank n, sizes want[0..n) and dtype dt; `what` names it. */
static tpu_status check_sizes_n(const tpu_op *op, const char *what, const tpu_tensor *t, int32_t n,
                                const int64_t *want, tpu_dtype dt) {
    bool ok = t->ndim == n;
    for (int32_t d = 0; ok && d < n; d++)
        ok = t->sizes[d] == want[d];
    if (!ok) {
        char sz[160], w[160] = "[";
        size_t k = 1;
        for (int32_t d = 0; d < n && k < sizeof w; d++)
            k += (size_t)snprintf(w + k, sizeof w - k, "%s%lld%s", d ? ", " : "",
                                  (long long)want[d], d == n - 1 ? "]" : "");
        return tpu_set_error(TPU_ERR_SHAPE, "%s: %s has sizes %s, expected %s",
                             tpu_k_op_label(op), what, fmt_sizes(sz, sizeof sz, t), w);
    }
    if (t->dtype != dt)
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: %s has dtype %s, expected %s",
                             tpu_k_op_label(op), what, tpu_dtype_name(t->dtype), tpu_dtype_name(dt));
    return TPU_OK;
}

/* ATTENTION: query [B, H, L, E], key [B, Hk, S, E], value [B, Hk, S, Ev]
 * of one float dtype, Hk dividing H; the mask [B, H, L, S], bool or
 * float; forward out [B, H, L, Ev] and logsumexp [B, H, L] (float32, or
 * float64 for float64 operands); backward grad [B, H, L, Ev], the
 * forward's out and logsumexp as the forward writes them, and dq, dk, dv
 * of q's, k's and v's sizes. */
static tpu_status check_attention(const tpu_op *op) {
    const char *name = tpu_k_op_label(op);
    const bool fwd = op->fn == TPU_ATTENTION_FORWARD;
    const tpu_tensor *q = &op->in[fwd ? 0 : 1], *k = q + 1, *v = q + 2, *mask = q + 3;
    static const char *const qkv[] = {"query", "key", "value"};
    char sa[160], sb[160], sc[160];
    for (int i = 0; i < 3; i++)
        if (q[i].ndim != 4)
            return tpu_set_error(TPU_ERR_SHAPE, "%s: %s must be 4-d [batch, heads, length, head "
                                 "size], got %d-d", name, qkv[i], (int)q[i].ndim);
    const tpu_dtype dt = q->dtype;
    if (!is_mm_dtype(dt))
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: query dtype %s is not supported "
                             "(float32, float64, float16, bfloat16)", name, tpu_dtype_name(dt));
    for (int i = 1; i < 3; i++)
        if (q[i].dtype != dt)
            return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: %s dtype %s differs from query's "
                                 "%s", name, qkv[i], tpu_dtype_name(q[i].dtype), tpu_dtype_name(dt));
    const int64_t b = q->sizes[0], h = q->sizes[1], l = q->sizes[2], e = q->sizes[3];
    const int64_t hk = k->sizes[1], s = k->sizes[2], ev = v->sizes[3];
    if (k->sizes[0] != b || k->sizes[3] != e || v->sizes[0] != b || v->sizes[1] != hk ||
        v->sizes[2] != s)
        return tpu_set_error(TPU_ERR_SHAPE, "%s: query %s, key %s and value %s do not fit (key "
                             "[B, Hk, S, E] and value [B, Hk, S, Ev] for query [B, H, L, E])", name,
                             fmt_sizes(sa, sizeof sa, q), fmt_sizes(sb, sizeof sb, k),
                             fmt_sizes(sc, sizeof sc, v));
    if (hk == 0 ? h != 0 : h % hk != 0)
        return tpu_set_error(TPU_ERR_SHAPE, "%s: %lld query heads are not a multiple of %lld "
                             "key/value heads", name, (long long)h, (long long)hk);
    if (!tpu_tensor_is_absent(mask)) {
        if (mask->dtype != TPU_DTYPE_BOOL && !tpu_dtype_is_float(mask->dtype))
            return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: mask dtype %s is not supported "
                                 "(bool or floating)", name, tpu_dtype_name(mask->dtype));
        const int64_t ms[4] = {b, h, l, s};
        tpu_status st = check_sizes_n(op, "mask", mask, 4, ms, mask->dtype);
        if (st != TPU_OK)
            return st;
    }
    const int64_t qs[4] = {b, h, l, e}, ks[4] = {b, hk, s, e}, vs[4] = {b, hk, s, ev};
    const int64_t os[4] = {b, h, l, ev};
    if (fwd) {
        tpu_status st = check_sizes_n(op, "out", &op->out, 4, os, dt);
        if (st == TPU_OK)
            st = check_sizes_n(op, "logsumexp", &op->aux[0], 3, os,
                               dt == TPU_DTYPE_F64 ? TPU_DTYPE_F64 : TPU_DTYPE_F32);
        return st;
    }
    tpu_status st = check_sizes_n(op, "grad", &op->in[0], 4, os, dt);
    if (st == TPU_OK)
        st = check_sizes_n(op, "forward out", &op->in[5], 4, os, dt);
    if (st == TPU_OK)
        st = check_sizes_n(op, "forward logsumexp", &op->in[6], 3, os,
                           dt == TPU_DTYPE_F64 ? TPU_DTYPE_F64 : TPU_DTYPE_F32);
    if (st == TPU_OK)
        st = check_sizes_n(op, "dq", &op->out, 4, qs, dt);
    if (st == TPU_OK)
        st = check_sizes_n(op, "dk", &op->aux[0], 4, ks, dt);
    if (st == TPU_OK)
        st = check_sizes_n(op, "dv", &op->aux[1], 4, vs, dt);
    return st;
}

/* ADVANCED and ADVANCED_PUT: the indexed view `t` (out or in[0]), with
 * every index value in range, must lie in its storage: its own span
 * widened by (idx_sizes[k] - 1) * idx_strides[k] for each index k. */
static tpu_status check_advanced(const tpu_op *op, const char *what, const tpu_tensor *t) {
    const char *name = tpu_k_op_label(op);
    const int32_t n = op->p.index.n_idx;
    if (n < 1 || n > TPU_OP_MAX_INDICES || op->n_in != n + 1)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: %d index tensors with n_in %d (1 to %d "
                             "indices, n_in one more)", name, (int)n, (int)op->n_in,
                             TPU_OP_MAX_INDICES);
    for (int k = 1; k <= n; k++) {
        tpu_status st = check_same_sizes(op, k);
        if (st != TPU_OK)
            return st;
        if (!is_index_dtype(op->in[k].dtype))
            return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: index %d has dtype %s (int64 or "
                                 "int32)", name, k - 1, tpu_dtype_name(op->in[k].dtype));
    }
    tpu_status st = check_same_sizes(op, 0);
    if (st != TPU_OK)
        return st;
    if (op->out.dtype != op->in[0].dtype)
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: out dtype %s differs from in[0]'s %s",
                             name, tpu_dtype_name(op->out.dtype), tpu_dtype_name(op->in[0].dtype));
    if (tpu_k_numel(t) == 0)
        return TPU_OK;
    int64_t lo = 0, hi = 0; /* element offsets; check_tensor bounded the view's */
    for (int32_t d = 0; d < t->ndim; d++) {
        int64_t span = t->strides[d] * (t->sizes[d] - 1);
        *(span < 0 ? &lo : &hi) += span;
    }
    for (int k = 0; k < n; k++) {
        int64_t size = op->p.index.idx_sizes[k], span;
        if (size < 1 || __builtin_mul_overflow(op->p.index.idx_strides[k], size - 1, &span) ||
            (span < 0 ? __builtin_add_overflow(lo, span, &lo) : __builtin_add_overflow(hi, span, &hi)))
            return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: indexed dim %d has size %lld and stride "
                                 "%lld (sizes must be >= 1, spans must fit)", name, k,
                                 (long long)size, (long long)op->p.index.idx_strides[k]);
    }
    int64_t es = (int64_t)tpu_dtype_size(t->dtype), first, end;
    if (__builtin_mul_overflow(lo, es, &first) || __builtin_add_overflow(hi, 1, &end) ||
        __builtin_mul_overflow(end, es, &end))
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: indexed dims too large", name);
    return check_in_storage(name, what, t, first, end);
}

/* SCATTER*: index in[1] no larger than the source in any dim and than out
 * in every dim but dim; ranks equal. */
static tpu_status check_scatter(const tpu_op *op) {
    const char *name = tpu_k_op_label(op);
    const tpu_tensor *src = &op->in[0], *idx = &op->in[1], *o = &op->out;
    const int32_t dim = op->p.index.dim;
    const bool fill = op->fn == TPU_INDEX_SCATTER_FILL;
    char sa[160], sb[160];
    if (!is_index_dtype(idx->dtype))
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: index dtype %s is not supported "
                             "(int64 or int32)", name, tpu_dtype_name(idx->dtype));
    if (fill != tpu_tensor_is_absent(src))
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: in[0] must be %s", name,
                             fill ? "absent (the value is p.index.value)" : "the source");
    if (idx->ndim != o->ndim || o->ndim < 1 || dim < 0 || dim >= o->ndim ||
        (!fill && src->ndim != o->ndim))
        return tpu_set_error(TPU_ERR_SHAPE, "%s: out rank %d, index rank %d, dim %d (ranks must "
                             "match and dim lie in them)", name, (int)o->ndim, (int)idx->ndim,
                             (int)dim);
    for (int32_t d = 0; d < o->ndim; d++)
        if ((!fill && idx->sizes[d] > src->sizes[d]) || (d != dim && idx->sizes[d] > o->sizes[d]))
            return tpu_set_error(TPU_ERR_SHAPE, "%s: index has sizes %s, out %s (the index must be "
                                 "no larger than the source, and than out but along dim %d)",
                                 name, fmt_sizes(sa, sizeof sa, idx), fmt_sizes(sb, sizeof sb, o),
                                 (int)dim);
    if (!fill && src->dtype != o->dtype)
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: source dtype %s differs from out's %s",
                             name, tpu_dtype_name(src->dtype), tpu_dtype_name(o->dtype));
    return TPU_OK;
}

/* INTERP and INTERP_BACKWARD: x (in[0]) and out of one rank, equal but
 * along dim; idx [O, T] int64 and w [O, T] of the compute dtype, O the
 * size along dim of out (INTERP) or of the gradient in[0] (BACKWARD). */
static tpu_status check_interp(const tpu_op *op) {
    const char *name = tpu_k_op_label(op);
    const tpu_tensor *x = &op->in[0], *idx = &op->in[1], *w = &op->in[2], *o = &op->out;
    const bool fwd = op->fn == TPU_INDEX_INTERP;
    const int32_t dim = op->p.index.dim;
    char sa[160], sb[160];
    if (o->ndim != x->ndim || o->ndim < 1 || dim < 0 || dim >= o->ndim)
        return tpu_set_error(TPU_ERR_SHAPE, "%s: out has rank %d, in[0] rank %d, dim %d (ranks "
                             "must match and dim lie in them)", name, (int)o->ndim, (int)x->ndim,
                             (int)dim);
    for (int32_t d = 0; d < o->ndim; d++)
        if (d != dim && o->sizes[d] != x->sizes[d])
            return tpu_set_error(TPU_ERR_SHAPE, "%s: out has sizes %s but in[0] has %s (they may "
                                 "differ only along dim %d)", name, fmt_sizes(sa, sizeof sa, o),
                                 fmt_sizes(sb, sizeof sb, x), (int)dim);
    const int64_t rows = fwd ? o->sizes[dim] : x->sizes[dim];
    if (idx->ndim != 2 || idx->sizes[0] != rows || idx->sizes[1] < 1)
        return tpu_set_error(TPU_ERR_SHAPE, "%s: the tap indices have sizes %s, expected [%lld, "
                             "taps >= 1]", name, fmt_sizes(sa, sizeof sa, idx), (long long)rows);
    if (idx->dtype != TPU_DTYPE_I64)
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: tap index dtype %s is not supported "
                             "(int64)", name, tpu_dtype_name(idx->dtype));
    if (!tpu_dtype_is_float(x->dtype) || !tpu_dtype_is_float(o->dtype))
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: dtypes %s -> %s (floating only)", name,
                             tpu_dtype_name(x->dtype), tpu_dtype_name(o->dtype));
    const tpu_dtype compute = x->dtype == TPU_DTYPE_F64 ? TPU_DTYPE_F64 : TPU_DTYPE_F32;
    const bool out_ok = fwd ? (o->dtype == TPU_DTYPE_F64) == (compute == TPU_DTYPE_F64)
                            : o->dtype == compute;
    if (!out_ok)
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: out dtype %s with in[0] dtype %s (%s)",
                             name, tpu_dtype_name(o->dtype), tpu_dtype_name(x->dtype),
                             fwd ? "float64 goes with float64 only"
                                 : "out holds the sums: float32, or float64 for float64");
    return check_shape(op, "tap weights", w, 2, idx->sizes[0], idx->sizes[1], compute);
}

static tpu_status check_index(const tpu_op *op) {
    const char *name = tpu_k_op_label(op);
    const tpu_tensor *src = &op->in[0], *idx = &op->in[1], *o = &op->out;
    char sa[160], sb[160];
    switch (op->fn) {
    case TPU_INDEX_SCATTER:
    case TPU_INDEX_SCATTER_ADD:
    case TPU_INDEX_SCATTER_FILL:
    case TPU_INDEX_SCATTER_PROD:
    case TPU_INDEX_SCATTER_AMAX:
    case TPU_INDEX_SCATTER_AMIN: return check_scatter(op);
    case TPU_INDEX_ADVANCED: return check_advanced(op, "in[0]", src);
    case TPU_INDEX_ADVANCED_PUT:
        if (op->p.index.accumulate && o->dtype == TPU_DTYPE_BOOL)
            return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: accumulating into bool is not "
                                 "supported", name);
        return check_advanced(op, "out", o);
    case TPU_INDEX_INTERP:
    case TPU_INDEX_INTERP_BACKWARD: return check_interp(op);
    case TPU_INDEX_NONZERO:
        if (o->dtype != TPU_DTYPE_I64 || o->ndim != 2 || o->sizes[1] != src->ndim)
            return tpu_set_error(TPU_ERR_SHAPE, "%s: out must be int64 [count, %d], got %s %s",
                                 name, (int)src->ndim, tpu_dtype_name(o->dtype),
                                 fmt_sizes(sa, sizeof sa, o));
        return TPU_OK;
    default: break;
    }
    if (op->fn == TPU_INDEX_HISTC) {
        double lo = op->p.hist.lo, hi = op->p.hist.hi;
        if (o->ndim != 1 || o->dtype == TPU_DTYPE_BOOL || src->dtype == TPU_DTYPE_BOOL)
            return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: out must be 1-d and neither side bool "
                                 "(got %d-d %s from %s)", name, (int)o->ndim,
                                 tpu_dtype_name(o->dtype), tpu_dtype_name(src->dtype));
        if (!(isfinite(lo) && isfinite(hi) && lo < hi))
            return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: range [%g, %g] must be finite with "
                                 "lo < hi", name, lo, hi);
        return TPU_OK;
    }
    if (!is_index_dtype(idx->dtype))
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: index dtype %s is not supported "
                             "(int64 or int32)", name, tpu_dtype_name(idx->dtype));
    if (op->fn == TPU_INDEX_EMBEDDING_BACKWARD) {
        if (!tpu_dtype_is_float(o->dtype) || o->ndim != 2)
            return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: out must be a 2-d floating tensor "
                                 "(got %d-d %s)", name, (int)o->ndim, tpu_dtype_name(o->dtype));
        if (idx->ndim != 1)
            return tpu_set_error(TPU_ERR_SHAPE, "%s: indices must be 1-d, got %d-d", name,
                                 (int)idx->ndim);
        return check_shape(op, "grad", src, 2, idx->sizes[0], o->sizes[1], o->dtype);
    }
    if (o->dtype != src->dtype)
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: out dtype %s differs from in[0]'s %s",
                             name, tpu_dtype_name(o->dtype), tpu_dtype_name(src->dtype));
    int32_t dim = op->p.index.dim;
    if (o->ndim != src->ndim || o->ndim < 1 || dim < 0 || dim >= o->ndim)
        return tpu_set_error(TPU_ERR_SHAPE, "%s: out has rank %d, in[0] rank %d, dim %d (ranks "
                             "must match and dim lie in them)", name, (int)o->ndim,
                             (int)src->ndim, (int)dim);
    if (op->fn == TPU_INDEX_SELECT) {
        if (idx->ndim != 1 || idx->sizes[0] != o->sizes[dim])
            return tpu_set_error(TPU_ERR_SHAPE, "%s: index has sizes %s but out has %lld entries "
                                 "in dim %d", name, fmt_sizes(sa, sizeof sa, idx),
                                 (long long)o->sizes[dim], (int)dim);
        for (int32_t d = 0; d < o->ndim; d++)
            if (d != dim && o->sizes[d] != src->sizes[d])
                return tpu_set_error(TPU_ERR_SHAPE, "%s: out has sizes %s but in[0] has %s", name,
                                     fmt_sizes(sa, sizeof sa, o), fmt_sizes(sb, sizeof sb, src));
        return TPU_OK;
    }
    /* GATHER */
    if (idx->ndim != o->ndim)
        return tpu_set_error(TPU_ERR_SHAPE, "%s: index has rank %d but out has %d", name,
                             (int)idx->ndim, (int)o->ndim);
    for (int32_t d = 0; d < o->ndim; d++) {
        if (idx->sizes[d] != o->sizes[d] || (d != dim && src->sizes[d] < o->sizes[d]))
            return tpu_set_error(TPU_ERR_SHAPE, "%s: index has sizes %s, in[0] %s (index must be "
                                 "no larger than in[0] in every dim but %d)", name,
                                 fmt_sizes(sa, sizeof sa, idx), fmt_sizes(sb, sizeof sb, src),
                                 (int)dim);
    }
    return TPU_OK;
}

static tpu_status check_loss(const tpu_op *op) {
    const char *name = tpu_k_op_label(op);
    const tpu_loss_reduction red = op->p.loss.reduction;
    if ((unsigned)red > (unsigned)TPU_LOSS_REDUCE_SUM)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: invalid reduction %d", name, (int)red);
    bool fwd = op->fn == TPU_LOSS_NLL_FORWARD;
    /* The class scores are x forward and dx backward: [N, C] or [C]. */
    const tpu_tensor *x = fwd ? &op->in[0] : &op->out, *t = &op->in[1];
    tpu_dtype dt = x->dtype;
    if (!tpu_dtype_is_float(dt))
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: dtype %s is not supported (floating "
                             "types only)", name, tpu_dtype_name(dt));
    if (x->ndim != 1 && x->ndim != 2)
        return tpu_set_error(TPU_ERR_SHAPE, "%s: input must be 1-d or 2-d, got %d-d", name,
                             (int)x->ndim);
    bool batched = x->ndim == 2;
    int64_t n = batched ? x->sizes[0] : 1, c = x->sizes[batched ? 1 : 0];
    if (!is_index_dtype(t->dtype) && t->dtype != TPU_DTYPE_U8)
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: target dtype %s is not supported "
                             "(int64, int32 or uint8)", name, tpu_dtype_name(t->dtype));
    tpu_status st = check_shape(op, "target", t, batched ? 1 : 0, n, 0, TPU_DTYPE_COUNT);
    if (st == TPU_OK && !tpu_tensor_is_absent(&op->in[2]))
        st = check_shape(op, "weight", &op->in[2], 1, c, 0, dt);
    /* The per-sample values (NONE) have the target's shape; otherwise 0-d. */
    bool per_sample = red == TPU_LOSS_REDUCE_NONE;
    int32_t vnd = per_sample && batched ? 1 : 0;
    if (fwd) {
        if (st == TPU_OK)
            st = check_shape(op, "out", &op->out, vnd, n, 0, dt);
        if (st == TPU_OK)
            st = check_shape(op, "total_weight", &op->aux[0], 0, 0, 0, dt);
        return st;
    }
    if (st == TPU_OK)
        st = check_shape(op, "grad", &op->in[0], vnd, n, 0, dt);
    if (st == TPU_OK)
        st = check_shape(op, "total_weight", &op->in[3], 0, 0, 0, dt);
    return st;
}

static tpu_status check_scan(const tpu_op *op) {
    const char *name = tpu_k_op_label(op);
    tpu_status st = check_same_sizes(op, 0);
    if (st != TPU_OK)
        return st;
    if (op->p.scan.dim < 0 || op->p.scan.dim >= op->out.ndim)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: dim %d is out of range for %d dims", name,
                             (int)op->p.scan.dim, (int)op->out.ndim);
    const bool extreme = op->fn == TPU_SCAN_CUMMAX || op->fn == TPU_SCAN_CUMMIN;
    if (op->out.dtype == TPU_DTYPE_BOOL && !extreme)
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: out dtype bool is not supported", name);
    if (op->fn == TPU_SCAN_LOGCUMSUMEXP && !tpu_dtype_is_float(op->out.dtype))
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: out dtype %s is not a float", name,
                             tpu_dtype_name(op->out.dtype));
    if (extreme) {
        const tpu_tensor *ix = &op->aux[0];
        bool same = ix->ndim == op->out.ndim;
        for (int32_t d = 0; same && d < ix->ndim; d++)
            same = ix->sizes[d] == op->out.sizes[d];
        if (op->out.dtype != op->in[0].dtype || ix->dtype != TPU_DTYPE_I64 || !same)
            return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: values must have in[0]'s dtype and "
                                 "indices be int64 of out's sizes", name);
    }
    return TPU_OK;
}

/* SEARCHSORTED: boundaries [..., M] and values [..., N] of one dtype, out
 * int64/int32 of the values' sizes. */
static tpu_status check_searchsorted(const tpu_op *op) {
    const char *name = tpu_k_op_label(op);
    const tpu_tensor *bd = &op->in[0], *v = &op->in[1], *o = &op->out;
    char sa[160], sb[160], sc[160];
    if (op->n_in != 2)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: n_in is %d (expected 2)", name, (int)op->n_in);
    if (bd->dtype != v->dtype || v->dtype == TPU_DTYPE_BOOL ||
        (o->dtype != TPU_DTYPE_I64 && o->dtype != TPU_DTYPE_I32))
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: boundaries %s and values %s must share a "
                             "dtype (not bool), out int64 or int32 (got %s)", name,
                             tpu_dtype_name(bd->dtype), tpu_dtype_name(v->dtype), tpu_dtype_name(o->dtype));
    bool ok = v->ndim >= 1 && bd->ndim == v->ndim && o->ndim == v->ndim && op->p.sort.dim == v->ndim - 1;
    for (int32_t d = 0; ok && d < v->ndim; d++)
        ok = o->sizes[d] == v->sizes[d] && (d == v->ndim - 1 || bd->sizes[d] == v->sizes[d]);
    if (!ok)
        return tpu_set_error(TPU_ERR_SHAPE, "%s: boundaries %s, values %s and out %s (ranks equal, leading "
                             "sizes equal, out the values' sizes, dim the last)", name,
                             fmt_sizes(sa, sizeof sa, bd), fmt_sizes(sb, sizeof sb, v),
                             fmt_sizes(sc, sizeof sc, o));
    return TPU_OK;
}

static tpu_status check_sort(const tpu_op *op) {
    const char *name = tpu_k_op_label(op);
    const tpu_tensor *in = &op->in[0], *o = &op->out, *ix = &op->aux[0];
    const int32_t dim = op->p.sort.dim;
    char sa[160], sb[160], sc[160];
    if (op->fn == TPU_SORT_SEARCHSORTED)
        return check_searchsorted(op);
    if (op->n_in != 1)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: n_in is %d (expected 1)", name, (int)op->n_in);
    if (dim < 0 || dim >= in->ndim)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: dim %d is out of range for %d dims", name,
                             (int)dim, (int)in->ndim);
    if (o->dtype != in->dtype || ix->dtype != TPU_DTYPE_I64)
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: values must be %s and indices int64, "
                             "got %s and %s", name, tpu_dtype_name(in->dtype),
                             tpu_dtype_name(o->dtype), tpu_dtype_name(ix->dtype));
    bool ok = o->ndim == in->ndim && ix->ndim == in->ndim;
    for (int32_t d = 0; ok && d < in->ndim; d++) {
        int64_t want = in->sizes[d];
        if (d == dim && op->fn == TPU_SORT_TOPK)
            want = o->sizes[d] <= in->sizes[d] ? o->sizes[d] : -1; /* k <= the line */
        ok = o->sizes[d] == want && ix->sizes[d] == want;
    }
    if (!ok)
        return tpu_set_error(TPU_ERR_SHAPE, "%s: values %s and indices %s do not fit in[0] %s along "
                             "dim %d", name, fmt_sizes(sa, sizeof sa, o), fmt_sizes(sb, sizeof sb, ix),
                             fmt_sizes(sc, sizeof sc, in), (int)dim);
    return TPU_OK;
}

/* WINDOW: the image is in[0] (IM2COL, MAX_POOL) or out (COL2IM); the
 * columns are [N, OH, OW, C, kh, kw]. */
/* WINDOW ADAPTIVE_MAX_POOL: x [N, C, D, H, W] float, out and indices
 * (int64) [N, C, OD, OH, OW]; every bin must hold an element. */
static tpu_status check_adaptive_pool(const tpu_op *op) {
    const char *name = tpu_k_op_label(op);
    const tpu_tensor *x = &op->in[0], *o = &op->out;
    char sa[160], sb[160];
    if (x->ndim != 5 || o->ndim != 5 || o->sizes[0] != x->sizes[0] || o->sizes[1] != x->sizes[1])
        return tpu_set_error(TPU_ERR_SHAPE, "%s: image %s and pooled %s (both 5-d [N, C, D, H, W], "
                             "with equal N and C)", name, fmt_sizes(sa, sizeof sa, x),
                             fmt_sizes(sb, sizeof sb, o));
    if (tpu_k_numel(o) > 0)
        for (int32_t d = 2; d < 5; d++)
            if (x->sizes[d] < 1)
                return tpu_set_error(TPU_ERR_SHAPE, "%s: image %s has an empty dim %d: the bins "
                                     "of %s would hold no element", name,
                                     fmt_sizes(sa, sizeof sa, x), (int)d,
                                     fmt_sizes(sb, sizeof sb, o));
    if (!tpu_dtype_is_float(x->dtype) || o->dtype != x->dtype)
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: dtypes %s and %s (they must match and "
                             "be floating)", name, tpu_dtype_name(x->dtype),
                             tpu_dtype_name(o->dtype));
    const int64_t *os = o->sizes;
    return check_sizes_n(op, "indices", &op->aux[0], 5, os, TPU_DTYPE_I64);
}

static tpu_status check_window(const tpu_op *op) {
    const char *name = tpu_k_op_label(op);
    if (op->fn == TPU_WINDOW_ADAPTIVE_MAX_POOL)
        return check_adaptive_pool(op);
    const int64_t w[8] = {op->p.window.kh, op->p.window.kw, op->p.window.sh, op->p.window.sw,
                          op->p.window.ph, op->p.window.pw, op->p.window.dh, op->p.window.dw};
    for (int k = 0; k < 8; k++)
        if (k / 2 == 2 ? w[k] < 0 : w[k] < 1)
            return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: kernel %lldx%lld, stride %lldx%lld, padding "
                                 "%lldx%lld, dilation %lldx%lld (padding >= 0, the others >= 1)", name,
                                 (long long)w[0], (long long)w[1], (long long)w[2], (long long)w[3],
                                 (long long)w[4], (long long)w[5], (long long)w[6], (long long)w[7]);
    const bool col2im = op->fn == TPU_WINDOW_COL2IM, pool = op->fn == TPU_WINDOW_MAX_POOL;
    const tpu_tensor *img = col2im ? &op->out : &op->in[0], *win = col2im ? &op->in[0] : &op->out;
    char sa[160], sb[160];
    if (img->ndim != 4 || win->ndim != (pool ? 4 : 6))
        return tpu_set_error(TPU_ERR_SHAPE, "%s: image %s and windows %s (4-d image; %s)", name,
                             fmt_sizes(sa, sizeof sa, img), fmt_sizes(sb, sizeof sb, win),
                             pool ? "4-d pooled" : "6-d columns [N, OH, OW, C, kh, kw]");
    const int64_t oh = win->sizes[pool ? 2 : 1], ow = win->sizes[pool ? 3 : 2];
    bool ok = win->sizes[0] == img->sizes[0] && win->sizes[pool ? 1 : 3] == img->sizes[1] &&
              (pool || (win->sizes[4] == w[0] && win->sizes[5] == w[1]));
    /* Every window must start inside the padded image (a pooling window
     * inside the image itself, as PyTorch's output sizes ensure). */
    const int64_t lim_h = img->sizes[2] + (pool ? 0 : w[4]), lim_w = img->sizes[3] + (pool ? 0 : w[5]);
    ok = ok && (oh == 0 || (oh - 1) * w[2] - w[4] < lim_h) &&
         (ow == 0 || (ow - 1) * w[3] - w[5] < lim_w);
    if (!ok)
        return tpu_set_error(TPU_ERR_SHAPE, "%s: windows %s do not fit image %s", name,
                             fmt_sizes(sb, sizeof sb, win), fmt_sizes(sa, sizeof sa, img));
    if (win->dtype != img->dtype || (col2im && !tpu_dtype_is_float(img->dtype)))
        return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: dtypes %s and %s (they must match%s)",
                             name, tpu_dtype_name(img->dtype), tpu_dtype_name(win->dtype),
                             col2im ? " and be floating" : "");
    if (pool) {
        tpu_status st = check_shape(op, "indices", &op->aux[0], 4, win->sizes[0], win->sizes[1],
                                    TPU_DTYPE_I64);
        if (st == TPU_OK && (op->aux[0].sizes[2] != oh || op->aux[0].sizes[3] != ow))
            st = tpu_set_error(TPU_ERR_SHAPE, "%s: indices do not have the pooled sizes", name);
        if (st == TPU_OK && img->dtype == TPU_DTYPE_BOOL)
            st = tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: dtype bool is not supported", name);
        return st;
    }
    return TPU_OK;
}

/* Whether slot i of in[] (aux: of aux[]) may hold an absent tensor. */
static bool may_be_absent(const tpu_op *op, bool aux, int i) {
    switch (op->code) {
    case TPU_OP_NORM:
        if (op->fn == TPU_NORM_LAYER_FORWARD)
            return !aux && (i == 1 || i == 2);
        return aux || i == 4;
    case TPU_OP_LOSS: return !aux && i == 2;
    case TPU_OP_INDEX: return !aux && i == 0 && op->fn == TPU_INDEX_SCATTER_FILL;
    case TPU_OP_ATTENTION: return !aux && i == (op->fn == TPU_ATTENTION_FORWARD ? 3 : 4);
    default: return false;
    }
}

/* Further outputs each family writes (aux[0..n)). */
static int aux_count(const tpu_op *op) {
    switch (op->code) {
    case TPU_OP_NORM: return 2;
    case TPU_OP_LOSS: return op->fn == TPU_LOSS_NLL_FORWARD ? 1 : 0;
    case TPU_OP_SORT: return op->fn == TPU_SORT_SEARCHSORTED ? 0 : 1;
    case TPU_OP_SCAN: return op->fn == TPU_SCAN_CUMMAX || op->fn == TPU_SCAN_CUMMIN ? 1 : 0;
    case TPU_OP_WINDOW:
        return op->fn == TPU_WINDOW_MAX_POOL || op->fn == TPU_WINDOW_ADAPTIVE_MAX_POOL ? 1 : 0;
    case TPU_OP_ATTENTION: return op->fn == TPU_ATTENTION_FORWARD ? 1 : 2;
    default: return 0;
    }
}

/* Inputs each family reads: a range (BINARY: b is a tensor or a scalar;
 * MATMUL: ADDMM has the bias as a third). */
static const struct {
    int8_t min_in, max_in;
} k_arity[] = {
    [TPU_OP_COPY] = {1, 1},   [TPU_OP_COPY_H2D] = {1, 1}, [TPU_OP_COPY_D2H] = {1, 1},
    [TPU_OP_FILL] = {0, 0},   [TPU_OP_UNARY] = {1, 1},    [TPU_OP_BINARY] = {1, 2},
    [TPU_OP_TERNARY] = {2, 3}, [TPU_OP_SOFTMAX] = {1, 2},
    [TPU_OP_REDUCE] = {1, 1}, [TPU_OP_MATMUL] = {2, 3},   [TPU_OP_RANDOM] = {0, 0},
    [TPU_OP_NORM] = {3, 5},   [TPU_OP_INDEX] = {1, 5},    [TPU_OP_LOSS] = {3, 4},
    [TPU_OP_SCAN] = {1, 1},   [TPU_OP_SORT] = {1, 2},     [TPU_OP_WINDOW] = {1, 1},
    [TPU_OP_ATTENTION] = {4, 7},
};
_Static_assert(sizeof k_arity / sizeof k_arity[0] == TPU_OP_COUNT,
               "every tpu_op_code needs an arity");

tpu_status tpu_op_check(const tpu_op *op) {
    if (op == NULL)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_op_check: op is NULL");
    if ((unsigned)op->code >= (unsigned)TPU_OP_COUNT)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_op_check: invalid opcode %d",
                             (int)op->code);
    if (op->fn < 0 || op->fn >= tpu_op_fn_count(op->code))
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_op_check: %s has no function %d",
                             tpu_op_name(op->code), (int)op->fn);
    const char *name = tpu_k_op_label(op);
    int lo = k_arity[op->code].min_in, hi = k_arity[op->code].max_in;
    if (op->code == TPU_OP_MATMUL)
        lo = hi = op->fn == TPU_MATMUL_ADDMM ? 3 : 2;
    if (op->code == TPU_OP_NORM)
        lo = hi = op->fn == TPU_NORM_LAYER_FORWARD ? 3 : 5;
    if (op->code == TPU_OP_LOSS)
        lo = hi = op->fn == TPU_LOSS_NLL_FORWARD ? 3 : 4;
    if (op->code == TPU_OP_ATTENTION)
        lo = hi = op->fn == TPU_ATTENTION_FORWARD ? 4 : 7;
    if (op->code == TPU_OP_INDEX && (op->fn == TPU_INDEX_HISTC || op->fn == TPU_INDEX_NONZERO))
        lo = hi = 1;
    else if (op->code == TPU_OP_INDEX && (op->fn == TPU_INDEX_ADVANCED ||
                                          op->fn == TPU_INDEX_ADVANCED_PUT))
        lo = 2, hi = 1 + TPU_OP_MAX_INDICES;
    else if (op->code == TPU_OP_INDEX &&
             (op->fn == TPU_INDEX_INTERP || op->fn == TPU_INDEX_INTERP_BACKWARD))
        lo = hi = 3;
    else if (op->code == TPU_OP_INDEX)
        lo = hi = 2;
    if (op->n_aux != aux_count(op))
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: n_aux is %d (expected %d)", name,
                             (int)op->n_aux, aux_count(op));
    if (op->n_in < lo || op->n_in > hi)
        return lo == hi ? tpu_set_error(TPU_ERR_INVALID_ARG, "%s: n_in is %d (expected %d)",
                                        name, (int)op->n_in, lo)
                        : tpu_set_error(TPU_ERR_INVALID_ARG, "%s: n_in is %d (expected %d to %d)",
                                        name, (int)op->n_in, lo, hi);
    /* Each descriptor on its own, then the out-specific rule, then the
     * relations the op needs between them. */
    static const char *const what[] = {"in[0]", "in[1]", "in[2]", "in[3]",
                                       "in[4]", "in[5]", "in[6]"};
    static const char *const aux_what[] = {"aux[0]", "aux[1]"};
    _Static_assert(sizeof what / sizeof what[0] == TPU_OP_MAX_IN, "a name per input slot");
    _Static_assert(sizeof aux_what / sizeof aux_what[0] == TPU_OP_MAX_AUX, "a name per aux slot");
    /* NORM's backward may leave out (dx) absent: not wanted. */
    bool out_optional = op->code == TPU_OP_NORM && op->fn == TPU_NORM_LAYER_BACKWARD;
    tpu_status st = tpu_tensor_is_absent(&op->out) && out_optional
                        ? TPU_OK
                        : check_tensor(op, "out", &op->out);
    for (int i = 0; st == TPU_OK && i < op->n_in; i++)
        if (!(tpu_tensor_is_absent(&op->in[i]) && may_be_absent(op, false, i)))
            st = check_tensor(op, what[i], &op->in[i]);
    for (int i = 0; st == TPU_OK && i < op->n_aux; i++)
        if (!(tpu_tensor_is_absent(&op->aux[i]) && may_be_absent(op, true, i)))
            st = check_tensor(op, aux_what[i], &op->aux[i]);
    /* ADVANCED_PUT's out has stride 0 in its indexed dims by design. */
    bool put = op->code == TPU_OP_INDEX && op->fn == TPU_INDEX_ADVANCED_PUT;
    if (st == TPU_OK && !put)
        st = check_no_self_overlap(op, "out", &op->out);
    for (int i = 0; st == TPU_OK && i < op->n_aux; i++)
        st = check_no_self_overlap(op, aux_what[i], &op->aux[i]);
    if (st == TPU_OK)
        st = check_scratch(op);
    if (st != TPU_OK)
        return st;
    /* The family's own rules, then the overlap rule (which reads sizes
     * the family has checked). */
    switch (op->code) {
    case TPU_OP_COPY:
    case TPU_OP_COPY_H2D:
    case TPU_OP_COPY_D2H:
        st = check_same_sizes(op, 0);
        if (st == TPU_OK && op->fn != TPU_COPY_PLAIN && op->out.ndim < 2)
            return tpu_set_error(TPU_ERR_SHAPE, "%s: needs at least 2 dims, got %d", name,
                                 (int)op->out.ndim);
        break;
    case TPU_OP_FILL:
        if (op->fn == TPU_FILL_ARANGE && op->out.dtype == TPU_DTYPE_BOOL)
            return tpu_set_error(TPU_ERR_UNSUPPORTED_DTYPE, "%s: out dtype bool is not supported", name);
        break;
    case TPU_OP_UNARY:
    case TPU_OP_BINARY:
    case TPU_OP_TERNARY: st = check_elementwise(op); break;
    case TPU_OP_REDUCE: st = check_reduce(op); break;
    case TPU_OP_SOFTMAX: st = check_softmax(op); break;
    case TPU_OP_MATMUL: st = check_mm(op); break;
    case TPU_OP_RANDOM: st = check_random(op); break;
    case TPU_OP_NORM: st = check_norm(op); break;
    case TPU_OP_INDEX: st = check_index(op); break;
    case TPU_OP_LOSS: st = check_loss(op); break;
    case TPU_OP_SCAN: st = check_scan(op); break;
    case TPU_OP_SORT: st = check_sort(op); break;
    case TPU_OP_WINDOW: st = check_window(op); break;
    case TPU_OP_ATTENTION: st = check_attention(op); break;
    case TPU_OP_COUNT:
        return tpu_set_error(TPU_ERR_INTERNAL, "%s: opcode %d has no check", name, (int)op->code);
    }
    return st == TPU_OK ? check_overlap(op) : st;
}
