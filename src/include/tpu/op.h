/* Ops are data: the op record and the kernel interface.
 *
 * An op is a plain record (tpu_op): an opcode, tensor descriptors for its
 * output and inputs, and scalar parameters. The same record is checked on
 * the submitting thread, queued on a stream, executed by a kernel split
 * across the thread pool, and (later) fused, priced and captured. No layer
 * hides work in a closure another layer cannot read.
 *
 * Conventions for every op:
 *   - Tensors are strided views of device memory, except the host side of
 *     COPY_H2D / COPY_D2H, which is host memory (a real target moves those
 *     bytes with its DMA engine; the host target reads them directly).
 *     Strides are in elements and may be zero (broadcast) or negative.
 *   - Inputs are already broadcast to the output's sizes by the caller
 *     (stride 0 in broadcast dims), except where an op says otherwise.
 *   - The output does not overlap itself (no zero strides over size > 1)
 *     and, except for element-wise ops writing in place (out == in[i]
 *     exactly), does not overlap an input.
 *   - Results do not depend on the number of threads, nor on the mode. */
#ifndef TPU_OP_H
#define TPU_OP_H

#include <stdbool.h>
#include <stdint.h>

#include "tpu/dtype.h"
#include "tpu/export.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Larger ranks are handled by the caller (CPU fallback). */
#define TPU_MAX_DIMS 12

/* A view of memory: element (i0, i1, ...) lives at
 * data + sum(ik * strides[k]) * dtype size. ndim == 0 is a scalar.
 *
 * `storage` and `storage_nbytes` give the allocation the view lies in (a
 * PyTorch storage): tpu_op_check refuses a record any of whose elements
 * falls outside [storage, storage + storage_nbytes), so that a view left
 * hanging over a storage that was shrunk under it (storage.resize_) is an
 * error, never a read or write past the block. Required whenever the
 * tensor has elements. */
typedef struct {
    void *data;
    int64_t sizes[TPU_MAX_DIMS];
    int64_t strides[TPU_MAX_DIMS];
    int32_t ndim;
    tpu_dtype dtype;
    void *storage;
    int64_t storage_nbytes;
} tpu_tensor;

/* A scalar from the host, given in both forms so that a kernel reads the
 * one that matches its compute type (f for float compute, i for integer
 * and bool compute). */
typedef struct {
    double f;
    int64_t i;
} tpu_scalar;

/* The one op enum: op families. A family is one record layout, one check
 * and one kernel; what it computes is its function code (tpu_op.fn):
 * BINARY with fn TPU_BINARY_ADD is an add. A new element-wise function is
 * a row in its family's table and a scalar body, not a new opcode. Every
 * table indexed by it (names, kernels, checks, costs) carries a
 * static_assert on TPU_OP_COUNT. */
typedef enum {
    TPU_OP_COPY = 0, /* out = (out.dtype) in[0]; same sizes; any dtype pair */
    TPU_OP_COPY_H2D, /* COPY whose in[0] is host memory: a transfer to the chip */
    TPU_OP_COPY_D2H, /* COPY whose out is host memory: a transfer from the chip */
    TPU_OP_FILL,     /* out = a constant or a ramp; tpu_fill_fn, p.fill */
    TPU_OP_UNARY,    /* out = fn(in[0]), element-wise; tpu_unary_fn, p.ew */
    TPU_OP_BINARY,   /* out = fn(in[0], b), element-wise; tpu_binary_fn, p.ew */
    TPU_OP_TERNARY,  /* out = fn(in[0], in[1], c), element-wise; tpu_ternary_fn, p.ew */
    TPU_OP_REDUCE,   /* out = fn of in[0] over the dims in p.reduce.mask; tpu_reduce_fn */
    TPU_OP_SOFTMAX,  /* softmax family along one dim; tpu_softmax_fn, p.softmax */
    TPU_OP_MATMUL,   /* matrix products; tpu_matmul_fn, p.mm */
    TPU_OP_RANDOM,   /* out drawn from a distribution; tpu_random_fn, p.rand */
    TPU_OP_NORM,     /* layer normalization and its backward; tpu_norm_fn, p.norm */
    TPU_OP_INDEX,    /* gathers and scatters by an index tensor; tpu_index_fn, p.index */
    TPU_OP_LOSS,     /* losses against targets and their backward; tpu_loss_fn, p.loss */
    TPU_OP_SCAN,     /* running sums and products along one dim; tpu_scan_fn, p.scan */
    TPU_OP_SORT,     /* sorting along one dim, with indices; tpu_sort_fn, p.sort */
    TPU_OP_WINDOW,   /* sliding 2-d windows: im2col, col2im, max pooling; tpu_window_fn, p.window */
    TPU_OP_ATTENTION, /* scaled dot-product attention and its backward; tpu_attention_fn, p.attn */
    TPU_OP_COUNT
} tpu_op_code;

/* COPY functions (COPY_H2D and COPY_D2H have only PLAIN). out and in[0]
 * have equal sizes; TRIL and TRIU need rank >= 2 and act on the last two
 * dims (row i, column j), writing 0 (false) where they do not copy. */
typedef enum {
    TPU_COPY_PLAIN = 0, /* out = (out.dtype) in[0] */
    TPU_COPY_TRIL,      /* out = j - i <= p.tri.diagonal ? in[0] : 0 */
    TPU_COPY_TRIU,      /* out = j - i >= p.tri.diagonal ? in[0] : 0 */
    TPU_COPY_COUNT
} tpu_copy_fn;

/* FILL functions. */
typedef enum {
    TPU_FILL_CONSTANT = 0, /* out = p.fill.value */
    TPU_FILL_ARANGE,       /* out[k] = value + step * k, k the row-major index: in f64 then
                            * rounded once for floats (PyTorch's CPU arange computes in its
                            * f64 accumulate type), wrapping int64 for integers; not bool */
    TPU_FILL_COUNT
} tpu_fill_fn;

/* UNARY functions. x is in[0] converted to p.ew.common; a0..a2 are
 * p.ew.args[0..2] (floats read .f, integer compute reads .i). Float-only
 * functions need a float common dtype; "any" ones also take integers
 * (and bool where the note says). Functions marked -> bool give a bool
 * result whatever the common dtype. */
