/* Private interface between the op table (op_table.c) and the kernel
 * families. Every family has a plain reference kernel and a fast kernel
 * with the same signature; op_table.c picks one per call. A fast kernel
 * handles the layouts and dtypes it is specialised for and hands the rest
 * to its family's reference kernel, so calling it is always correct.
 *
 * Threading contract (for every kernel below): the call computes share
 * `ith` of `nth` (0 <= ith < nth) of an op that passed tpu_op_check.
 * Shares are split deterministically from (ith, nth) alone, never write
 * the same bytes, and every output value is computed by exactly one share
 * in an order that does not depend on nth, so results are bit-identical
 * for any nth. On a kernel-side error the share returns it (after setting
 * the message); the output is then unspecified. */
#ifndef TPU_KERNELS_INTERNAL_H
#define TPU_KERNELS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "tpu/op.h"
#include "tpu/status.h"

/* 1 where the AVX2+FMA variants can be compiled (x86-64 with GCC-style
 * target attributes); they still run only if tpu_k_cpu_has_avx2_fma(). */
#if defined(__x86_64__) && defined(__GNUC__)
#define TPU_K_X86 1
#else
#define TPU_K_X86 0
#endif

/* Blocking sizes of the non-GEMM fast paths, in one place (the GEMM's
 * register and cache blocks are in gemm.c's config table):
 *   EW_CHUNK         f32 staging chunk of element-wise ops on f16/bf16
 *                    (three chunks live on the stack, 3 KiB)
 *   TRANSPOSE_TILE   square tile of the blocked copy (rows and columns):
 *                    a tile of reads and one of writes stay in L1, and
 *                    each page the reads visit gives a quarter page
 *                    (16 gave one line per page: 4096 x 4096 f32 ran at
 *                    half the speed, on TLB misses)
 *   LEADING_CHUNK    columns summed together by a leading-dims reduction
 *                    (their f64 accumulators stay in L1)
 *   LEADING_ROWS     rows added per pass over those accumulators
 *   RANDOM_BATCH     Philox blocks generated before their elements are
 *                    finished (16 bytes each on the stack)
 *   ATTN_QBLOCK      query rows of an attention block: a share unit of
 *                    the forward and of the backward's phases 0 and 2,
 *                    and the lanes of its transposed score blocks
 *   ATTN_KBLOCK      keys per step of an attention block (one online
 *                    softmax step; a score block of QBLOCK x KBLOCK
 *                    f32, 64 KiB, stays in L2)
 *   ATTN_KV_UNITS    share units the backward's key phase aims for: the
 *                    keys of each (batch, kv head) are cut into chunks
 *                    until there are that many (each chunk then writes
 *                    its own part of dq, summed in phase 2) ...
 *   ATTN_MAX_CHUNKS  ... but into no more chunks than this
 *   ATTN_MAX_HEAD    largest E and Ev the tiled attention path takes;
 *                    larger heads run on the reference
 *   INTERP_BLOCK     neighbouring lines an interpolation pass computes
 *                    together (one accumulator each, on the stack) */
enum {
    TPU_K_EW_CHUNK = 256,
    TPU_K_TRANSPOSE_TILE = 64,
    TPU_K_LEADING_CHUNK = 512,
    TPU_K_LEADING_ROWS = 4,
    TPU_K_RANDOM_BATCH = 64,
    TPU_K_ATTN_QBLOCK = 64,
    TPU_K_ATTN_KBLOCK = 256,
    TPU_K_ATTN_KV_UNITS = 16,
    TPU_K_ATTN_MAX_CHUNKS = 8,
    TPU_K_ATTN_MAX_HEAD = 256,
    TPU_K_INTERP_BLOCK = 64,
};

/* The one kernel signature, shared by reference and fast variants. */
typedef tpu_status (*tpu_k_kernel)(const tpu_op *op, int ith, int nth);

/* The kernel of a family whose ops may run in phases: share `ith` of
 * `nth` of phase `phase` (see tpu_op_run_phase). It serves both kernel
 * modes, each phase choosing its own reference or fast path. */
typedef tpu_status (*tpu_k_phase_kernel)(const tpu_op *op, int phase, int ith, int nth);

/* Name for messages: the submitter's name, else the function's. */
const char *tpu_k_op_label(const tpu_op *op);

/* The dtypes an element-wise function takes (its common dtype). */
typedef enum {
    TPU_K_TAKES_FLOAT,    /* f32, f64, f16, bf16 */
    TPU_K_TAKES_NOT_BOOL, /* floats and integers */
    TPU_K_TAKES_ANY,      /* floats, integers and bool */
    TPU_K_TAKES_INT_BOOL, /* integers and bool */
    TPU_K_TAKES_INT,      /* integers only */
} tpu_k_takes;

