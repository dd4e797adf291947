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

/* The one op enum. Every table indexed by it (names, kernels, checks,
 * costs) carries a static_assert on TPU_OP_COUNT. */
typedef enum {
    TPU_OP_COPY = 0, /* out = (out.dtype) in[0]; same sizes; any dtype pair */
    TPU_OP_COPY_H2D, /* COPY whose in[0] is host memory: a transfer to the chip */
    TPU_OP_COPY_D2H, /* COPY whose out is host memory: a transfer from the chip */
    TPU_OP_FILL,     /* out = p.fill.value */
    TPU_OP_ADD,      /* out = in[0] + alpha * b */
    TPU_OP_SUB,      /* out = in[0] - alpha * b */
    TPU_OP_MUL,      /* out = in[0] * b */
    TPU_OP_DIV,      /* out = in[0] / b, rounded per p.arith.rounding */
    TPU_OP_SUM,      /* out = sum of in[0] over the dims in p.reduce.mask */
    TPU_OP_MEAN,     /* out = mean of in[0] over the dims in p.reduce.mask */
    TPU_OP_MM,       /* out[M,N] = in[0][M,K] @ in[1][K,N] */
    TPU_OP_ADDMM,    /* out[M,N] = beta * in[2] + alpha * (in[0] @ in[1]) */
    TPU_OP_UNIFORM,  /* out ~ U[p.rand.a, p.rand.b) */
    TPU_OP_NORMAL,   /* out ~ N(mean p.rand.a, std p.rand.b) */
    TPU_OP_COUNT
} tpu_op_code;

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

typedef struct tpu_op {
    tpu_op_code code;
    int32_t n_in;        /* number of tensors used in in[] */
    tpu_tensor out;
    tpu_tensor in[3];
    union {
        /* ADD, SUB, MUL, DIV. The second operand b is in[1] when n_in == 2,
         * else the scalar `other`. Compute type: f32 for f32/f16/bf16
         * outputs, f64 for f64, i64 for integer outputs, bool for bool
         * (ADD = or, MUL = and). Inputs are converted to the compute type
         * on load; the result is rounded once to out.dtype on store. */
        struct {
            tpu_scalar alpha;   /* ADD, SUB only */
            tpu_scalar other;   /* b when n_in == 1 */
            tpu_rounding rounding; /* DIV only */
        } arith;
        struct {
            tpu_scalar value;
        } fill;
        /* SUM, MEAN: out has in[0]'s rank; out.sizes[d] == 1 for every dim d
         * with bit d of mask set, == in[0].sizes[d] otherwise. The
         * accumulator follows out.dtype: f64 for float outs, wrapping i64
         * for integer and bool outs (each element converted to it first).
         * MEAN needs a float out. A reduction over zero elements gives 0
         * for SUM and NaN for MEAN. */
        struct {
            uint32_t mask;
        } reduce;
        /* MM, ADDMM: in[0] is [M,K], in[1] is [K,N], out and in[2] are
         * [M,N] (in[2] may have zero strides). All operands share a dtype
         * in {f32, f64, f16, bf16}. */
        struct {
            double alpha, beta;
            tpu_precision precision;
        } mm;
        /* UNIFORM, NORMAL: counter-based Philox-4x32-10 with key `seed`;
         * the op draws from the stream of counters (block, offset), block
         * = 0, 1, ... in out's row-major element order, so the values do
         * not depend on threads or strides. The host gives each op a fresh
         * offset. Float outputs only. */
        struct {
            uint64_t seed, offset;
            double a, b;
        } rand;
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
     * "aten::add.out". NULL means "use the opcode's name". */
    const char *name;
} tpu_op;

/* Static name of an opcode ("add", ...); "invalid" outside the enum. */
TPU_API const char *tpu_op_name(tpu_op_code code);

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

/* Instruction-set levels of the fast kernel variants, lowest first. Every
 * fast path has a portable C variant; AVX2 variants need avx2 and fma.
 * No kernel has an AVX-512 variant yet: that level runs the AVX2 ones. */
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