typedef enum {
    TPU_UNARY_NEG = 0,     /* -x; integers wrap; not bool */
    TPU_UNARY_ABS,         /* |x|; integers wrap (abs(INT_MIN) == INT_MIN); not bool */
    TPU_UNARY_SIGN,        /* (0 < x) - (x < 0): -1, 0 or 1 (NaN and -0 give 0); bool: x */
    TPU_UNARY_RECIPROCAL,  /* 1 / x, float */
    TPU_UNARY_SQRT,        /* float */
    TPU_UNARY_RSQRT,       /* 1 / sqrt(x), float */
    TPU_UNARY_EXP,         /* float, and so on down to ERFINV */
    TPU_UNARY_EXP2,
    TPU_UNARY_EXPM1,
    TPU_UNARY_LOG,
    TPU_UNARY_LOG2,
    TPU_UNARY_LOG10,
    TPU_UNARY_LOG1P,
    TPU_UNARY_SIN,
    TPU_UNARY_COS,
    TPU_UNARY_TAN,
    TPU_UNARY_ASIN,
    TPU_UNARY_ACOS,
    TPU_UNARY_ATAN,
    TPU_UNARY_SINH,
    TPU_UNARY_COSH,
    TPU_UNARY_TANH,
    TPU_UNARY_ASINH,
    TPU_UNARY_ACOSH,
    TPU_UNARY_ATANH,
    TPU_UNARY_ERF,
    TPU_UNARY_ERFC,
    TPU_UNARY_ERFINV,
    TPU_UNARY_FLOOR,       /* floats rounded to integers; integers unchanged */
    TPU_UNARY_CEIL,
    TPU_UNARY_ROUND,       /* half to even */
    TPU_UNARY_TRUNC,
    TPU_UNARY_FRAC,        /* x - trunc(x), float */
    TPU_UNARY_SIGMOID,     /* 1 / (1 + exp(-x)), float */
    TPU_UNARY_RELU,        /* max(x, 0) (NaN stays NaN); any but bool */
    TPU_UNARY_GELU,        /* x * Phi(x), erf form, float */
    TPU_UNARY_GELU_TANH,   /* gelu's tanh approximation, float */
    TPU_UNARY_SILU,        /* x * sigmoid(x), float */
    TPU_UNARY_MISH,        /* x * tanh(softplus(x)), float */
    TPU_UNARY_SOFTPLUS,    /* a0 = beta, a1 = threshold: x if x * beta > threshold else log1p(exp(beta x)) / beta */
    TPU_UNARY_LEAKY_RELU,  /* x > 0 ? x : a0 * x, float */
    TPU_UNARY_ELU,         /* a0 = alpha, a1 = scale, a2 = input_scale: x > 0 ? scale x : scale alpha (exp(x input_scale) - 1) */
    TPU_UNARY_HARDSWISH,   /* x * min(max(x + 3, 0), 6) / 6, float */
    TPU_UNARY_HARDSIGMOID, /* min(max(x + 3, 0), 6) / 6 (NaN stays NaN), float */
    TPU_UNARY_CLAMP,       /* a2.i bit 0: clamp below at a0, bit 1: above at a1 (NaN x stays NaN, a NaN bound gives NaN); any but bool */
    TPU_UNARY_NAN_TO_NUM,  /* NaN -> a0, +inf -> a1, -inf -> a2, float */
    TPU_UNARY_ISNAN,       /* -> bool; any */
    TPU_UNARY_ISINF,       /* -> bool; any */
    TPU_UNARY_ISPOSINF,    /* -> bool; any */
    TPU_UNARY_ISNEGINF,    /* -> bool; any */
    TPU_UNARY_LOGICAL_NOT, /* -> bool: x == 0; any */
    TPU_UNARY_BITWISE_NOT, /* ~x on integers, !x on bool */
    TPU_UNARY_SIGNBIT,     /* -> bool: the sign bit (-0.0 and -NaN too); integers: x < 0; bool: false */
    TPU_UNARY_SINC,        /* sin(pi x) / (pi x), 1 at 0, float */
    TPU_UNARY_LOGIT,       /* log(z / (1 - z)), z = x clamped to [a0, 1 - a0] when a0 >= 0, else x; float */
    TPU_UNARY_HARDSHRINK,  /* -a0 <= x <= a0 ? 0 : x, float */
    TPU_UNARY_SOFTSHRINK,  /* x > a0 ? x - a0 : x < -a0 ? x + a0 : x * 0, float */
    TPU_UNARY_ENTR,        /* -x log x; 0 at 0, -inf below 0; float */
    TPU_UNARY_LGAMMA,      /* log |Gamma(x)|, float; the special functions compute in f64 */
    TPU_UNARY_DIGAMMA,     /* psi(x); +-inf at +-0 by the sign of -x, NaN at negative integers */
    TPU_UNARY_POLYGAMMA,   /* psi^(n)(x), n = a0.i >= 0 */
    TPU_UNARY_I0,          /* modified Bessel function I0 (NaN at +-inf, as PyTorch; so I1) */
    TPU_UNARY_I0E,         /* e^-|x| I0(x) */
    TPU_UNARY_I1,          /* I1 */
    TPU_UNARY_I1E,         /* e^-|x| I1(x) */
    TPU_UNARY_COUNT
} tpu_unary_fn;

/* BINARY functions of a = in[0] and b (in[1], or p.ew.other when n_in ==
 * 1), both converted to p.ew.common. Float-only, integer-only (bool too
 * where noted) and -> bool as for UNARY. */
