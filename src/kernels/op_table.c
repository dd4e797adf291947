/* The op table: names of families and their functions, kernel dispatch
 * (reference or fast), and how many threads each op is worth. Every table
 * here is indexed by tpu_op_code (or a family's fn enum) and guarded by a
 * static assert, so a new family or function fails to compile until it is
 * named, given kernels and given a thread policy. */
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gemm.h"
#include "kernels_internal.h"
#include "strided.h"
#include "tpu/op.h"

static const char *const k_op_names[] = {
    [TPU_OP_COPY] = "copy",     [TPU_OP_COPY_H2D] = "copy_h2d", [TPU_OP_COPY_D2H] = "copy_d2h",
    [TPU_OP_FILL] = "fill",     [TPU_OP_UNARY] = "unary",       [TPU_OP_BINARY] = "binary",
    [TPU_OP_TERNARY] = "ternary", [TPU_OP_SOFTMAX] = "softmax",
    [TPU_OP_REDUCE] = "reduce", [TPU_OP_MATMUL] = "matmul",     [TPU_OP_RANDOM] = "random",
    [TPU_OP_NORM] = "norm",     [TPU_OP_INDEX] = "index",       [TPU_OP_LOSS] = "loss",
    [TPU_OP_SCAN] = "scan",     [TPU_OP_SORT] = "sort",         [TPU_OP_WINDOW] = "window",
    [TPU_OP_ATTENTION] = "attention",
};
_Static_assert(sizeof k_op_names / sizeof k_op_names[0] == TPU_OP_COUNT,
               "every tpu_op_code needs a name");

/* Element-wise functions: name, dtypes taken, whether the result is a
 * bool (tpu_k_fn_row in kernels_internal.h). A new function is a row
 * here, a check-free scalar body in its family's kernel file, and a
 * registration in csrc/aten. */
static const tpu_k_fn_row k_unary[] = {
    [TPU_UNARY_NEG] = {"neg", TPU_K_TAKES_NOT_BOOL, false},
    [TPU_UNARY_ABS] = {"abs", TPU_K_TAKES_NOT_BOOL, false},
    [TPU_UNARY_SIGN] = {"sign", TPU_K_TAKES_ANY, false},
    [TPU_UNARY_RECIPROCAL] = {"reciprocal", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_SQRT] = {"sqrt", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_RSQRT] = {"rsqrt", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_EXP] = {"exp", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_EXP2] = {"exp2", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_EXPM1] = {"expm1", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_LOG] = {"log", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_LOG2] = {"log2", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_LOG10] = {"log10", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_LOG1P] = {"log1p", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_SIN] = {"sin", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_COS] = {"cos", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_TAN] = {"tan", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_ASIN] = {"asin", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_ACOS] = {"acos", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_ATAN] = {"atan", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_SINH] = {"sinh", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_COSH] = {"cosh", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_TANH] = {"tanh", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_ASINH] = {"asinh", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_ACOSH] = {"acosh", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_ATANH] = {"atanh", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_ERF] = {"erf", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_ERFC] = {"erfc", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_ERFINV] = {"erfinv", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_FLOOR] = {"floor", TPU_K_TAKES_NOT_BOOL, false},
    [TPU_UNARY_CEIL] = {"ceil", TPU_K_TAKES_NOT_BOOL, false},
    [TPU_UNARY_ROUND] = {"round", TPU_K_TAKES_NOT_BOOL, false},
    [TPU_UNARY_TRUNC] = {"trunc", TPU_K_TAKES_NOT_BOOL, false},
    [TPU_UNARY_FRAC] = {"frac", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_SIGMOID] = {"sigmoid", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_RELU] = {"relu", TPU_K_TAKES_NOT_BOOL, false},
    [TPU_UNARY_GELU] = {"gelu", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_GELU_TANH] = {"gelu_tanh", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_SILU] = {"silu", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_MISH] = {"mish", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_SOFTPLUS] = {"softplus", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_LEAKY_RELU] = {"leaky_relu", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_ELU] = {"elu", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_HARDSWISH] = {"hardswish", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_HARDSIGMOID] = {"hardsigmoid", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_CLAMP] = {"clamp", TPU_K_TAKES_NOT_BOOL, false},
    [TPU_UNARY_NAN_TO_NUM] = {"nan_to_num", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_ISNAN] = {"isnan", TPU_K_TAKES_ANY, true},
    [TPU_UNARY_ISINF] = {"isinf", TPU_K_TAKES_ANY, true},
    [TPU_UNARY_ISPOSINF] = {"isposinf", TPU_K_TAKES_ANY, true},
    [TPU_UNARY_ISNEGINF] = {"isneginf", TPU_K_TAKES_ANY, true},
    [TPU_UNARY_LOGICAL_NOT] = {"logical_not", TPU_K_TAKES_ANY, true},
    [TPU_UNARY_BITWISE_NOT] = {"bitwise_not", TPU_K_TAKES_INT_BOOL, false},
    [TPU_UNARY_SIGNBIT] = {"signbit", TPU_K_TAKES_ANY, true},
    [TPU_UNARY_SINC] = {"sinc", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_LOGIT] = {"logit", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_HARDSHRINK] = {"hardshrink", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_SOFTSHRINK] = {"softshrink", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_ENTR] = {"special_entr", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_LGAMMA] = {"lgamma", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_DIGAMMA] = {"digamma", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_POLYGAMMA] = {"polygamma", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_I0] = {"i0", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_I0E] = {"special_i0e", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_I1] = {"special_i1", TPU_K_TAKES_FLOAT, false},
    [TPU_UNARY_I1E] = {"special_i1e", TPU_K_TAKES_FLOAT, false},
};
_Static_assert(sizeof k_unary / sizeof k_unary[0] == TPU_UNARY_COUNT,
               "every tpu_unary_fn needs a name");