/* One row of an element-wise family's function table (op_table.c). */
typedef struct {
    const char *name;
    tpu_k_takes takes;
    bool to_bool; /* the result is a bool, whatever the common dtype */
} tpu_k_fn_row;

/* The row of an UNARY or BINARY op's function; NULL for other families
 * or an fn outside the family's table. */
const tpu_k_fn_row *tpu_k_fn_row_of(const tpu_op *op);

/* True if `takes` admits dtype dt. */
bool tpu_k_takes_dtype(tpu_k_takes takes, tpu_dtype dt);

/* True if the AVX2+FMA variants may run: this CPU has them (x86-64 only,
 * probed once, thread-safe) and the ISA cap (tpu_kernels_set_isa, or
 * TORCH_TPU_ISA) allows them. */
bool tpu_k_cpu_has_avx2_fma(void);

/* True if the AVX-512 variants may run: this CPU has AVX-512 F, BW and VL
 * (tpu_kernels_best_isa) and the ISA cap allows them. */
bool tpu_k_cpu_has_avx512(void);

/* Three builds of one always-inline body `name##_body` (portable, AVX2 +
 * FMA, AVX-512), and `public_name`, which runs the best one the ISA cap
 * allows. `linkage` is `static` for a file's own function, empty for an
 * exported one; params and args are parenthesized lists. For loops that
 * the compiler vectorizes by itself once the target allows it. */
#if TPU_K_X86
#define TPU_K_ISA_VARIANTS(linkage, name, public_name, params, args)                               \
    static void name##_portable params { name##_body args; }                                       \
    __attribute__((target("avx2,fma"))) static void name##_avx2 params { name##_body args; }       \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) static void name##_avx512 params \
    {                                                                                              \
        name##_body args;                                                                          \
    }                                                                                              \
    linkage void public_name params {                                                              \
        if (tpu_k_cpu_has_avx512())                                                                \
            name##_avx512 args;                                                                    \
        else if (tpu_k_cpu_has_avx2_fma())                                                         \
            name##_avx2 args;                                                                      \
        else                                                                                       \
            name##_portable args;                                                                  \
    }