typedef enum {
    TPU_BINARY_ADD = 0,    /* a + alpha * b (float: one rounding, fma when alpha != 1); bool: a || (alpha && b) */
    TPU_BINARY_SUB,        /* a - alpha * b; not bool */
    TPU_BINARY_MUL,        /* a * b; bool: a && b */
    TPU_BINARY_DIV,        /* a / b rounded per p.ew.rounding; true division needs float; integer /0 is TPU_ERR_DIV_BY_ZERO; not bool */
    TPU_BINARY_MAXIMUM,    /* NaN if either is NaN; any */
    TPU_BINARY_MINIMUM,
    TPU_BINARY_FMAX,       /* the non-NaN one if one is NaN; any */
    TPU_BINARY_FMIN,
    TPU_BINARY_POW,        /* a ** b; a scalar b of 2, 3, +-0.5, -1, -2 by arithmetic (a*a, sqrt, ...) as PyTorch's pow(tensor, scalar); integers by squaring, wrapping, b < 0 gives 0 (1 and -1 as powers); not bool */
    TPU_BINARY_REMAINDER,  /* Python's %: sign of b; integer %0 is TPU_ERR_DIV_BY_ZERO; not bool */
    TPU_BINARY_FMOD,       /* C's fmod: sign of a; likewise */
    TPU_BINARY_ATAN2,      /* float */
    TPU_BINARY_COPYSIGN,   /* float */
    TPU_BINARY_XLOGY,      /* a * log(b), 0 where a == 0 (NaN b stays NaN); float */
    TPU_BINARY_EQ,         /* -> bool; any */
    TPU_BINARY_NE,
    TPU_BINARY_LT,
    TPU_BINARY_LE,
    TPU_BINARY_GT,
    TPU_BINARY_GE,
    TPU_BINARY_LOGICAL_AND, /* -> bool; any */
    TPU_BINARY_LOGICAL_OR,
    TPU_BINARY_LOGICAL_XOR,
    TPU_BINARY_BITWISE_AND, /* integers and bool */
    TPU_BINARY_BITWISE_OR,
    TPU_BINARY_BITWISE_XOR,
    TPU_BINARY_LSHIFT,      /* integers: a << b, 0 when b is negative or >= the bits of common */
    TPU_BINARY_RSHIFT,      /* integers: a >> b (arithmetic), the sign fill (u8: 0) when b < 0 or b >= the bits */
    TPU_BINARY_HYPOT,       /* sqrt(a^2 + b^2) without overflow; float */
    TPU_BINARY_XLOG1PY,     /* a * log1p(b), 0 where a == 0 (NaN b stays NaN); float */
    TPU_BINARY_HEAVISIDE,   /* a == 0 ? b : a > 0 (NaN a gives 0); any */
    /* Backward functions: a is the incoming gradient g unless noted. */
    TPU_BINARY_THRESHOLD,           /* a <= a0 ? a1 : b (threshold and relu's backward); any but bool */
    TPU_BINARY_SIGMOID_BACKWARD,    /* g * (1 - y) * y, b = y = sigmoid(x); float */
    TPU_BINARY_TANH_BACKWARD,       /* g * (1 - y * y), b = y = tanh(x); float */
    TPU_BINARY_GELU_BACKWARD,       /* g * gelu'(b); float */
    TPU_BINARY_GELU_TANH_BACKWARD,  /* g * (tanh approximation)'(b); float */
    TPU_BINARY_SILU_BACKWARD,       /* g * silu'(b); float */
    TPU_BINARY_MISH_BACKWARD,       /* g * mish'(b); float */
    TPU_BINARY_LEAKY_RELU_BACKWARD, /* a = x, b = g (PyTorch's operand order): a > 0 ? b : b * a0; float */
    TPU_BINARY_HARDSWISH_BACKWARD,  /* g * hardswish'(b); float */
    TPU_BINARY_HARDSIGMOID_BACKWARD,/* -3 < b < 3 ? g / 6 : 0; float */
    TPU_BINARY_SOFTPLUS_BACKWARD,   /* b * beta > threshold ? g : g * z / (z + 1), z = exp(b beta); a0 beta, a1 threshold; float */
    TPU_BINARY_HARDTANH_BACKWARD,   /* b <= a0 || b >= a1 ? 0 : g; float */
    TPU_BINARY_SHRINK_BACKWARD,     /* -a0 <= b <= a0 ? 0 : g, b = x (hardshrink and softshrink); float */
    TPU_BINARY_LOGIT_BACKWARD,      /* b = x: a0 < 0: x outside [0, 1] gives NaN, else g / (x (1 - x));
                                     * a0 >= 0: x outside [a0, 1 - a0] gives 0; float */
    TPU_BINARY_COUNT
} tpu_binary_fn;

/* TERNARY functions of a = in[0], b = in[1] and c (in[2], or p.ew.other
 * when n_in == 2), converted to p.ew.common as for BINARY. A NaN result
 * of ADDCMUL, ADDCDIV or LERP is the positive quiet NaN. */
typedef enum {
    TPU_TERNARY_WHERE = 0, /* a != 0 ? b : c; a (the condition) is read as bool, not through common; any */
    TPU_TERNARY_ADDCMUL,   /* a + alpha * b * c, in that order ((alpha b) c); integers wrap; not bool */
    TPU_TERNARY_ADDCDIV,   /* a + alpha * b / c, in that order ((alpha b) / c); float */
    TPU_TERNARY_LERP,      /* fma(c, b - a, a) if |c| < 0.5, else fma(c - 1, b - a, b) (PyTorch's vectorised form); float */
    TPU_TERNARY_COUNT
} tpu_ternary_fn;

/* REDUCE functions. */
typedef enum {
    TPU_REDUCE_SUM = 0, /* f64 accumulator for float outs, wrapping i64 for integer and bool */
    TPU_REDUCE_MEAN,    /* sum / count; float out; NaN over zero elements */
    TPU_REDUCE_PROD,    /* product; accumulators as SUM; 1 over zero elements */
    TPU_REDUCE_AMAX,    /* largest value, NaN if any is NaN; out.dtype == in[0].dtype; needs elements */
    TPU_REDUCE_AMIN,    /* smallest, likewise */
    TPU_REDUCE_ARGMAX,  /* int64 index along the one reduced dim of the first largest value (the
                         * first NaN if any); mask has at most one bit; needs elements */
    TPU_REDUCE_ARGMIN,  /* likewise, the first smallest */
    TPU_REDUCE_ANY,     /* 1 if any element is nonzero (NaN is nonzero), else 0; out bool or uint8 */
    TPU_REDUCE_ALL,     /* 1 if every element is nonzero (1 over zero elements); likewise */
    TPU_REDUCE_NORM,    /* vector norm of order p.reduce.ord in f64: (sum |x|^ord)^(1/ord); ord 2
                         * as sqrt(sum x*x), 1 as sum |x|, inf as max |x|, -inf as min |x|, 0 as the
                         * count of nonzeros; float out; 0 over zero elements (inf and
                         * negative orders, -inf too: need elements) */
    TPU_REDUCE_VAR,     /* variance in f64: sum (x - mean)^2 / fmax(count - p.reduce.correction, 0),
                         * mean = sum x / count, both sums in the order reduce.c states; float
                         * in and out; NaN over zero elements (a NaN correction divides by 0) */
    TPU_REDUCE_STD,     /* sqrt of VAR's f64 result, rounded once */
    TPU_REDUCE_COUNT
} tpu_reduce_fn;

/* SOFTMAX functions, along dim d = p.softmax.dim of in[0] (every "row",
 * the elements that differ only in dim d, independently). out has
 * in[0]'s sizes; any float dtypes (an f16 input may give an f32 out:
 * half_to_float). The reference computes each row in f64 and rounds each
 * output once; the fast path (contiguous rows) computes in f32 with f64
 * sums, within a few f32 ulps of it before the output's rounding. */
typedef enum {
    TPU_SOFTMAX_FORWARD = 0,   /* exp(x - max) / sum exp(x - max) */
    TPU_SOFTMAX_LOG,           /* x - max - log(sum exp(x - max)) */
    TPU_SOFTMAX_BACKWARD,      /* in[0] = grad g, in[1] = softmax y: y (g - sum g y) */
    TPU_SOFTMAX_LOG_BACKWARD,  /* in[0] = grad g, in[1] = log_softmax y: g - exp(y) sum g */
    TPU_SOFTMAX_SAFE,          /* FORWARD, but 0 for a row that is all -inf (_safe_softmax) */
    TPU_SOFTMAX_COUNT
} tpu_softmax_fn;

/* MATMUL functions. */
typedef enum {
    TPU_MATMUL_MM = 0, /* out[M,N] = in[0][M,K] @ in[1][K,N] */
    TPU_MATMUL_ADDMM,  /* out[M,N] = beta * in[2] + alpha * (in[0] @ in[1]) */
    TPU_MATMUL_COUNT
} tpu_matmul_fn;