static const tpu_k_fn_row k_binary[] = {
    [TPU_BINARY_ADD] = {"add", TPU_K_TAKES_ANY, false},
    [TPU_BINARY_SUB] = {"sub", TPU_K_TAKES_NOT_BOOL, false},
    [TPU_BINARY_MUL] = {"mul", TPU_K_TAKES_ANY, false},
    [TPU_BINARY_DIV] = {"div", TPU_K_TAKES_NOT_BOOL, false},
    [TPU_BINARY_MAXIMUM] = {"maximum", TPU_K_TAKES_ANY, false},
    [TPU_BINARY_MINIMUM] = {"minimum", TPU_K_TAKES_ANY, false},
    [TPU_BINARY_FMAX] = {"fmax", TPU_K_TAKES_ANY, false},
    [TPU_BINARY_FMIN] = {"fmin", TPU_K_TAKES_ANY, false},
    [TPU_BINARY_POW] = {"pow", TPU_K_TAKES_NOT_BOOL, false},
    [TPU_BINARY_REMAINDER] = {"remainder", TPU_K_TAKES_NOT_BOOL, false},
    [TPU_BINARY_FMOD] = {"fmod", TPU_K_TAKES_NOT_BOOL, false},
    [TPU_BINARY_ATAN2] = {"atan2", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_COPYSIGN] = {"copysign", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_XLOGY] = {"xlogy", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_EQ] = {"eq", TPU_K_TAKES_ANY, true},
    [TPU_BINARY_NE] = {"ne", TPU_K_TAKES_ANY, true},
    [TPU_BINARY_LT] = {"lt", TPU_K_TAKES_ANY, true},
    [TPU_BINARY_LE] = {"le", TPU_K_TAKES_ANY, true},
    [TPU_BINARY_GT] = {"gt", TPU_K_TAKES_ANY, true},
    [TPU_BINARY_GE] = {"ge", TPU_K_TAKES_ANY, true},
    [TPU_BINARY_LOGICAL_AND] = {"logical_and", TPU_K_TAKES_ANY, true},
    [TPU_BINARY_LOGICAL_OR] = {"logical_or", TPU_K_TAKES_ANY, true},
    [TPU_BINARY_LOGICAL_XOR] = {"logical_xor", TPU_K_TAKES_ANY, true},
    [TPU_BINARY_BITWISE_AND] = {"bitwise_and", TPU_K_TAKES_INT_BOOL, false},
    [TPU_BINARY_BITWISE_OR] = {"bitwise_or", TPU_K_TAKES_INT_BOOL, false},
    [TPU_BINARY_BITWISE_XOR] = {"bitwise_xor", TPU_K_TAKES_INT_BOOL, false},
    [TPU_BINARY_LSHIFT] = {"lshift", TPU_K_TAKES_INT, false},
    [TPU_BINARY_RSHIFT] = {"rshift", TPU_K_TAKES_INT, false},
    [TPU_BINARY_HYPOT] = {"hypot", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_XLOG1PY] = {"special_xlog1py", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_HEAVISIDE] = {"heaviside", TPU_K_TAKES_ANY, false},
    [TPU_BINARY_THRESHOLD] = {"threshold", TPU_K_TAKES_NOT_BOOL, false},
    [TPU_BINARY_SIGMOID_BACKWARD] = {"sigmoid_backward", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_TANH_BACKWARD] = {"tanh_backward", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_GELU_BACKWARD] = {"gelu_backward", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_GELU_TANH_BACKWARD] = {"gelu_tanh_backward", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_SILU_BACKWARD] = {"silu_backward", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_MISH_BACKWARD] = {"mish_backward", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_LEAKY_RELU_BACKWARD] = {"leaky_relu_backward", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_HARDSWISH_BACKWARD] = {"hardswish_backward", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_HARDSIGMOID_BACKWARD] = {"hardsigmoid_backward", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_SOFTPLUS_BACKWARD] = {"softplus_backward", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_HARDTANH_BACKWARD] = {"hardtanh_backward", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_SHRINK_BACKWARD] = {"shrink_backward", TPU_K_TAKES_FLOAT, false},
    [TPU_BINARY_LOGIT_BACKWARD] = {"logit_backward", TPU_K_TAKES_FLOAT, false},
};
_Static_assert(sizeof k_binary / sizeof k_binary[0] == TPU_BINARY_COUNT,
               "every tpu_binary_fn needs a name");

static const tpu_k_fn_row k_ternary[] = {
    [TPU_TERNARY_WHERE] = {"where", TPU_K_TAKES_ANY, false},
    [TPU_TERNARY_ADDCMUL] = {"addcmul", TPU_K_TAKES_NOT_BOOL, false},
    [TPU_TERNARY_ADDCDIV] = {"addcdiv", TPU_K_TAKES_FLOAT, false},
    [TPU_TERNARY_LERP] = {"lerp", TPU_K_TAKES_FLOAT, false},
};
_Static_assert(sizeof k_ternary / sizeof k_ternary[0] == TPU_TERNARY_COUNT,
               "every tpu_ternary_fn needs a name");

static const char *const k_fill_names[] = {[TPU_FILL_CONSTANT] = "fill",
                                           [TPU_FILL_ARANGE] = "arange"};
_Static_assert(sizeof k_fill_names / sizeof k_fill_names[0] == TPU_FILL_COUNT,
               "every tpu_fill_fn needs a name");

static const char *const k_copy_names[] = {[TPU_COPY_PLAIN] = "copy", [TPU_COPY_TRIL] = "tril",
                                           [TPU_COPY_TRIU] = "triu"};
_Static_assert(sizeof k_copy_names / sizeof k_copy_names[0] == TPU_COPY_COUNT,
               "every tpu_copy_fn needs a name");

static const char *const k_reduce_names[] = {
    [TPU_REDUCE_SUM] = "sum",       [TPU_REDUCE_MEAN] = "mean",     [TPU_REDUCE_PROD] = "prod",
    [TPU_REDUCE_AMAX] = "amax",     [TPU_REDUCE_AMIN] = "amin",     [TPU_REDUCE_ARGMAX] = "argmax",
    [TPU_REDUCE_ARGMIN] = "argmin", [TPU_REDUCE_ANY] = "any",       [TPU_REDUCE_ALL] = "all",
    [TPU_REDUCE_NORM] = "linalg_vector_norm", [TPU_REDUCE_VAR] = "var", [TPU_REDUCE_STD] = "std"};
_Static_assert(sizeof k_reduce_names / sizeof k_reduce_names[0] == TPU_REDUCE_COUNT,
               "every tpu_reduce_fn needs a name");