#else
#define TPU_K_ISA_VARIANTS(linkage, name, public_name, params, args)                               \
    linkage void public_name params { name##_body args; }
#endif

/* Flat runs (tpu_op_span_of): each family's span function fills *s when
 * op has the flat run; in fast mode op_table.c runs such a record's
 * shares through tpu_k_span_share, and only the others through the
 * family's fast kernel, so fused chunks and whole ops share one code
 * path. A family's state lives in s->state (checked by
 * TPU_K_SPAN_STATE_FITS) and is read back with memcpy. */
#define TPU_K_SPAN_STATE_FITS(T)                                                                   \
    _Static_assert(sizeof(T) <= sizeof(((tpu_op_span *)0)->state), #T " fits a span's state")
bool tpu_k_copy_span(const tpu_op *op, tpu_op_span *s);
bool tpu_k_fill_span(const tpu_op *op, tpu_op_span *s);
bool tpu_k_unary_span(const tpu_op *op, tpu_op_span *s);
bool tpu_k_binary_span(const tpu_op *op, tpu_op_span *s);
bool tpu_k_ternary_span(const tpu_op *op, tpu_op_span *s);

/* Row runs: like the flat run, for op's dtypes whatever its layout (the
 * caller sets s->step[k] to 0 or 1 per row); op_table.c runs records
 * without a flat run by rows of their coalesced shape with them, inputs
 * of other steps gathered into chunks. False if the family has no run
 * for op's dtypes. */
bool tpu_k_binary_row_span(const tpu_op *op, tpu_op_span *s);
bool tpu_k_ternary_row_span(const tpu_op *op, tpu_op_span *s);

/* Sets s->step[k] for a flat run of op: true if out is dense and each
 * input laid out like it (step 1) or one value broadcast (step 0). */
bool tpu_k_span_flat_steps(const tpu_op *op, tpu_op_span *s);

/* Fills the fields of *s every family sets alike: op, n_in, element sizes
 * and the steps (1 for every input: the caller sets the broadcast ones). */
void tpu_k_span_init(tpu_op_span *s, const tpu_op *op,
                     void (*run)(const tpu_op_span *, char *, const char *const *, int64_t));

/* Runs share ith of nth of the flat run s of op (its own operands). */
void tpu_k_span_share(const tpu_op_span *s, int ith, int nth);

/* COPY and FILL (copy_fill.c). */
tpu_status tpu_k_copy_ref(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_copy_fast(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_fill_ref(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_fill_fast(const tpu_op *op, int ith, int nth);

/* UNARY (unary.c). The fast path (its flat run) computes the functions for which
 * tpu_k_unary_uses_vecmath is true with vecmath.h on CPUs with AVX2:
 * there its results are within tpu_vm_max_ulp of the reference's (f32),
 * not bit-identical; every other function gives the reference's bytes. */
tpu_status tpu_k_unary_ref(const tpu_op *op, int ith, int nth);
bool tpu_k_unary_uses_vecmath(tpu_unary_fn fn);

/* BINARY (binary.c). Likewise the fast path computes the activations'
 * gradients for which tpu_k_binary_uses_vecmath is true (g * act'(x))
 * with vecmath.h on CPUs with AVX2, within a few ulp of the reference. */
tpu_status tpu_k_binary_ref(const tpu_op *op, int ith, int nth);
bool tpu_k_binary_uses_vecmath(tpu_binary_fn fn);

/* TERNARY (ternary.c). */
tpu_status tpu_k_ternary_ref(const tpu_op *op, int ith, int nth);

/* SOFTMAX (softmax.c). */
tpu_status tpu_k_softmax_ref(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_softmax_fast(const tpu_op *op, int ith, int nth);

/* REDUCE (reduce.c). */
tpu_status tpu_k_reduce_ref(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_reduce_fast(const tpu_op *op, int ith, int nth);

/* Split reductions (reduce.c): a float SUM/MEAN/NORM, or a pick (AMAX ...
 * ARGMIN) of f32, over contiguous, aligned trailing dims into few
 * outputs, each output's run cut into fixed chunks.
 * tpu_k_reduce_split_chunks gives the chunks per output (0: not split; it
 * depends on the record only); tpu_k_reduce_split runs phase 0 (chunk
 * sums into op->scratch) or phase 1 (chunks combined in order), in both
 * kernel modes. */
int64_t tpu_k_reduce_split_chunks(const tpu_op *op);
tpu_status tpu_k_reduce_split(const tpu_op *op, int phase, int ith, int nth);
int tpu_k_reduce_phases(const tpu_op *op);              /* 2 when split, else 1 */
int64_t tpu_k_reduce_scratch_bytes(const tpu_op *op);   /* the split's partials */

/* The claims counter of the run this thread's share belongs to
 * (tpu_op_run_phase_claimed), or NULL when the share was run without one:
 * a kernel that divides its work into units takes the next unit with an
 * atomic add on it, else it takes the fixed part (ith, nth) names. */
int64_t *tpu_k_share_claims(void);

/* The parts of items [0, n) a share works on, for kernels whose items
 * are independent (rows of a softmax, elements, attention's units,
 * product blocks): with the run's claims counter, chunks taken in turn
 * until none is left, so a share on a slower core takes fewer; without
 * one, the share's fixed part (tpu_k_split) once. A chunk is about an
 * eighth of a share (few enough atomic adds, fine enough to even out
 * cores 20-30 % apart), rounded up to a multiple of `granule` items (so
 * that, say, no two shares write one cache line). The bytes do not
 * depend on which share takes which. One claiming walk per run: the
 * counter is the run's.
 *   tpu_k_parts p;
 *   tpu_k_parts_init(&p, n, granule, ith, nth);
 *   while (tpu_k_parts_next(&p, &start, &end)) ... */
typedef struct {
    int64_t n, chunk, *claims;
    int ith, nth;
    bool done;
} tpu_k_parts;

void tpu_k_parts_init(tpu_k_parts *p, int64_t n, int64_t granule, int ith, int nth);
bool tpu_k_parts_next(tpu_k_parts *p, int64_t *start, int64_t *end);

/* MATMUL (matmul.c; packed GEMM in gemm.c). */
tpu_status tpu_k_mm_ref(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_mm_fast(const tpu_op *op, int ith, int nth);
/* The same, reporting finished blocks of out to hook (NULL: none), as
 * tpu_op_run_blocks promises. */
tpu_status tpu_k_mm_ref_blocks(const tpu_op *op, int ith, int nth, const tpu_op_block_hook *hook);
tpu_status tpu_k_mm_fast_blocks(const tpu_op *op, int ith, int nth, const tpu_op_block_hook *hook);

/* RANDOM (random.c): the counter-based reference kernel, and a
 * fast NORMAL for row-major contiguous f32/f16/bf16 that generates the
 * Philox blocks in batches (same bytes). */
tpu_status tpu_k_random_ref(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_random_fast(const tpu_op *op, int ith, int nth);

/* NORM (norm.c). A backward that wants dweight or dbias runs in two
 * phases: phase 0 computes dx and each fixed block of rows' partial
 * column sums into scratch, phase 1 adds the blocks in order. */
tpu_status tpu_k_norm_ref(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_norm_fast(const tpu_op *op, int ith, int nth);
int tpu_k_norm_phases(const tpu_op *op);
int64_t tpu_k_norm_scratch_bytes(const tpu_op *op);
tpu_status tpu_k_norm_run_phase(const tpu_op *op, int phase, int ith, int nth);

/* INDEX (index.c) and LOSS (loss.c). The fast kernel differs from the
 * reference only for INTERP and INTERP_BACKWARD. */
tpu_status tpu_k_index_ref(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_index_fast(const tpu_op *op, int ith, int nth);
/* INTERP and INTERP_BACKWARD (interp.c), called by the INDEX kernels. */
tpu_status tpu_k_interp_ref(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_interp_fast(const tpu_op *op, int ith, int nth);
/* Scratch of an INDEX op: the embedding backward's per-row counts when it
 * scales by frequency (W int64), else 0. */
int64_t tpu_k_index_scratch_bytes(const tpu_op *op);
/* The scatters, advanced indexing and nonzero (scatter.c), called by
 * tpu_k_index_ref. */
tpu_status tpu_k_scatter_ref(const tpu_op *op, int ith, int nth);
bool tpu_k_nonzero_bytes(const tpu_op *op, int ith, tpu_status *st);
bool tpu_k_scatter_add_rows(const tpu_op *op, int ith, int nth, tpu_status *st);
tpu_status tpu_k_loss_ref(const tpu_op *op, int ith, int nth);

/* SCAN (scan.c). */
tpu_status tpu_k_scan_ref(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_scan_fast(const tpu_op *op, int ith, int nth);

/* WINDOW (window.c). */
tpu_status tpu_k_window_ref(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_window_fast(const tpu_op *op, int ith, int nth);

/* SORT (sort.c): a stable merge sort of each line in scratch; the fast
 * kernel selects a small TOPK's k in one pass (the same bytes). */
tpu_status tpu_k_sort_ref(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_sort_fast(const tpu_op *op, int ith, int nth);
int64_t tpu_k_sort_scratch_bytes(const tpu_op *op);

/* Special functions in f64 (special.c), with PyTorch's special values:
 * log |Gamma(x)|; digamma (+-inf at 0 by the sign of zero, NaN at the
 * negative integers); polygamma psi^(n) for n >= 0; the Hurwitz zeta
 * function zeta(s, q) (inf at s == 1 and at the non-positive integer q,
 * NaN for s < 1 or a negative q with a non-integer s); the modified Bessel
 * function I_nu, nu 0 or 1, times e^-|x| when scaled (unscaled: NaN at +-inf,
 * as PyTorch gives). */
double tpu_k_lgamma(double x);
double tpu_k_digamma(double x);
double tpu_k_polygamma(int64_t n, double x);
double tpu_k_zeta(double s, double q);
double tpu_k_bessel_i(int nu, double x, bool scaled);

/* ATTENTION (attention.c; the tiled path in attention_fast.c,
 * attention_bwd.c and attention_lanes.c): the forward's reference and
 * tiled kernels, and the backward's three phases (0: each query row's
 * statistics into scratch; 1: dk and dv per key row or chunk; 2: dq per
 * query row or block), each phase choosing its path (attention.h). */
tpu_status tpu_k_attention_ref(const tpu_op *op, int ith, int nth);
tpu_status tpu_k_attention_fast(const tpu_op *op, int ith, int nth);
int tpu_k_attention_phases(const tpu_op *op);            /* 3 backward, else 1 */
int64_t tpu_k_attention_scratch_bytes(const tpu_op *op); /* backward: per query row */
tpu_status tpu_k_attention_run_phase(const tpu_op *op, int phase, int ith, int nth);

/* Reads an int64, int32 or uint8 index element. */
static inline int64_t tpu_k_load_index(const void *p, tpu_dtype dt) {
    if (dt == TPU_DTYPE_U8)
        return *(const uint8_t *)p;
    if (dt == TPU_DTYPE_I32) {
        int32_t v;
        __builtin_memcpy(&v, p, sizeof v);
        return v;
    }
    int64_t v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}

/* Philox4x32-10 (Random123): one block of four 32-bit outputs for
 * counter ctr and key. Exposed for the known-answer test. */
void tpu_k_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

#endif
