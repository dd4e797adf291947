/* Kernel tests: division by zero (integer error, IEEE floats),
 * tpu_op_check rejecting malformed records, tpu_op_run's own guards and
 * tpu_op_max_threads. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "kernel_test.h"

/* ------------------------------------------------------------ errors */

static tpu_op div_op(tpu_dtype dt, void *out, void *a, void *b, int64_t n) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    t_set_kind(&op, T_DIV);
    op.n_in = 2;
    op.out = (tpu_tensor){.data = out, .sizes = {n}, .strides = {1}, .ndim = 1, .dtype = dt,
                          .storage = out, .storage_nbytes = n * (int64_t)tpu_dtype_size(dt)};
    op.in[0] = op.out;
    op.in[0].data = op.in[0].storage = a;
    op.in[1] = op.out;
    op.in[1].data = op.in[1].storage = b;
    op.p.ew.rounding = TPU_ROUND_TRUNC;
    op.p.ew.common = dt;
    return op;
}

static void test_div_by_zero(void) {
    int32_t a[100], b[100], o[100];
    for (int i = 0; i < 100; i++) {
        a[i] = i - 50;
        b[i] = i == 90 ? 0 : 3;
    }
    tpu_op op = div_op(I32, o, a, b, 100);
    for (int w = 0; w < 4; w++) {
        tpu_kernels_set_reference(w < 2);
        tpu_clear_error();
        CHECK_OK(tpu_op_check(&op)); /* a zero divisor is a kernel-side error */
        CHECK_STATUS(run_shares(&op, w % 2 ? 3 : 1), TPU_ERR_DIV_BY_ZERO);
        CHECK(strcmp(tpu_last_error_message(), "integer division by zero") == 0);
    }
    /* In share 2 of 3 only the last share fails. */
    CHECK_OK(tpu_op_run(&op, 0, 3));
    CHECK_STATUS(tpu_op_run(&op, 2, 3), TPU_ERR_DIV_BY_ZERO);
    op.p.ew.rounding = TPU_ROUND_FLOOR;
    CHECK_STATUS(run_shares(&op, 1), TPU_ERR_DIV_BY_ZERO);
    /* A scalar zero divisor. */
    op.n_in = 1;
    op.p.ew.other = (tpu_scalar){0.0, 0};
    CHECK_STATUS(run_shares(&op, 1), TPU_ERR_DIV_BY_ZERO);
    /* Floats divide by zero the IEEE way. */
    float fa[3] = {1, -1, 0}, fb[3] = {0, 0, 0}, fo[3];
    tpu_op fop = div_op(F32, fo, fa, fb, 3);
    fop.p.ew.rounding = TPU_ROUND_NONE;
    CHECK_OK(run_shares(&fop, 1));
    CHECK(isinf(fo[0]) && fo[0] > 0 && isinf(fo[1]) && fo[1] < 0 && isnan(fo[2]));
}

/* A valid small ADD to mutate. */
static float g_a[64], g_b[64], g_o[64];
static tpu_op base_add(void) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    t_set_kind(&op, T_ADD);
    op.n_in = 2;
    tpu_tensor t = {.data = g_o, .sizes = {2, 3}, .strides = {3, 1}, .ndim = 2, .dtype = F32,
                    .storage = g_o, .storage_nbytes = sizeof g_o};
    op.out = t;
    t.data = t.storage = g_a;
    op.in[0] = t;
    t.data = t.storage = g_b;
    op.in[1] = t;
    op.p.ew.alpha = (tpu_scalar){1.0, 1};
    op.p.ew.common = F32;
    return op;
}

static tpu_op base_mm(t_kind code, int64_t m, int64_t k, int64_t k2, int64_t n) {
    tpu_op op;
    memset(&op, 0, sizeof op);
    t_set_kind(&op, code);
    op.n_in = code == T_ADDMM ? 3 : 2;
    op.out = (tpu_tensor){g_o, {m, n}, {n, 1}, 2, F32, g_o, sizeof g_o};
    op.in[0] = (tpu_tensor){g_a, {m, k}, {k, 1}, 2, F32, g_a, sizeof g_a};
    op.in[1] = (tpu_tensor){g_b, {k2, n}, {n, 1}, 2, F32, g_b, sizeof g_b};
    op.in[2] = op.out;
    return op;
}

static void expect_reject(const tpu_op *op, tpu_status want, const char *part) {
    tpu_clear_error();
    CHECK_STATUS(tpu_op_check(op), want);
    CHECK_CONTAINS(tpu_last_error_message(), part);
}