/* RANDOM functions. */
typedef enum {
    TPU_RANDOM_UNIFORM = 0, /* out ~ U[p.rand.a, p.rand.b) */
    TPU_RANDOM_NORMAL,      /* out ~ N(mean p.rand.a, std p.rand.b) */
    TPU_RANDOM_BERNOULLI,   /* out = 1 with probability p.rand.a, else 0; any out dtype */
    TPU_RANDOM_INTEGERS,    /* out = p.rand.from + (r mod p.rand.span), r a uniform 64-bit draw
                             * (32-bit when span < 2^32); span 0 means 2^64; any out dtype but
                             * bool, values exact in it */
    TPU_RANDOM_COUNT
} tpu_random_fn;

/* NORM functions: layer normalization over the last dim of 2-d rows.
 * x = in[0] is [M, N] (M rows of N elements, each normalized on its own);
 * weight and bias are [N] and optional (absent: 1 and 0). mean and rstd
 * are [M]: mean of the row and 1 / sqrt(biased variance + p.norm.eps).
 * Statistics, sums and results are computed in f64 and rounded once on
 * store. x, out and the gradients share x's dtype; weight, bias, mean and
 * rstd share a "parameter" dtype, x's or f32 when x is f16/bf16 (mixed
 * precision, as PyTorch's CPU layer norm). */
typedef enum {
    TPU_NORM_LAYER_FORWARD = 0, /* in: x, weight?, bias?; out = (x - mean) * rstd * weight + bias;
                                 * aux[0] = mean, aux[1] = rstd */
    TPU_NORM_LAYER_BACKWARD,    /* in: grad g, x, mean, rstd, weight?; out = dx (absent: not
                                 * wanted), aux[0] = dweight = sum over rows of g * xhat,
                                 * aux[1] = dbias = sum over rows of g (each absent: not
                                 * wanted); xhat = (x - mean) * rstd */
    TPU_NORM_COUNT
} tpu_norm_fn;

/* INDEX functions. An index tensor is int64 or int32; an index outside
 * [0, size) is a kernel-side TPU_ERR_INDEX naming the value and the size
 * (reported at the next sync), as PyTorch's gathers take no negative
 * indices. */
typedef enum {
    TPU_INDEX_SELECT = 0,       /* out = in[0] with dim p.index.dim taken at the entries of
                                 * in[1] (1-d of out.sizes[dim] entries); out's other sizes
                                 * are in[0]'s; same dtype */
    TPU_INDEX_GATHER,           /* out[..i_d..] = in[0][..in[1][..i_d..]..] along dim
                                 * p.index.dim; in[1] has out's sizes, in[0] at least those
                                 * in every other dim; same dtype */
    TPU_INDEX_EMBEDDING_BACKWARD, /* out [W, D] = sum of rows of in[0] ([n, D] gradient) into
                                 * the rows named by in[1] ([n], entries in [0, W): no
                                 * wrapping), skipping entries equal to p.index.padding_idx;
                                 * with p.index.scale_by_freq each row divided by its count
                                 * (counted in scratch: W int64); rows nobody names are 0;
                                 * float */
    TPU_INDEX_HISTC,            /* out [bins] counts the elements of in[0] (any dtype but bool; n_in
                                 * 1) in [p.hist.lo, p.hist.hi] by equal-width bins, the top edge
                                 * in the last bin; NaN and values outside are not counted. Bins
                                 * are found as PyTorch's CPU does, (x - lo) * bins / (hi - lo)
                                 * truncated, in f32 for f32/f16/bf16 and f64 otherwise; out is
                                 * float or integer; lo < hi, both finite */
    TPU_INDEX_SCATTER,          /* out[.. in[1][..j..] ..] = in[0][..j..] along dim p.index.dim, for
                                 * every element j of the index in[1]; other elements of out keep
                                 * their values. in[0] at least the index's sizes, out at least
                                 * them in every dim but dim; same dtype. Positions in one line
                                 * (differing only along dim) are written in order: the last
                                 * duplicate wins */
    TPU_INDEX_SCATTER_ADD,      /* likewise, adding in index order (bool: or) */
    TPU_INDEX_SCATTER_FILL,     /* likewise, writing p.index.value; in[0] is absent */
    TPU_INDEX_SCATTER_PROD,     /* likewise, multiplying in index order (bool: and) */
    TPU_INDEX_SCATTER_AMAX,     /* likewise, keeping the larger (NaN wins; bool: or) */
    TPU_INDEX_SCATTER_AMIN,     /* likewise, keeping the smaller (NaN wins; bool: and) */
    TPU_INDEX_ADVANCED,         /* PyTorch's advanced indexing (x[i, j]): element-wise over out;
                                 * in[0] is the source with stride 0 in the indexed dims and
                                 * in[1 .. p.index.n_idx] the index tensors (out's sizes); the
                                 * source offset adds index k times p.index.idx_strides[k] (in
                                 * elements) after wrapping a negative one by idx_sizes[k] */
    TPU_INDEX_ADVANCED_PUT,     /* the inverse, x[i, j] = v (+= with p.index.accumulate): out is
                                 * the destination with stride 0 in the indexed dims (it may
                                 * overlap itself there; every element is written where its
                                 * indices point), in[0] the values and in[1..] the indices,
                                 * all of out's sizes. Runs on one share, in row-major order:
                                 * the last duplicate wins, sums add in order */
    TPU_INDEX_NONZERO,          /* out [count, rank] int64: the coordinates of in[0]'s nonzero
                                 * elements in row-major order; count (out.sizes[0]) must be
                                 * their number (the glue counts first); n_in 1 */
    TPU_INDEX_INTERP,           /* out[.. o ..] = sum over t of w[o, t] * in[0][.. idx[o, t] ..] along
                                 * dim p.index.dim (separable interpolation, one dim per record):
                                 * in[1] = idx [O, T] int64, in[2] = w [O, T]; out has in[0]'s
                                 * sizes but O along dim. A tap whose index is -1 is absent (adds
                                 * nothing: rows with fewer taps are padded so); any other index
                                 * outside [0, in[0].sizes[dim]) is TPU_ERR_INDEX. Computes in f64
                                 * when in[0] is f64, else in f32 (f16/bf16 too), which is w's
                                 * dtype; out is f64 exactly when in[0] is, else f32, f16 or bf16,
                                 * rounded once. Each sum starts from its first present tap's
                                 * product and adds the others in t order (no present tap: 0) */
    TPU_INDEX_INTERP_BACKWARD,  /* its adjoint: out[.. i ..] = sum of w[o, t] * in[0][.. o ..] over
                                 * the (o, t) with idx[o, t] == i, added in row-major (o, t)
                                 * order onto 0; in[0] = the gradient (O along dim), in[1] and
                                 * in[2] as for INTERP, out (the input's gradient, I along dim)
                                 * of the compute dtype (f32, or f64 for an f64 gradient); every
                                 * element of out is written */
    TPU_INDEX_COUNT
} tpu_index_fn;