static const char *const k_softmax_names[] = {
    [TPU_SOFTMAX_FORWARD] = "softmax", [TPU_SOFTMAX_LOG] = "log_softmax",
    [TPU_SOFTMAX_BACKWARD] = "softmax_backward", [TPU_SOFTMAX_LOG_BACKWARD] = "log_softmax_backward",
    [TPU_SOFTMAX_SAFE] = "safe_softmax"};
_Static_assert(sizeof k_softmax_names / sizeof k_softmax_names[0] == TPU_SOFTMAX_COUNT,
               "every tpu_softmax_fn needs a name");
static const char *const k_matmul_names[] = {[TPU_MATMUL_MM] = "mm", [TPU_MATMUL_ADDMM] = "addmm"};
_Static_assert(sizeof k_matmul_names / sizeof k_matmul_names[0] == TPU_MATMUL_COUNT,
               "every tpu_matmul_fn needs a name");
static const char *const k_random_names[] = {[TPU_RANDOM_UNIFORM] = "uniform",
                                             [TPU_RANDOM_NORMAL] = "normal",
                                             [TPU_RANDOM_BERNOULLI] = "bernoulli",
                                             [TPU_RANDOM_INTEGERS] = "random"};
_Static_assert(sizeof k_random_names / sizeof k_random_names[0] == TPU_RANDOM_COUNT,
               "every tpu_random_fn needs a name");

static const char *const k_norm_names[] = {[TPU_NORM_LAYER_FORWARD] = "native_layer_norm",
                                           [TPU_NORM_LAYER_BACKWARD] = "native_layer_norm_backward"};
_Static_assert(sizeof k_norm_names / sizeof k_norm_names[0] == TPU_NORM_COUNT,
               "every tpu_norm_fn needs a name");
static const char *const k_index_names[] = {[TPU_INDEX_SELECT] = "index_select",
                                            [TPU_INDEX_GATHER] = "gather",
                                            [TPU_INDEX_EMBEDDING_BACKWARD] = "embedding_dense_backward",
                                            [TPU_INDEX_HISTC] = "histc",
                                            [TPU_INDEX_SCATTER] = "scatter",
                                            [TPU_INDEX_SCATTER_ADD] = "scatter_add",
                                            [TPU_INDEX_SCATTER_FILL] = "scatter_fill",
                                            [TPU_INDEX_SCATTER_PROD] = "scatter_prod",
                                            [TPU_INDEX_SCATTER_AMAX] = "scatter_amax",
                                            [TPU_INDEX_SCATTER_AMIN] = "scatter_amin",
                                            [TPU_INDEX_ADVANCED] = "index",
                                            [TPU_INDEX_ADVANCED_PUT] = "index_put",
                                            [TPU_INDEX_NONZERO] = "nonzero",
                                            [TPU_INDEX_INTERP] = "interp",
                                            [TPU_INDEX_INTERP_BACKWARD] = "interp_backward"};
_Static_assert(sizeof k_index_names / sizeof k_index_names[0] == TPU_INDEX_COUNT,
               "every tpu_index_fn needs a name");
static const char *const k_loss_names[] = {[TPU_LOSS_NLL_FORWARD] = "nll_loss_forward",
                                           [TPU_LOSS_NLL_BACKWARD] = "nll_loss_backward"};
_Static_assert(sizeof k_loss_names / sizeof k_loss_names[0] == TPU_LOSS_COUNT,
               "every tpu_loss_fn needs a name");

static const char *const k_scan_names[] = {[TPU_SCAN_CUMSUM] = "cumsum",
                                           [TPU_SCAN_CUMPROD] = "cumprod",
                                           [TPU_SCAN_CUMMAX] = "cummax",
                                           [TPU_SCAN_CUMMIN] = "cummin",
                                           [TPU_SCAN_LOGCUMSUMEXP] = "logcumsumexp"};
_Static_assert(sizeof k_scan_names / sizeof k_scan_names[0] == TPU_SCAN_COUNT,
               "every tpu_scan_fn needs a name");

static const char *const k_sort_names[] = {[TPU_SORT_SORT] = "sort", [TPU_SORT_TOPK] = "topk",
                                           [TPU_SORT_SEARCHSORTED] = "searchsorted"};
_Static_assert(sizeof k_sort_names / sizeof k_sort_names[0] == TPU_SORT_COUNT,
               "every tpu_sort_fn needs a name");

static const char *const k_window_names[] = {[TPU_WINDOW_IM2COL] = "im2col",
                                             [TPU_WINDOW_COL2IM] = "col2im",
                                             [TPU_WINDOW_MAX_POOL] = "max_pool2d",
                                             [TPU_WINDOW_ADAPTIVE_MAX_POOL] = "adaptive_max_pool"};
_Static_assert(sizeof k_window_names / sizeof k_window_names[0] == TPU_WINDOW_COUNT,
               "every tpu_window_fn needs a name");

static const char *const k_attention_names[] = {
    [TPU_ATTENTION_FORWARD] = "scaled_dot_product_attention",
    [TPU_ATTENTION_BACKWARD] = "scaled_dot_product_attention_backward"};
_Static_assert(sizeof k_attention_names / sizeof k_attention_names[0] == TPU_ATTENTION_COUNT,
               "every tpu_attention_fn needs a name");

/* Each family's function names (or rows) and count; neither: the family
 * has one function, 0, named after the family. */