static void test_check_rejects(void) {
    tpu_op op = base_add();
    CHECK_OK(tpu_op_check(&op));
    expect_reject(NULL, TPU_ERR_INVALID_ARG, "NULL");
    op.code = TPU_OP_COUNT;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "opcode");
    op = base_add();
    op.n_in = 3;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "add: n_in is 3");
    op = base_add();
    op.name = "aten::add.out";
    op.in[1].sizes[1] = 4;
    expect_reject(&op, TPU_ERR_SHAPE, "aten::add.out: in[1] has sizes [2, 4] but out has [2, 3]");
    op = base_add();
    op.out.ndim = 13;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "rank 13");
    op = base_add();
    op.in[0].sizes[0] = -2;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "negative size -2");
    op = base_add();
    op.in[0].data = NULL;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "data is NULL");
    op = base_add();
    op.in[1].dtype = (tpu_dtype)42;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "invalid dtype");
    op = base_add();
    op.out.strides[1] = 0;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "overlap itself");
    op = base_add();
    op.in[0].strides[0] = INT64_MAX / 2;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "strides too large");
    op = base_add();
    op.in[0].sizes[0] = INT64_MAX / 2;
    op.in[0].sizes[1] = 3;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "too many elements");
    op = base_add();
    t_set_kind(&op, T_SUB);
    op.out.dtype = op.in[0].dtype = op.in[1].dtype = op.p.ew.common = BOOL;
    expect_reject(&op, TPU_ERR_UNSUPPORTED_DTYPE, "bool");
    op = base_add();
    t_set_kind(&op, T_DIV);
    op.out.dtype = op.p.ew.common = I32;
    expect_reject(&op, TPU_ERR_UNSUPPORTED_DTYPE, "int32");
    op.p.ew.rounding = (tpu_rounding)9;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "rounding");
    /* Function codes and common dtypes. */
    op = base_add();
    op.fn = TPU_BINARY_COUNT;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "binary has no function");
    op = base_add();
    op.fn = TPU_BINARY_BITWISE_AND; /* integers and bool only */
    expect_reject(&op, TPU_ERR_UNSUPPORTED_DTYPE, "bitwise_and: dtype float32 is not supported");
    op = base_add();
    op.p.ew.common = (tpu_dtype)77;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "common dtype");
    op = base_add();
    op.code = TPU_OP_UNARY;
    op.fn = TPU_UNARY_EXP;
    op.n_in = 1;
    CHECK_OK(tpu_op_check(&op));
    op.p.ew.common = I32; /* exp needs a float common dtype */
    expect_reject(&op, TPU_ERR_UNSUPPORTED_DTYPE, "exp: dtype int32");
    /* Overlap: the same view in place is fine for element-wise ops; a
     * shifted dense view of the same memory is not; interleaved strided
     * views are allowed (PyTorch allows them). */
    op = base_add();
    op.in[0] = op.out;
    CHECK_OK(tpu_op_check(&op));
    op.in[0].data = (float *)op.out.data + 1;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "out overlaps in[0]");
    op = base_add();
    op.out.sizes[1] = op.in[0].sizes[1] = op.in[1].sizes[1] = 1;
    op.in[0] = op.out;
    op.in[0].data = (float *)op.out.data + 1; /* column 1 of the 2x3 out's storage */
    CHECK_OK(tpu_op_check(&op));
    op = base_add();
    t_set_kind(&op, T_SUM);
    op.n_in = 1;
    op.p.reduce.mask = 0;
    op.in[0] = op.out; /* a reduction may not write its own input */
    expect_reject(&op, TPU_ERR_INVALID_ARG, "out overlaps in[0]");
    /* Zero elements need no data. */
    op = base_add();
    op.out.sizes[0] = op.in[0].sizes[0] = op.in[1].sizes[0] = 0;
    op.out.data = op.in[0].data = op.in[1].data = NULL;
    CHECK_OK(tpu_op_check(&op));
    CHECK_OK(run_shares(&op, 3));
    /* Reductions. */
    op = base_add();
    t_set_kind(&op, T_SUM);
    op.n_in = 1;
    op.p.reduce.mask = 4;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "beyond rank 2");
    op.p.reduce.mask = 2;
    expect_reject(&op, TPU_ERR_SHAPE, "mask 0x2");
    op.out.sizes[1] = 1;
    CHECK_OK(tpu_op_check(&op));
    t_set_kind(&op, T_MEAN);
    op.out.dtype = I64;
    expect_reject(&op, TPU_ERR_UNSUPPORTED_DTYPE, "mean");
    /* Matrix products. */
    op = base_mm(T_MM, 3, 4, 5, 2);
    expect_reject(&op, TPU_ERR_SHAPE, "mm: in[0] is 3x4 but in[1] is 5x2 (inner sizes differ)");
    op = base_mm(T_MM, 1, 2, 2, 3);
    CHECK_OK(tpu_op_check(&op));
    op.out.sizes[1] = 2;
    expect_reject(&op, TPU_ERR_SHAPE, "out is 1x2");
    op = base_mm(T_MM, 1, 2, 2, 3);
    op.in[1].dtype = F16;
    expect_reject(&op, TPU_ERR_UNSUPPORTED_DTYPE, "share a dtype");
    op = base_mm(T_MM, 1, 2, 2, 3);
    op.out.dtype = op.in[0].dtype = op.in[1].dtype = I32;
    expect_reject(&op, TPU_ERR_UNSUPPORTED_DTYPE, "int32");
    op = base_mm(T_MM, 1, 2, 2, 3);
    op.in[0].ndim = 3;
    op.in[0].sizes[2] = 1;
    expect_reject(&op, TPU_ERR_SHAPE, "2-d");
    op = base_mm(T_MM, 1, 2, 2, 3);
    op.p.mm.precision = (tpu_precision)7;
    expect_reject(&op, TPU_ERR_INVALID_ARG, "precision");
    op = base_mm(T_ADDMM, 1, 2, 2, 3);
    CHECK_OK(tpu_op_check(&op));
    op.in[2].sizes[0] = 2;
    expect_reject(&op, TPU_ERR_SHAPE, "in[2] is 2x3");
    /* Random. */
    float r[4];
    op = random_op(T_UNIFORM, I32, r, 4, 0, 0, 0, 1);
    expect_reject(&op, TPU_ERR_UNSUPPORTED_DTYPE, "uniform");
    op = random_op(T_UNIFORM, F32, r, 4, 0, 0, 2, 1);
    expect_reject(&op, TPU_ERR_INVALID_ARG, "[2, 1)");
    op = random_op(T_NORMAL, F32, r, 4, 0, 0, 0, -1);
    expect_reject(&op, TPU_ERR_INVALID_ARG, "std -1");
    op = random_op(T_UNIFORM, F32, r, 4, 0, 0, 0, INFINITY);
    expect_reject(&op, TPU_ERR_INVALID_ARG, "finite");
    /* tpu_op_run's own guards. */
    op = base_add();
    CHECK_STATUS(tpu_op_run(&op, 3, 3), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_op_run(&op, 0, 0), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_op_run(NULL, 0, 1), TPU_ERR_INVALID_ARG);
    op.code = (tpu_op_code)-1;
    CHECK_STATUS(tpu_op_run(&op, 0, 1), TPU_ERR_INVALID_ARG);
}