/* Reductions of a per-sample loss (PyTorch's Reduction enum). */
typedef enum {
    TPU_LOSS_REDUCE_NONE = 0,
    TPU_LOSS_REDUCE_MEAN,
    TPU_LOSS_REDUCE_SUM,
} tpu_loss_reduction;

/* LOSS functions. Negative log likelihood of log-probabilities x = in[0]
 * ([N, C], or [C] for one sample with no N dim) at int64, int32 or uint8 targets t = in[1]
 * ([N], or 0-d), with optional class weights w = in[2] ([C]). A sample
 * whose target is p.loss.ignore_index counts 0 with weight 0; any other
 * target outside [0, C) is a kernel-side TPU_ERR_INDEX. Sums in f64, in
 * sample order; x, out, weights share one float dtype. */
typedef enum {
    TPU_LOSS_NLL_FORWARD = 0, /* out: [N] of -w[t_i] x[i, t_i] (NONE), or 0-d: their sum (SUM)
                               * or their sum / aux[0] (MEAN); aux[0] = total weight, 0-d,
                               * the sum of w[t_i] over samples not ignored */
    TPU_LOSS_NLL_BACKWARD,    /* in: grad g (0-d, or [N] for NONE), t, w?, total weight (0-d);
                               * out = dx, x's sizes: -w[t_i] g (/ total weight for MEAN) at
                               * [i, t_i], 0 elsewhere */
    TPU_LOSS_COUNT
} tpu_loss_fn;

/* SCAN functions: out[.., i, ..] = in[0][.., 0, ..] op ... op in[0][.., i, ..]
 * along dim p.scan.dim, every line independently; out has in[0]'s sizes.
 * The running value is kept as REDUCE keeps its accumulator (f64 for a
 * float out, wrapping int64 for an integer out, each element converted to
 * it first); each prefix is stored rounded to out's dtype, the running
 * value itself is never rounded. Not bool outs, except CUMMAX and CUMMIN. */
typedef enum {
    TPU_SCAN_CUMSUM = 0,
    TPU_SCAN_CUMPROD,
    TPU_SCAN_CUMMAX,       /* the running largest value, out in in[0]'s dtype (bool too), and
                            * aux[0] (int64, out's sizes) its position: the latest of equal
                            * values; a NaN, once met, stays (each later NaN moves the position) */
    TPU_SCAN_CUMMIN,       /* likewise, the smallest */
    TPU_SCAN_LOGCUMSUMEXP, /* log(sum exp) of the prefix, in f64 (float out) */
    TPU_SCAN_COUNT
} tpu_scan_fn;

/* SORT functions, along dim p.sort.dim of in[0], every line independently:
 * out holds values (in[0]'s dtype), aux[0] their int64 positions in the
 * line. Ascending unless p.sort.descending; NaN sorts above every number
 * (last ascending, first descending), equal values keep their order
 * (stable). Uses scratch (tpu_op_scratch_bytes). */
typedef enum {
    TPU_SORT_SORT = 0, /* out and aux[0] have in[0]'s sizes */
    TPU_SORT_TOPK,     /* out and aux[0] have in[0]'s sizes but out.sizes[dim] = k, the k first
                        * of the sorted line (descending: the k largest) */
    TPU_SORT_SEARCHSORTED, /* in[0] = boundaries [..., M] sorted ascending along the last dim
                        * (leading dims may have stride 0), in[1] = values [..., N] of the same
                        * dtype (not bool) and leading sizes; out (int64 or int32, in[1]'s sizes)
                        * = the count of boundaries below each value, or at or below it with
                        * p.sort.right; NaN sorts above every number (PyTorch's rule); no
                        * aux, no scratch; dim must be the last */
    TPU_SORT_COUNT
} tpu_sort_fn;

/* WINDOW functions over the last two dims (H, W) of an image x [N, C, H,
 * W]: window (oh, ow) covers rows oh * sh - ph + i * dh and columns
 * ow * sw - pw + j * dw for i < kh, j < kw (p.window); positions outside
 * the image are padding. OH and OW are the window counts (out's sizes).
 * ADAPTIVE_MAX_POOL instead pools the last three dims by bins computed
 * from the sizes. */
typedef enum {
    TPU_WINDOW_IM2COL = 0, /* out [N, OH, OW, C, kh, kw] = x at each window position, 0 in the
                            * padding; in[0] = x; same dtype */
    TPU_WINDOW_COL2IM,     /* the adjoint: out = x-shaped [N, C, H, W], each element the sum
                            * (f64, in (i, j) order) of the in[0] [N, OH, OW, C, kh, kw]
                            * entries that read it; float */
    TPU_WINDOW_MAX_POOL,   /* out [N, C, OH, OW] = the largest x in the window (padding never
                            * counts), aux[0] int64 its position h * W + w: the first largest,
                            * or the last NaN if any (PyTorch's rule); every window must hold
                            * an image element */
    TPU_WINDOW_ADAPTIVE_MAX_POOL, /* x [N, C, D, H, W] (in[0]), out and aux[0] (int64) [N, C, OD,
                            * OH, OW]: the largest x in bin (od, oh, ow), and its position
                            * (d * H + h) * W + w; the bin of o along a dim of size I covers
                            * [floor(o I / O), ceil((o + 1) I / O)) (PyTorch's adaptive
                            * pooling). The first largest, or the last NaN if any; float
                            * dtypes; p.window is unused. Every dim of x must be non-empty
                            * where out has elements */
    TPU_WINDOW_COUNT
} tpu_window_fn;

/* ATTENTION functions: softmax(scale q k^T + mask) v for every batch b
 * and query head h, without forming the L x S score matrix. q is
 * [B, H, L, E], k [B, Hk, S, E], v [B, Hk, S, Ev] with Hk dividing H:
 * query head h reads kv head h / (H / Hk) (grouped-query attention).
 * q, k, v, out and the gradients share one float dtype. The optional mask
 * (absent: none) is [B, H, L, S], stride 0 in broadcast dims: bool (true
 * keeps the key) or any float dtype (added to the score). With
 * p.attn.is_causal, query i sees key j only if j <= i (PyTorch's
 * top-left alignment), together with the mask if one is given. A
 * masked score is -inf whatever q . k is. A query row with every key
 * masked gives 0 (PyTorch's _safe_softmax) and logsumexp -inf, and
 * passes no gradient.
 *
 * Numerics: f32, f16 and bf16 compute in f32 with the MATMUL family's
 * products (f32 fma chains in index order: exact products of f16/bf16
 * values) and vecmath's exp; f64 computes in f64. The reference kernel
 * computes every dtype in f64. Results do not depend on the thread count
 * (both paths split fixed units). */