static const struct {
    const char *const *names;
    const tpu_k_fn_row *rows;
    int32_t count;
} k_fns[] = {
    [TPU_OP_COPY] = {k_copy_names, NULL, TPU_COPY_COUNT},
    [TPU_OP_COPY_H2D] = {NULL, NULL, 1},
    [TPU_OP_COPY_D2H] = {NULL, NULL, 1},
    [TPU_OP_FILL] = {k_fill_names, NULL, TPU_FILL_COUNT},
    [TPU_OP_UNARY] = {NULL, k_unary, TPU_UNARY_COUNT},
    [TPU_OP_BINARY] = {NULL, k_binary, TPU_BINARY_COUNT},
    [TPU_OP_TERNARY] = {NULL, k_ternary, TPU_TERNARY_COUNT},
    [TPU_OP_REDUCE] = {k_reduce_names, NULL, TPU_REDUCE_COUNT},
    [TPU_OP_SOFTMAX] = {k_softmax_names, NULL, TPU_SOFTMAX_COUNT},
    [TPU_OP_MATMUL] = {k_matmul_names, NULL, TPU_MATMUL_COUNT},
    [TPU_OP_RANDOM] = {k_random_names, NULL, TPU_RANDOM_COUNT},
    [TPU_OP_NORM] = {k_norm_names, NULL, TPU_NORM_COUNT},
    [TPU_OP_INDEX] = {k_index_names, NULL, TPU_INDEX_COUNT},
    [TPU_OP_LOSS] = {k_loss_names, NULL, TPU_LOSS_COUNT},
    [TPU_OP_SCAN] = {k_scan_names, NULL, TPU_SCAN_COUNT},
    [TPU_OP_SORT] = {k_sort_names, NULL, TPU_SORT_COUNT},
    [TPU_OP_WINDOW] = {k_window_names, NULL, TPU_WINDOW_COUNT},
    [TPU_OP_ATTENTION] = {k_attention_names, NULL, TPU_ATTENTION_COUNT},
};
_Static_assert(sizeof k_fns / sizeof k_fns[0] == TPU_OP_COUNT,
               "every tpu_op_code needs its function table");

/* Reference and fast kernel of each family (same signature, same results),
 * and for families whose ops may run in several phases (tpu_op_phases),
 * the phase count, the scratch they need and the kernel of every phase
 * (NULL: one phase, no scratch, ref or fast). Families with flat runs
 * (tpu_op_span_of) name them in `span`: in fast mode a record that has
 * one runs it; then, for families with row runs (`row_span`), a record
 * whose dtypes they take runs by rows (run_rows); only the others go to
 * `fast`. */
static const struct {
    tpu_k_kernel ref, fast;
    int (*phases)(const tpu_op *op);
    int64_t (*scratch_bytes)(const tpu_op *op);
    tpu_k_phase_kernel run_phase;
    bool (*span)(const tpu_op *op, tpu_op_span *s);
    bool (*row_span)(const tpu_op *op, tpu_op_span *s); /* run_rows */
} k_kernels[] = {
    [TPU_OP_COPY] = {tpu_k_copy_ref, tpu_k_copy_fast, .span = tpu_k_copy_span},
    [TPU_OP_COPY_H2D] = {tpu_k_copy_ref, tpu_k_copy_fast, .span = tpu_k_copy_span},
    [TPU_OP_COPY_D2H] = {tpu_k_copy_ref, tpu_k_copy_fast, .span = tpu_k_copy_span},
    [TPU_OP_FILL] = {tpu_k_fill_ref, tpu_k_fill_fast, .span = tpu_k_fill_span},
    [TPU_OP_UNARY] = {tpu_k_unary_ref, tpu_k_unary_ref, .span = tpu_k_unary_span},
    [TPU_OP_BINARY] = {tpu_k_binary_ref, tpu_k_binary_ref, .span = tpu_k_binary_span,
                       .row_span = tpu_k_binary_row_span},
    [TPU_OP_TERNARY] = {tpu_k_ternary_ref, tpu_k_ternary_ref, .span = tpu_k_ternary_span,
                        .row_span = tpu_k_ternary_row_span},
    [TPU_OP_REDUCE] = {tpu_k_reduce_ref, tpu_k_reduce_fast, tpu_k_reduce_phases,
                       tpu_k_reduce_scratch_bytes, tpu_k_reduce_split},
    [TPU_OP_SOFTMAX] = {tpu_k_softmax_ref, tpu_k_softmax_fast},
    [TPU_OP_MATMUL] = {tpu_k_mm_ref, tpu_k_mm_fast},
    [TPU_OP_RANDOM] = {tpu_k_random_ref, tpu_k_random_fast},
    [TPU_OP_NORM] = {tpu_k_norm_ref, tpu_k_norm_fast, tpu_k_norm_phases, tpu_k_norm_scratch_bytes,
                     tpu_k_norm_run_phase},
    [TPU_OP_INDEX] = {tpu_k_index_ref, tpu_k_index_fast, NULL, tpu_k_index_scratch_bytes, NULL},
    [TPU_OP_LOSS] = {tpu_k_loss_ref, tpu_k_loss_ref},
    [TPU_OP_SCAN] = {tpu_k_scan_ref, tpu_k_scan_fast},
    [TPU_OP_SORT] = {tpu_k_sort_ref, tpu_k_sort_fast, NULL, tpu_k_sort_scratch_bytes, NULL},
    [TPU_OP_WINDOW] = {tpu_k_window_ref, tpu_k_window_fast},
    [TPU_OP_ATTENTION] = {tpu_k_attention_ref, tpu_k_attention_fast, tpu_k_attention_phases,
                          tpu_k_attention_scratch_bytes, tpu_k_attention_run_phase},
};
_Static_assert(sizeof k_kernels / sizeof k_kernels[0] == TPU_OP_COUNT,
               "every tpu_op_code needs kernels");

/* How an op's work grows, for the thread policy. */
typedef enum {
    WORK_ELEMENTS, /* one unit per output element */
    WORK_REDUCE,   /* input elements, split over output elements */
    WORK_GEMM,     /* M*N*K multiply-adds, split over rows or columns */
    WORK_ROWS,     /* input elements, split over the rows along one dim */
    WORK_NORM,     /* input elements, split over rows (or, in phase 1, columns) */
    WORK_ATTENTION, /* B H L S (E + Ev) multiply-adds, split over blocks of rows */
    WORK_ONE,      /* small: one thread */
} work_kind;

static const work_kind k_work[] = {
    [TPU_OP_COPY] = WORK_ELEMENTS,  [TPU_OP_COPY_H2D] = WORK_ELEMENTS,
    [TPU_OP_COPY_D2H] = WORK_ELEMENTS, [TPU_OP_FILL] = WORK_ELEMENTS,
    [TPU_OP_UNARY] = WORK_ELEMENTS, [TPU_OP_BINARY] = WORK_ELEMENTS,
    [TPU_OP_TERNARY] = WORK_ELEMENTS,
    [TPU_OP_REDUCE] = WORK_REDUCE,  [TPU_OP_MATMUL] = WORK_GEMM,
    [TPU_OP_SOFTMAX] = WORK_ROWS,
    [TPU_OP_RANDOM] = WORK_ELEMENTS,
    [TPU_OP_NORM] = WORK_NORM, [TPU_OP_INDEX] = WORK_ELEMENTS, [TPU_OP_LOSS] = WORK_ONE,
    [TPU_OP_SCAN] = WORK_ROWS,     [TPU_OP_SORT] = WORK_ROWS,
    [TPU_OP_WINDOW] = WORK_ELEMENTS, [TPU_OP_ATTENTION] = WORK_ATTENTION,
};
_Static_assert(sizeof k_work / sizeof k_work[0] == TPU_OP_COUNT,
               "every tpu_op_code needs a thread policy");