/* Every element of every tensor must lie inside its storage: a view over
 * a storage that was shrunk under it, a view starting before or past its
 * storage, negative strides reaching below it, and a missing storage. */
static void test_storage_bounds(void) {
    tpu_op op = base_add();
    op.out.storage_nbytes = 6 * 4; /* exactly the [2, 3] view: fits */
    CHECK_OK(tpu_op_check(&op));
    op.out.storage_nbytes = 6 * 4 - 1;
    expect_reject(&op, TPU_ERR_OUT_OF_BOUNDS, "out (sizes [2, 3]) needs bytes 0 to 24 of its storage, which has 23 bytes");
    op = base_add();
    op.in[0].data = g_a + 60; /* a view at element 60 of a 64-element storage */
    expect_reject(&op, TPU_ERR_OUT_OF_BOUNDS, "in[0] (sizes [2, 3]) needs bytes 240 to 264");
    op = base_add();
    op.in[1].data = g_b;
    op.in[1].storage = g_b + 1; /* starts before its storage */
    expect_reject(&op, TPU_ERR_OUT_OF_BOUNDS, "in[1] (sizes [2, 3]) starts outside its storage");
    op = base_add();
    op.in[0].data = g_a + 2; /* reversed rows from element 2: reaches element -1 */
    op.in[0].strides[0] = -3;
    expect_reject(&op, TPU_ERR_OUT_OF_BOUNDS, "needs bytes -4 to 20");
    op.in[0].data = g_a + 3; /* from element 3 it fits */
    CHECK_OK(tpu_op_check(&op));
    op = base_add();
    op.in[1].storage = NULL;
    expect_reject(&op, TPU_ERR_OUT_OF_BOUNDS, "no storage bounds");
    /* Zero elements need no storage. */
    op = base_add();
    op.out.sizes[0] = op.in[0].sizes[0] = op.in[1].sizes[0] = 0;
    op.out.storage = op.in[0].storage = op.in[1].storage = NULL;
    CHECK_OK(tpu_op_check(&op));
}