typedef enum {
    TPU_ATTENTION_FORWARD = 0, /* in: q, k, v, mask?; out [B, H, L, Ev]; aux[0] = logsumexp
                                * [B, H, L] of each row's scores, float32 (float64 for f64) */
    TPU_ATTENTION_BACKWARD,    /* in: grad g [B, H, L, Ev], q, k, v, mask?, and the forward's
                                * out [B, H, L, Ev] and logsumexp [B, H, L] (its dtype); out
                                * = dq, aux[0] = dk, aux[1] = dv (q's, k's and v's sizes); 3
                                * phases, scratch (tpu_op_phases). The fast kernel reads the
                                * forward's results (D = rowsum(g * out), P = exp(s - lse));
                                * the reference recomputes them from q, k, v and the mask */
    TPU_ATTENTION_COUNT
} tpu_attention_fn;

typedef enum {
    TPU_ROUND_NONE = 0, /* true division */
    TPU_ROUND_TRUNC,    /* toward zero */
    TPU_ROUND_FLOOR,    /* toward minus infinity (Python's //) */
} tpu_rounding;

/* Matrix-unit precision, from torch.set_float32_matmul_precision. Applies
 * to f32 operands; bf16/f16 operands are exact in f32, so their products
 * are exact and accumulate in f32 whatever the precision. */
typedef enum {
    TPU_PRECISION_HIGHEST = 0, /* full f32 products */
    TPU_PRECISION_HIGH,        /* 3 bf16 passes (hi*hi + hi*lo + lo*hi), f32 accumulation */
    TPU_PRECISION_MEDIUM,      /* 1 bf16 pass, f32 accumulation */
} tpu_precision;

/* Most inputs and further outputs a record carries (ATTENTION's backward
 * reads seven), and most index tensors of INDEX ADVANCED*. */
#define TPU_OP_MAX_IN 7
#define TPU_OP_MAX_AUX 2
#define TPU_OP_MAX_INDICES 4

/* An optional operand that is not given (NORM's weight, a gradient not
 * wanted) is an absent descriptor: all zero, so data NULL and ndim 0
 * (a present 0-d tensor has an element, so its data is never NULL). Only
 * the slots a family names optional may be absent. */
static inline bool tpu_tensor_is_absent(const tpu_tensor *t) {
    return t->data == NULL && t->ndim == 0;
}

typedef struct tpu_op {
    tpu_op_code code;
    int32_t fn;          /* the family's function code (tpu_unary_fn, ...) */
    int32_t n_in;        /* number of tensors used in in[] */
    int32_t n_aux;       /* number of further outputs used in aux[] */
    tpu_tensor out;
    tpu_tensor in[TPU_OP_MAX_IN];
    /* Outputs beyond `out`, for families that write several (NORM's
     * statistics and parameter gradients, LOSS's total weight). They obey
     * out's rules: no self-overlap, and no byte shared with any input,
     * with out or with each other. */
    tpu_tensor aux[TPU_OP_MAX_AUX];
    union {
        /* UNARY, BINARY, TERNARY. Each input is converted to `common` as a cast
         * does (the dtype PyTorch computes in: TensorIterator's common
         * dtype), then to its compute type: f32 for f32/f16/bf16, f64 for
         * f64, wrapping i64 for integers, bool for bool. The result is
         * rounded to `common` (or is a bool, for -> bool functions), then
         * converted to out.dtype. One exception: with `b_opmath`, BINARY's
         * b (or TERNARY's scalar c) is converted straight to the compute
         * type, unrounded (PyTorch's CPU kernels read a one-element second
         * operand of mul and div, and lerp's scalar weight, that way for
         * f16/bf16). */
        struct {
            tpu_dtype common;
            bool b_opmath;
            tpu_scalar alpha;      /* BINARY ADD, SUB; TERNARY ADDCMUL, ADDCDIV */
            tpu_scalar other;      /* BINARY: b when n_in == 1; TERNARY: c when n_in == 2 */
            tpu_rounding rounding; /* BINARY DIV */
            tpu_scalar args[3];    /* the function's parameters (see its enum) */
        } ew;
        struct {
            tpu_scalar value;
            tpu_scalar step; /* ARANGE */
        } fill;
        /* REDUCE: out has in[0]'s rank; out.sizes[d] == 1 for every dim d
         * with bit d of mask set, == in[0].sizes[d] otherwise. The
         * accumulator follows out.dtype: f64 for float outs, wrapping i64
         * for integer and bool outs (each element converted to it first).
         * MEAN needs a float out. A reduction over zero elements gives 0
         * for SUM and NaN for MEAN (see tpu_reduce_fn). */
        struct {
            uint32_t mask;
            double ord;        /* NORM */
            double correction; /* VAR, STD: subtracted from the count (Bessel's 1 by default) */
        } reduce;
        /* SOFTMAX: the dim, 0 <= dim < in[0].ndim (a 0-d tensor is
         * described as 1-d of size 1). */
        struct {
            int32_t dim;
        } softmax;
        /* MATMUL: in[0] is [M,K], in[1] is [K,N], out and in[2] are
         * [M,N] (in[2] may have zero strides). All operands share a dtype
         * in {f32, f64, f16, bf16}. */
        struct {
            double alpha, beta;
            tpu_precision precision;
        } mm;
        /* RANDOM: counter-based Philox-4x32-10 with key `seed`;
         * the op draws from the stream of counters (block, offset), block
         * = 0, 1, ... in out's row-major element order, so the values do
         * not depend on threads or strides. The host gives each op a fresh
         * offset. Float outputs only, except INTEGERS (any but bool) and
         * BERNOULLI (one uniform per
         * element as UNIFORM draws it; any dtype). */
        struct {
            uint64_t seed, offset;
            double a, b;
            int64_t from;  /* INTEGERS */
            uint64_t span; /* INTEGERS */
        } rand;
        /* COPY TRIL, TRIU. */
        struct {
            int64_t diagonal;
        } tri;
        /* NORM. */
        struct {
            double eps; /* > 0 or == 0; FORWARD only */
        } norm;
        /* INDEX. */
        struct {
            int32_t dim;            /* SELECT, GATHER, SCATTER*: 0 <= dim < rank (0-d as 1-d) */
            int64_t padding_idx;    /* EMBEDDING_BACKWARD; -1: none */
            bool scale_by_freq;     /* EMBEDDING_BACKWARD */
            bool accumulate;        /* ADVANCED_PUT */
            tpu_scalar value;       /* SCATTER_FILL */
            int32_t n_idx;          /* ADVANCED*: index tensors, 1..TPU_OP_MAX_INDICES */
            int64_t idx_sizes[TPU_OP_MAX_INDICES];   /* ADVANCED*: the indexed dims' sizes */
            int64_t idx_strides[TPU_OP_MAX_INDICES]; /* ADVANCED*: and strides (elements) */
        } index;
        /* INDEX HISTC. */
        struct {
            double lo, hi;
        } hist;
        /* SORT: 0 <= dim < rank (0-d as 1-d of size 1). */
        struct {
            int32_t dim;
            bool descending;
            bool right; /* SEARCHSORTED */
        } sort;
        /* WINDOW: kernel, stride, padding and dilation, rows then columns
         * (kernel, stride, dilation >= 1; padding >= 0). */
        struct {
            int64_t kh, kw, sh, sw, ph, pw, dh, dw;
        } window;
        /* SCAN: 0 <= dim < rank (0-d as 1-d of size 1). */
        struct {
            int32_t dim;
        } scan;
        /* LOSS. */
        struct {
            tpu_loss_reduction reduction;
            int64_t ignore_index;
        } loss;
        /* ATTENTION. */
        struct {
            double scale;   /* multiplies q . k (PyTorch's default: 1 / sqrt(E)) */
            bool is_causal; /* hide key j from query i when j > i */
        } attn;
    } p;
    /* Device memory the kernel may use as it likes while the op runs (the
     * partial results of a split reduction): at least
     * tpu_op_scratch_bytes(op) bytes of the op's chip, which the submitter
     * takes from the chip's allocator for the op's stream (stream-ordered:
     * it may free the block right after submitting). NULL and 0 when the
     * op needs none. */
    void *scratch;
    int64_t scratch_nbytes;
    /* Filled by the submitter: a static name for error messages, e.g.
     * "aten::add.out". NULL means "use the function's name". */
    const char *name;
} tpu_op;