/* Below this many elements (or GEMM multiply-adds) one thread is faster
 * than waking the pool; above it, each thread gets at least this much. */
enum { ELEMENTS_PER_THREAD = 32768 };
#define GEMM_MACS_PER_THREAD (1 << 21)
/* No op asks for more threads than this (the pool clamps further). */
enum { MAX_THREADS = 1024 };

static bool op_code_valid(int code) {
    return (unsigned)code < (unsigned)TPU_OP_COUNT;
}

const char *tpu_op_name(tpu_op_code code) {
    return op_code_valid(code) ? k_op_names[code] : "invalid";
}

int32_t tpu_op_fn_count(tpu_op_code code) {
    return op_code_valid(code) ? k_fns[code].count : 0;
}

const char *tpu_op_fn_name(tpu_op_code code, int32_t fn) {
    if (!op_code_valid(code) || fn < 0 || fn >= k_fns[code].count)
        return "invalid";
    if (k_fns[code].rows)
        return k_fns[code].rows[fn].name;
    return k_fns[code].names ? k_fns[code].names[fn] : k_op_names[code];
}

bool tpu_k_takes_dtype(tpu_k_takes takes, tpu_dtype dt) {
    bool is_float = tpu_dtype_is_float(dt), is_bool = dt == TPU_DTYPE_BOOL;
    switch (takes) {
    case TPU_K_TAKES_FLOAT: return is_float;
    case TPU_K_TAKES_NOT_BOOL: return !is_bool;
    case TPU_K_TAKES_ANY: return true;
    case TPU_K_TAKES_INT_BOOL: return !is_float;
    case TPU_K_TAKES_INT: return !is_float && !is_bool;
    }
    return false;
}

bool tpu_op_fn_takes(tpu_op_code code, int32_t fn, tpu_dtype dt) {
    if (!op_code_valid(code) || fn < 0 || fn >= k_fns[code].count || k_fns[code].rows == NULL ||
        (unsigned)dt >= (unsigned)TPU_DTYPE_COUNT)
        return false;
    return tpu_k_takes_dtype(k_fns[code].rows[fn].takes, dt);
}

const tpu_k_fn_row *tpu_k_fn_row_of(const tpu_op *op) {
    if (!op_code_valid(op->code) || op->fn < 0 || op->fn >= k_fns[op->code].count)
        return NULL;
    return k_fns[op->code].rows ? &k_fns[op->code].rows[op->fn] : NULL;
}

const char *tpu_k_op_label(const tpu_op *op) {
    return op->name ? op->name : tpu_op_fn_name(op->code, op->fn);
}

/* Clamps a wanted thread count to [1, MAX_THREADS]. */
static int clamp_threads(int64_t want) {
    if (want < 1)
        return 1;
    return want > MAX_THREADS ? MAX_THREADS : (int)want;
}

int tpu_op_max_threads(const tpu_op *op) {
    if (op == NULL || !op_code_valid(op->code))
        return 1;
    switch (k_work[op->code]) {
    case WORK_ELEMENTS: {
        int64_t n = tpu_k_numel(&op->out);
        /* Adaptive pooling reads every input element once whatever its
         * output count: its work is the input's size. */
        if (op->code == TPU_OP_WINDOW && op->fn == TPU_WINDOW_ADAPTIVE_MAX_POOL) {
            int64_t n_in = tpu_k_numel(&op->in[0]);
            n = n > 0 && n_in > n ? n_in : n;
        }
        return n < ELEMENTS_PER_THREAD ? 1 : clamp_threads(n / ELEMENTS_PER_THREAD);
    }
    case WORK_REDUCE: {
        /* Each output value (or, split, each chunk of one) is summed by
         * one thread, so no more threads than outputs (or chunks). */
        int64_t n_in = tpu_k_numel(&op->in[0]), n_out = tpu_k_numel(&op->out);
        int64_t chunks = tpu_k_reduce_split_chunks(op);
        int64_t units = chunks > 0 ? n_out * chunks : n_out;
        int64_t want = n_in / ELEMENTS_PER_THREAD;
        return clamp_threads(want < units ? want : units);
    }
    case WORK_ROWS: {
        /* One thread per row at most: each row is computed by one share. */
        int64_t n = tpu_k_numel(&op->in[0]);
        int32_t dim = op->code == TPU_OP_SCAN   ? op->p.scan.dim
                      : op->code == TPU_OP_SORT ? op->p.sort.dim
                                                : op->p.softmax.dim;
        int64_t len = op->in[0].ndim ? op->in[0].sizes[dim] : 1;
        int64_t rows = len > 0 ? n / len : 0;
        int64_t want = n / ELEMENTS_PER_THREAD;
        return clamp_threads(want < rows ? want : rows);
    }
    case WORK_NORM: {
        /* x is in[0] forward and in[1] backward; each share takes whole rows. */
        const tpu_tensor *x = &op->in[op->fn == TPU_NORM_LAYER_BACKWARD ? 1 : 0];
        int64_t n = tpu_k_numel(x), rows = x->ndim == 2 ? x->sizes[0] : 1;
        int64_t want = n / ELEMENTS_PER_THREAD;
        return clamp_threads(want < rows ? want : rows);
    }
    case WORK_ATTENTION: {
        /* Shares take blocks of query rows (and, in the backward's phase
         * 1, chunks of keys: at least one per (batch, kv head)): no more
         * threads than the larger count. q is in[0] forward, in[1]
         * backward; k follows it. Counted in double, as for GEMM. */
        const bool fwd = op->fn == TPU_ATTENTION_FORWARD;
        const tpu_tensor *q = &op->in[fwd ? 0 : 1], *k = &op->in[fwd ? 1 : 2];
        const tpu_tensor *v = &op->in[fwd ? 2 : 3];
        if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
            return 1;
        const double qblocks = (double)q->sizes[0] * (double)q->sizes[1] *
                               ceil((double)q->sizes[2] / TPU_K_ATTN_QBLOCK);
        const double kblocks = (double)k->sizes[0] * (double)k->sizes[1] *
                               fmin(ceil((double)k->sizes[2] / TPU_K_ATTN_KBLOCK),
                                    TPU_K_ATTN_MAX_CHUNKS);
        const double units = fwd || qblocks > kblocks ? qblocks : kblocks;
        const double macs = (double)q->sizes[0] * (double)q->sizes[1] * (double)q->sizes[2] *
                            (double)k->sizes[2] * (double)(q->sizes[3] + v->sizes[3]);
        const double want = macs / GEMM_MACS_PER_THREAD < units ? macs / GEMM_MACS_PER_THREAD
                                                                 : units;
        return clamp_threads(want < MAX_THREADS ? (int64_t)want : MAX_THREADS);
    }
    case WORK_ONE: return 1;
    case WORK_GEMM: {
        /* Threads split the larger of M and N; count in double since
         * M*N*K can exceed int64. */
        int64_t m = op->out.sizes[0], n = op->out.sizes[1], k = op->in[0].sizes[1];
        double macs = (double)m * (double)n * (double)k;
        /* A skinny product (decoding: gemv.c) streams each value of B
         * once from memory, which costs far more than its multiply-add:
         * it splits once B holds 32K values (128 KB of f32, about what
         * waking a pool thread costs to stream). GPT-2's 1x768x2304 used
         * to take one thread, at 9 GB/s. */
        double work = m <= TPU_K_GEMV_MAX_M ? macs * 64 : macs;
        int64_t by_work = (int64_t)(work / GEMM_MACS_PER_THREAD < MAX_THREADS
                                        ? work / GEMM_MACS_PER_THREAD
                                        : MAX_THREADS);
        int64_t by_rows = (m > n ? m : n) / 16; /* at least 16 rows or columns each */
        return clamp_threads(by_work < by_rows ? by_work : by_rows);
    }
    }
    return 1;
}