/* ISA levels: names, the cap, and the best level. */
static void test_isa_levels(void) {
    tpu_isa isa = TPU_ISA_COUNT;
    CHECK_OK(tpu_isa_from_name("AVX2", &isa));
    CHECK(isa == TPU_ISA_AVX2 && strcmp(tpu_isa_name(isa), "avx2") == 0);
    CHECK_STATUS(tpu_isa_from_name("sse9", &isa), TPU_ERR_INVALID_ARG);
    CHECK_CONTAINS(tpu_last_error_message(), "sse9");
    CHECK(strcmp(tpu_isa_name((tpu_isa)7), "invalid") == 0);
    CHECK_STATUS(tpu_kernels_set_isa((tpu_isa)7), TPU_ERR_INVALID_ARG);
    tpu_isa best = tpu_kernels_best_isa();
    CHECK_OK(tpu_kernels_set_isa(TPU_ISA_PORTABLE));
    CHECK(tpu_kernels_get_isa() == TPU_ISA_PORTABLE);
    CHECK_OK(tpu_kernels_set_isa(TPU_ISA_AVX512)); /* above the best: runs as the best */
    CHECK(tpu_kernels_get_isa() == best);
}

static void test_max_threads(void) {
    tpu_op op = base_add();
    CHECK(tpu_op_max_threads(&op) == 1);
    CHECK(tpu_op_max_threads(NULL) == 1);
    op.out.sizes[0] = op.in[0].sizes[0] = op.in[1].sizes[0] = 1 << 20;
    CHECK(tpu_op_max_threads(&op) > 1);
    t_set_kind(&op, T_SUM);
    op.n_in = 1;
    op.p.reduce.mask = 3;
    op.out.sizes[0] = op.out.sizes[1] = 1;
    /* One output of a long contiguous run: split into chunks, two phases,
     * scratch for the partials, several threads. */
    CHECK(tpu_op_max_threads(&op) > 1);
    CHECK(tpu_op_phases(&op) == 2);
    CHECK(tpu_op_scratch_bytes(&op) == 48 * (int64_t)sizeof(double)); /* 3 * 2^20 / 2^16 chunks */
    op.in[0].storage_nbytes = (int64_t)1 << 40; /* claimed only: check reads no memory */
    expect_reject(&op, TPU_ERR_INVALID_ARG, "needs 384 bytes of scratch but has 0");
    CHECK_STATUS(tpu_op_run_phase(&op, 2, 0, 1), TPU_ERR_INVALID_ARG);
    op.in[0].strides[0] = 4; /* rows not contiguous: not split, one output, one thread */
    CHECK(tpu_op_max_threads(&op) == 1 && tpu_op_phases(&op) == 1 && tpu_op_scratch_bytes(&op) == 0);
    op = base_mm(T_MM, 16, 16, 16, 16);
    CHECK(tpu_op_max_threads(&op) == 1);
    op = base_mm(T_MM, 1024, 1024, 1024, 1024);
    CHECK(tpu_op_max_threads(&op) > 1);
    /* A skinny product streams B: split by B's size (a decoding step's
     * 1x768x2304 has too few multiply-adds to split as compute), ... */
    op = base_mm(T_MM, 1, 768, 768, 2304);
    CHECK(tpu_op_max_threads(&op) > 1);
    /* ... but not the same work as nine rows, nor a small B. */
    op = base_mm(T_MM, 9, 768, 768, 256);
    CHECK(tpu_op_max_threads(&op) == 1);
    op = base_mm(T_MM, 1, 64, 64, 64);
    CHECK(tpu_op_max_threads(&op) == 1);
}

int main(void) {
    test_div_by_zero();
    test_check_rejects();
    test_storage_bounds();
    test_isa_levels();
    test_max_threads();
    tpu_kernels_set_reference(false);
    return check_report();
}