/* Interpolation tables for INDEX INTERP and INTERP_BACKWARD: for each
 * output position o of one dim, its taps idx[o, t] (-1: absent) and
 * weights w[o, t], computed as PyTorch's CPU backend computes them
 * (area_pixel_compute_scale and area_pixel_compute_source_index, in
 * PyTorch's opmath type: double for f64 data, float otherwise), to the
 * last bit: where the x86-64 build of PyTorch 2.13 fuses a multiply-add
 * (its kernels are compiled with FMA, the bicubic backward is not), the
 * table fuses the same one. */
typedef enum {
    TPU_INTERP_LINEAR = 0, /* 2 taps: floor(src) and the next one (the same at the edge),
                            * weights 1 - l and l; a dim whose size does not change
                            * gives taps (o, o) and weights (1, 0) */
    TPU_INTERP_CUBIC,      /* 4 taps floor(src) - 1 .. + 2 clamped into the dim, Keys' cubic
                            * convolution weights with A = -0.75 */
    TPU_INTERP_LINEAR_AA,  /* antialiased: the triangle filter widened by the scale when
                            * downsampling, normalised to sum 1 (PIL's and PyTorch's
                            * antialias=True); up to tpu_interp_taps taps, the rest absent */
    TPU_INTERP_CUBIC_AA,   /* likewise with Keys' cubic filter, A = -0.5 */
    TPU_INTERP_COUNT
} tpu_interp_mode;

/* One dim's interpolation. */
typedef struct {
    tpu_interp_mode mode;
    int64_t in_size, out_size; /* >= 1 each */
    bool align_corners;
    double scale;              /* the caller's scale factor (output / input); <= 0 or NaN: none,
                                * the sizes give it */
    tpu_dtype dtype;           /* the data's float dtype: f64 computes in double, the others in
                                * float */
    bool round_weights;        /* round each weight to an f16/bf16 dtype, as the generic
                                * forward kernel of PyTorch's CPU backend stores them (its
                                * channels-last forward and its backward keep them in float) */
    bool backward;             /* the table of PyTorch's backward, whose cubic weights are
                                * rounded differently (see tpu_interp_table) */
} tpu_interp_spec;

/* Taps per output position (T) of spec's table: 2 (LINEAR), 4 (CUBIC), or
 * for the antialiased modes the filter's support, at most in_size. 0 for
 * an invalid spec (mode outside the enum, a size < 1, dtype not float). */
TPU_API int64_t tpu_interp_taps(const tpu_interp_spec *spec);

/* Fills idx [out_size, taps] (row-major) and w [out_size, taps] (double
 * for an f64 spec, else float) with spec's table; taps must be
 * tpu_interp_taps(spec). Every index lies in [-1, in_size), -1 only in
 * the antialiased modes (and only after a row's present taps). Returns
 * TPU_ERR_INVALID_ARG for an invalid spec, NULL arrays or another taps. */
TPU_API tpu_status tpu_interp_table(const tpu_interp_spec *spec, int64_t taps, int64_t *idx,
                                    void *w);

/* Static name of an op family ("binary", ...); "invalid" outside the enum. */
TPU_API const char *tpu_op_name(tpu_op_code code);

/* Static name of function fn of family code ("add", "exp", ...); the
 * family's name for COPY; "invalid" for a pair outside the
 * tables. */
TPU_API const char *tpu_op_fn_name(tpu_op_code code, int32_t fn);

/* True if function fn of the element-wise family `code` (UNARY, BINARY, TERNARY)
 * computes in common dtype dt: what tpu_op_check will accept, so that the
 * glue can refuse a call before it has a record (even one with no
 * elements). False for other families and values outside the enums. */
TPU_API bool tpu_op_fn_takes(tpu_op_code code, int32_t fn, tpu_dtype dt);

/* True if the bytes a checked record gives may depend on its operands'
 * layout, not only on their values: its fast path (taken for dense,
 * alike-laid-out operands) and its reference path round differently
 * within the stated ulps. Today: the UNARY functions computed with vector
 * math (exp, tanh, sigmoid, ...) and the BINARY activation gradients
 * (gelu, gelu_tanh and silu backward) on a float common dtype. The fusion
 * planner keeps such records whole unless every operand is contiguous. */
TPU_API bool tpu_op_layout_sensitive(const tpu_op *op);

/* A record's computation as one flat run over its elements in memory
 * order (tpu_op_span_of): what the fused-mode runner calls on chunks of a
 * few hundred elements, so it carries the work the fast kernel would do
 * per call once, in `state`. */
typedef struct tpu_op_span tpu_op_span;
struct tpu_op_span {
    /* Computes n elements of the run: out points at the first one's
     * output, in[k] at input k's first element (step[k] == 0: the one
     * value every element reads). Never fails. */
    void (*run)(const tpu_op_span *s, char *out, const char *const *in, int64_t n);
    const tpu_op *op;             /* the record (its scalars and dtypes) */
    int32_t n_in;                 /* inputs run reads: the record's n_in */
    int32_t step[3];              /* per input: 1 (laid out like out) or 0 */
    int32_t out_size, in_size[3]; /* element sizes in bytes */
    uint64_t state[12]; /* the family's precomputed state (8-byte aligned) */
};