/* Reference mode: -1 until first read (then from TORCH_TPU_REFERENCE),
 * else 0 or 1. Relaxed atomics suffice: it is a standalone flag that
 * orders nothing else. */
static atomic_int g_reference = -1;

void tpu_kernels_set_reference(bool on) {
    atomic_store_explicit(&g_reference, on ? 1 : 0, memory_order_relaxed);
}

bool tpu_kernels_get_reference(void) {
    int v = atomic_load_explicit(&g_reference, memory_order_relaxed);
    if (v < 0) {
        /* First use without an explicit setting: read the environment. A
         * racing set wins over the environment (compare-exchange). */
        const char *env = getenv("TORCH_TPU_REFERENCE");
        int from_env = env != NULL && strcmp(env, "1") == 0;
        int expected = -1;
        atomic_compare_exchange_strong_explicit(&g_reference, &expected, from_env,
                                                memory_order_relaxed, memory_order_relaxed);
        v = atomic_load_explicit(&g_reference, memory_order_relaxed);
    }
    return v == 1;
}

/* ------------------------------------------------------------ ISA */

static const char *const k_isa_names[] = {
    [TPU_ISA_PORTABLE] = "portable", [TPU_ISA_AVX2] = "avx2", [TPU_ISA_AVX512] = "avx512"};
_Static_assert(sizeof k_isa_names / sizeof k_isa_names[0] == TPU_ISA_COUNT,
               "every tpu_isa needs a name");

/* The cap: -1 until first read (then from TORCH_TPU_ISA, else the top
 * level). Relaxed like g_reference: a standalone setting. */
static atomic_int g_isa_cap = -1;

const char *tpu_isa_name(tpu_isa isa) {
    return (unsigned)isa < (unsigned)TPU_ISA_COUNT ? k_isa_names[isa] : "invalid";
}

tpu_status tpu_isa_from_name(const char *name, tpu_isa *out) {
    for (int i = 0; name != NULL && out != NULL && i < TPU_ISA_COUNT; i++) {
        if (strcasecmp(name, k_isa_names[i]) == 0) {
            *out = (tpu_isa)i;
            return TPU_OK;
        }
    }
    return tpu_set_error(TPU_ERR_INVALID_ARG,
                         "unknown instruction set '%s' (expected portable, avx2 or avx512)",
                         name ? name : "(null)");
}

tpu_isa tpu_kernels_best_isa(void) {
#if TPU_K_X86
    /* -1 unknown, else the level; probing twice is harmless. */
    static atomic_int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        __builtin_cpu_init();
        v = TPU_ISA_PORTABLE;
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
            v = TPU_ISA_AVX2;
            if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl"))
                v = TPU_ISA_AVX512;
        }
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return (tpu_isa)v;
#else
    return TPU_ISA_PORTABLE;
#endif
}

tpu_status tpu_kernels_set_isa(tpu_isa isa) {
    if ((unsigned)isa >= (unsigned)TPU_ISA_COUNT)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_kernels_set_isa: invalid level %d", (int)isa);
    atomic_store_explicit(&g_isa_cap, (int)isa, memory_order_relaxed);
    return TPU_OK;
}

tpu_isa tpu_kernels_get_isa(void) {
    int cap = atomic_load_explicit(&g_isa_cap, memory_order_relaxed);
    if (cap < 0) {
        /* First use without an explicit setting: the environment, else no
         * cap. A racing set wins (compare-exchange). A malformed value is
         * refused by tpu_runtime_init; here it just means no cap. */
        tpu_isa from_env = TPU_ISA_COUNT - 1;
        const char *env = getenv("TORCH_TPU_ISA");
        if (env && tpu_isa_from_name(env, &from_env) != TPU_OK) {
            tpu_clear_error();
            from_env = TPU_ISA_COUNT - 1;
        }
        int expected = -1;
        atomic_compare_exchange_strong_explicit(&g_isa_cap, &expected, (int)from_env,
                                                memory_order_relaxed, memory_order_relaxed);
        cap = atomic_load_explicit(&g_isa_cap, memory_order_relaxed);
    }
    tpu_isa best = tpu_kernels_best_isa();
    return cap < (int)best ? (tpu_isa)cap : best;
}

bool tpu_k_cpu_has_avx2_fma(void) {
    return tpu_kernels_get_isa() >= TPU_ISA_AVX2;
}

bool tpu_k_cpu_has_avx512(void) {
    return tpu_kernels_get_isa() >= TPU_ISA_AVX512;
}

int64_t tpu_op_scratch_bytes(const tpu_op *op) {
    if (op == NULL || !op_code_valid(op->code) || k_kernels[op->code].scratch_bytes == NULL)
        return 0;
    return k_kernels[op->code].scratch_bytes(op);
}

/* Copies n elements of size es at src, step elements apart, to dst. */
static void gather_run(char *dst, const char *src, int64_t step, int64_t n, size_t es) {
    const int64_t bs = step * (int64_t)es;
    switch (es) {
    case 1: for (int64_t j = 0; j < n; j++) memcpy(dst + j, src + j * bs, 1); break;
    case 2: for (int64_t j = 0; j < n; j++) memcpy(dst + j * 2, src + j * bs, 2); break;
    case 4: for (int64_t j = 0; j < n; j++) memcpy(dst + j * 4, src + j * bs, 4); break;
    default: for (int64_t j = 0; j < n; j++) memcpy(dst + j * 8, src + j * bs, 8); break;
    }
}

/* What run_rows hands each row: the record, its row run, and per input
 * the step along the row and whether it is gathered. */
typedef struct {
    const tpu_op *op;
    const tpu_op_span *s;
    int64_t inner[3];
    bool gather[3], any_gather;
} row_walk;

/* Computes `run` elements of one row whose first element is at element
 * offsets off[0] (out) and off[1 + k] (input k): in place, or, with an
 * input to gather, in chunks of TPU_K_EW_CHUNK. */
static void row_run(const row_walk *w, const int64_t *off, int64_t run) {
    _Alignas(64) char buf[3][TPU_K_EW_CHUNK * 8];
    const tpu_op *op = w->op;
    char *po = tpu_k_ptr(&op->out, off[0]);
    for (int64_t at = 0, len; at < run; at += len) {
        len = w->any_gather && run - at > TPU_K_EW_CHUNK ? TPU_K_EW_CHUNK : run - at;
        const char *in[3] = {NULL, NULL, NULL};
        for (int k = 0; k < op->n_in; k++) {
            const char *p = tpu_k_ptr(&op->in[k], off[1 + k] + at * w->inner[k]);
            if (w->gather[k]) {
                gather_run(buf[k], p, w->inner[k], len, (size_t)w->s->in_size[k]);
                p = buf[k];
            }
            in[k] = p;
        }
        w->s->run(w->s, po + at * w->s->out_size, in, len);
    }
}

/* Share ith of nth of an element-wise record with no flat run, by rows of
 * its coalesced shape (a row or column broadcast, a transposed operand, a
 * strided view): out must be contiguous along the last dim; an input read
 * there at step 0 or 1 is passed in place, any other is gathered chunk by
 * chunk into a buffer (the rows of a transposed operand stay in cache
 * from one row to the next). The row run computes each element as the
 * flat run does, so the bytes are the same. False, having done nothing,
 * if the family has no row run for op. */
static bool run_rows(const tpu_op *op, int ith, int nth) {
    tpu_op_span s;
    if (k_kernels[op->code].row_span == NULL || op->n_in < 1 || op->n_in > 3 ||
        !k_kernels[op->code].row_span(op, &s))
        return false;
    const tpu_tensor *o = &op->out;
    const int n_in = op->n_in;
    const int64_t *strides[4] = {o->strides, NULL, NULL, NULL};
    for (int k = 0; k < n_in; k++)
        strides[1 + k] = op->in[k].strides;
    tpu_k_shape sh;
    tpu_k_shape_coalesce(&sh, o->ndim, o->sizes, 1 + n_in, strides);
    const int32_t last = sh.ndim - 1;
    if (last < 0 || sh.strides[0][last] != 1)
        return false;
    int64_t inner[3] = {0, 0, 0};
    bool gather[3] = {false, false, false}, any_gather = false;
    for (int k = 0; k < n_in; k++) {
        inner[k] = sh.strides[1 + k][last];
        gather[k] = inner[k] != 0 && inner[k] != 1;
        any_gather = any_gather || gather[k];
        s.step[k] = gather[k] ? 1 : (int32_t)inner[k];
    }
    int64_t start, end;
    tpu_k_split(tpu_k_numel(o), ith, nth, &start, &end);
    if (start >= end)
        return true;
    row_walk w = {op, &s, {inner[0], inner[1], inner[2]}, {gather[0], gather[1], gather[2]}, any_gather};
    if (sh.ndim <= 2) {
        /* One or two dims (most broadcasts coalesce to [rows, cols]): the
         * rows by their strides, without the iterator's calls per row. */
        const int64_t cols = sh.sizes[last];
        for (int64_t i = start; i < end;) {
            const int64_t r = i / cols, c = i % cols;
            const int64_t run = end - i < cols - c ? end - i : cols - c;
            int64_t off[4];
            for (int k = 0; k <= n_in; k++)
                off[k] = (last > 0 ? r * sh.strides[k][0] : 0) + c * sh.strides[k][last];
            row_run(&w, off, run);
            i += run;
        }
        return true;
    }
    const int64_t *cs[4] = {sh.strides[0], sh.strides[1], sh.strides[2], sh.strides[3]};
    tpu_k_iter it;
    tpu_k_iter_init(&it, sh.ndim, sh.sizes, 1 + n_in, cs, start);
    for (int64_t i = start; i < end;) {
        int64_t run = tpu_k_iter_row_left(&it);
        if (run > end - i)
            run = end - i;
        row_run(&w, it.off, run);
        tpu_k_iter_advance_in_row(&it, run);
        i += run;
    }
    return true;
}

bool tpu_k_span_flat_steps(const tpu_op *op, tpu_op_span *s) {
    if (!tpu_k_is_dense(&op->out))
        return false;
    for (int k = 0; k < op->n_in; k++) {
        int64_t step;
        if (!tpu_k_flat_step(&op->in[k], &op->out, &step))
            return false;
        s->step[k] = (int32_t)step;
    }
    return true;
}