/* True if a checked record's fast kernel computes it as one flat run
 * (out dense, each input laid out like out or one value broadcast), and
 * then that run in *s: for any offsets [i, i + n) of out's memory,
 * s->run(s, out + i * out_size, {in[k] + i * step[k] * in_size[k]}, n)
 * writes exactly the bytes tpu_op_run writes there, given the same input
 * values. op must outlive s. False (s unspecified) in reference mode and
 * for the records without such a run: the UNARY, BINARY and TERNARY fast
 * paths' flat runs, plain copies and constant fills have one. */
TPU_API bool tpu_op_span_of(const tpu_op *op, tpu_op_span *s);

/* For a checked REDUCE record whose kernel computes each output from its
 * own row alone, in an order fixed by the row (so any block of whole rows,
 * run as a record of its own, gives each row the same bits): the elements
 * of a row; else 0. Today: SUM, MEAN, AMAX and AMIN over trailing dims
 * that are row-major contiguous in an aligned input. The fusion planner
 * runs such reductions on tiles of whole rows. */
TPU_API int64_t tpu_op_row_length(const tpu_op *op);

/* Number of function codes of a family (1 for COPY, whose fn is 0); 0
 * outside the enum. */
TPU_API int32_t tpu_op_fn_count(tpu_op_code code);

/* Checks a record before it is queued: opcode, ranks, sizes, dtypes the
 * kernel supports, data pointers non-null where elements exist, and every
 * element of every tensor inside its storage. Runs on
 * the submitting thread. Returns TPU_OK or an error with a message that
 * names the op and the values. */
TPU_API tpu_status tpu_op_check(const tpu_op *op);

/* How many threads are worth using for this op (>= 1): small ops run on
 * one thread because waking the pool costs more than it saves. */
TPU_API int tpu_op_max_threads(const tpu_op *op);

/* Bytes of scratch (tpu_op.scratch) the op needs; 0 for most ops. Depends
 * only on the record's opcode, shapes, dtypes and alignment, never on the
 * thread count or the kernel mode. 0 for a malformed record. */
TPU_API int64_t tpu_op_scratch_bytes(const tpu_op *op);

/* Number of phases of the op (>= 1). The shares of phase p + 1 start only
 * after every share of phase p has returned: a reduction split into fixed
 * chunks adds the chunks in phase 0 and combines them, in a fixed order,
 * in phase 1, so its result does not depend on the thread count. Depends
 * only on the record, as tpu_op_scratch_bytes. */
TPU_API int tpu_op_phases(const tpu_op *op);

/* Runs share `ith` of `nth` of phase `phase` of a checked op. The kernel
 * splits its own work deterministically from (ith, nth); shares never
 * write the same bytes. Returns TPU_OK or a kernel-side error (e.g.
 * TPU_ERR_DIV_BY_ZERO) with a message. Thread-safe for distinct ith.
 * TPU_ERR_INVALID_ARG for a phase outside [0, tpu_op_phases(op)). */
TPU_API tpu_status tpu_op_run_phase(const tpu_op *op, int phase, int ith, int nth);

/* tpu_op_run_phase(op, 0, ith, nth): the whole op for single-phase ops. */
TPU_API tpu_status tpu_op_run(const tpu_op *op, int ith, int nth);

/* tpu_op_run_phase, with `claims` shared by the nth shares of this run:
 * the caller sets *claims to 0 before any of them starts and runs them
 * at the same time. A kernel that divides its work into units (the
 * packed matrix product) lets each share take the next unit with an
 * atomic add on *claims until none is left, so a share on a slower core
 * takes fewer units instead of holding up the run; other kernels take
 * their fixed part. The bytes are tpu_op_run_phase's whoever takes what. */
TPU_API tpu_status tpu_op_run_phase_claimed(const tpu_op *op, int phase, int ith, int nth,
                                            int64_t *claims);

/* Where a matrix product reports the blocks of its out it has finished:
 * fused mode runs a matmul's element-wise epilogue (bias, activation) on
 * each block while it is still in cache. run is called on the share's
 * thread with that share's ith. */
typedef struct tpu_op_block_hook tpu_op_block_hook;
struct tpu_op_block_hook {
    void (*run)(const tpu_op_block_hook *h, int ith, int64_t i0, int64_t mb, int64_t j0,
                int64_t nb);
    void *ctx;
};

/* Runs share `ith` of `nth` of a checked MATMUL record exactly as
 * tpu_op_run does (the same bytes), and calls hook->run(hook, ith, i0,
 * mb, j0, nb) for blocks of out, rows [i0, i0 + mb) x columns [j0, j0 +
 * nb) with mb, nb >= 1: every element of the share's part of out lies in
 * exactly one block, and each block is reported once all of its elements
 * hold their final values, before the share returns. Blocks of different
 * shares never meet. TPU_ERR_INVALID_ARG for another family or a NULL
 * hook. */
TPU_API tpu_status tpu_op_run_blocks(const tpu_op *op, int ith, int nth,
                                     const tpu_op_block_hook *hook);

/* tpu_op_run_blocks with units of work claimed from *claims as in
 * tpu_op_run_phase_claimed: a share's part of out is the units it took. */
TPU_API tpu_status tpu_op_run_blocks_claimed(const tpu_op *op, int ith, int nth,
                                             const tpu_op_block_hook *hook, int64_t *claims);

/* Instruction-set levels of the fast kernel variants, lowest first. Every
 * fast path has a portable C variant; AVX2 variants need avx2 and fma;
 * AVX-512 ones (vector math, the GEMM micro-kernel and what runs on it,
 * attention) need avx512f, bw and vl. A kernel without an AVX-512
 * variant runs its AVX2 one at that level. */
typedef enum {
    TPU_ISA_PORTABLE = 0,
    TPU_ISA_AVX2,
    TPU_ISA_AVX512,
    TPU_ISA_COUNT
} tpu_isa;

/* The best level this CPU supports, probed once (cpuid) at first use. */
TPU_API tpu_isa tpu_kernels_best_isa(void);

/* Caps the fast variants at `isa`; a level above the CPU's best runs as the
 * best. The initial cap comes from TORCH_TPU_ISA (portable, avx2, avx512),
 * else none. TPU_ERR_INVALID_ARG for a value outside the enum. */
TPU_API tpu_status tpu_kernels_set_isa(tpu_isa isa);

/* The level the fast variants run at now: min(cap, best). */
TPU_API tpu_isa tpu_kernels_get_isa(void);

/* "portable", "avx2", "avx512"; "invalid" outside the enum. */
TPU_API const char *tpu_isa_name(tpu_isa isa);

/* The level named `name` (as tpu_isa_name gives it, case-insensitive).
 * TPU_ERR_INVALID_ARG for any other name. */
TPU_API tpu_status tpu_isa_from_name(const char *name, tpu_isa *out);

/* Forces the plain reference kernels (true) or lets fast paths be chosen
 * (false). The initial value comes from TORCH_TPU_REFERENCE=1. */
TPU_API void tpu_kernels_set_reference(bool on);
TPU_API bool tpu_kernels_get_reference(void);

#ifdef __cplusplus
}
#endif

#endif