int tpu_op_phases(const tpu_op *op) {
    if (op == NULL || !op_code_valid(op->code) || k_kernels[op->code].phases == NULL)
        return 1;
    return k_kernels[op->code].phases(op);
}

tpu_status tpu_op_run_phase(const tpu_op *op, int phase, int ith, int nth) {
    /* The record itself was checked at submit; guard only what indexing
     * the table and splitting the work rely on. */
    if (op == NULL)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_op_run: op is NULL");
    if (!op_code_valid(op->code) || op->fn < 0 || op->fn >= k_fns[op->code].count)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_op_run: invalid opcode %d, function %d",
                             (int)op->code, (int)op->fn);
    if (nth < 1 || ith < 0 || ith >= nth)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: share ith=%d of nth=%d is out of range",
                             tpu_k_op_label(op), ith, nth);
    int phases = tpu_op_phases(op);
    if (phase < 0 || phase >= phases)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: phase %d is out of range (the op has %d)",
                             tpu_k_op_label(op), phase, phases);
    if (phases > 1)
        return k_kernels[op->code].run_phase(op, phase, ith, nth);
    if (tpu_kernels_get_reference())
        return k_kernels[op->code].ref(op, ith, nth);
    tpu_op_span span;
    if (k_kernels[op->code].span && op->n_in <= 3 && k_kernels[op->code].span(op, &span)) {
        tpu_k_span_share(&span, ith, nth);
        return TPU_OK;
    }
    if (run_rows(op, ith, nth))
        return TPU_OK;
    return k_kernels[op->code].fast(op, ith, nth);
}

tpu_status tpu_op_run(const tpu_op *op, int ith, int nth) {
    return tpu_op_run_phase(op, 0, ith, nth);
}

/* The counter of the claimed run this thread is in; saved and restored,
 * so that a kernel that runs an op of its own inside keeps its own. */
static _Thread_local int64_t *t_claims;

int64_t *tpu_k_share_claims(void) {
    return t_claims;
}

void tpu_k_parts_init(tpu_k_parts *p, int64_t n, int64_t granule, int ith, int nth) {
    const int64_t per = 8 * (int64_t)(nth > 1 ? nth : 1), g = granule > 0 ? granule : 1;
    const int64_t chunk = ((n > 0 ? n : 0) + per - 1) / per;
    *p = (tpu_k_parts){n, chunk > g ? (chunk + g - 1) / g * g : g, nth > 1 ? t_claims : NULL, ith,
                       nth, false};
}

bool tpu_k_parts_next(tpu_k_parts *p, int64_t *start, int64_t *end) {
    if (p->claims != NULL) {
        int64_t s = __atomic_fetch_add(p->claims, p->chunk, __ATOMIC_RELAXED);
        if (s >= p->n)
            return false;
        *start = s;
        *end = p->n - s > p->chunk ? s + p->chunk : p->n;
        return true;
    }
    if (p->done)
        return false;
    p->done = true;
    tpu_k_split(p->n, p->ith, p->nth, start, end);
    return *start < *end;
}

tpu_status tpu_op_run_phase_claimed(const tpu_op *op, int phase, int ith, int nth,
                                    int64_t *claims) {
    int64_t *saved = t_claims;
    t_claims = claims;
    tpu_status st = tpu_op_run_phase(op, phase, ith, nth);
    t_claims = saved;
    return st;
}

tpu_status tpu_op_run_blocks_claimed(const tpu_op *op, int ith, int nth,
                                     const tpu_op_block_hook *hook, int64_t *claims) {
    int64_t *saved = t_claims;
    t_claims = claims;
    tpu_status st = tpu_op_run_blocks(op, ith, nth, hook);
    t_claims = saved;
    return st;
}

tpu_status tpu_op_run_blocks(const tpu_op *op, int ith, int nth, const tpu_op_block_hook *hook) {
    if (op == NULL || hook == NULL || hook->run == NULL)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_op_run_blocks: %s is NULL",
                             op == NULL ? "op" : "hook");
    if (op->code != TPU_OP_MATMUL || op->fn < 0 || op->fn >= k_fns[op->code].count)
        return tpu_set_error(TPU_ERR_INVALID_ARG,
                             "tpu_op_run_blocks: opcode %d, function %d is no matrix product",
                             (int)op->code, (int)op->fn);
    if (nth < 1 || ith < 0 || ith >= nth)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "%s: share ith=%d of nth=%d is out of range",
                             tpu_k_op_label(op), ith, nth);
    return tpu_kernels_get_reference() ? tpu_k_mm_ref_blocks(op, ith, nth, hook)
                                       : tpu_k_mm_fast_blocks(op, ith, nth, hook);
}

bool tpu_op_span_of(const tpu_op *op, tpu_op_span *s) {
    if (op == NULL || s == NULL || tpu_kernels_get_reference() || op->n_in > 3 ||
        !op_code_valid(op->code) || op->fn < 0 || op->fn >= k_fns[op->code].count ||
        k_kernels[op->code].span == NULL || tpu_op_phases(op) != 1)
        return false;
    return k_kernels[op->code].span(op, s);
}

void tpu_k_span_init(tpu_op_span *s, const tpu_op *op,
                     void (*run)(const tpu_op_span *, char *, const char *const *, int64_t)) {
    s->run = run;
    s->op = op;
    s->n_in = op->n_in;
    s->out_size = (int32_t)tpu_dtype_size(op->out.dtype);
    for (int k = 0; k < 3; k++) {
        s->step[k] = 1;
        s->in_size[k] = k < op->n_in ? (int32_t)tpu_dtype_size(op->in[k].dtype) : 0;
    }
}

void tpu_k_span_share(const tpu_op_span *s, int ith, int nth) {
    const tpu_op *op = s->op;
    /* Chunks of multiples of 512 elements: no two shares write one cache
     * line. */
    tpu_k_parts parts;
    tpu_k_parts_init(&parts, tpu_k_numel(&op->out), 512, ith, nth);
    for (int64_t start, end; tpu_k_parts_next(&parts, &start, &end);) {
        const char *in[3] = {NULL, NULL, NULL};
        for (int k = 0; k < s->n_in; k++)
            in[k] = (const char *)op->in[k].data + start * s->step[k] * s->in_size[k];
        s->run(s, (char *)op->out.data + start * s->out_size, in, end - start);
    }
}
