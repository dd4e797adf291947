/* The torch-tpu runtime: chips, device memory, streams, events, modes and
 * the intra-op thread pool. Plain C, no PyTorch.
 *
 * Thread safety: every function here may be called from any thread.
 * Fork: after fork() the child's runtime refuses every call with
 * TPU_ERR_FORKED (worker threads do not survive fork), unless the parent
 * had never initialised it. */
#ifndef TPU_RUNTIME_H
#define TPU_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/export.h"
#include "tpu/op.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ init */

/* Reads the configuration once (TORCH_TPU_CHIPS, TORCH_TPU_GENERATION,
 * TORCH_TPU_MEMORY_LIMIT, TORCH_TPU_NUM_THREADS, TPU_LAUNCH_BLOCKING,
 * TORCH_TPU_DEFER_AND_FUSE, TORCH_TPU_REFERENCE, TORCH_TPU_ISA) and builds
 * the chip table.
 * Idempotent and thread-safe. Returns TPU_ERR_INVALID_ARG with a message
 * for a malformed variable (the runtime then stays uninitialised and the
 * next call tries again), TPU_ERR_FORKED in a forked child. Every other
 * function calls it implicitly. */
TPU_API tpu_status tpu_runtime_init(void);

/* True when this process is a fork() child of a process that had
 * initialised the runtime. */
TPU_API bool tpu_runtime_is_forked(void);

/* ----------------------------------------------------------------- chips */

typedef enum {
    TPU_GEN_V5E = 0,
    TPU_GEN_V5P,
    TPU_GEN_V6E,
    TPU_GEN_V7X,
    TPU_GEN_COUNT
} tpu_generation;

/* What a modeled chip generation is. */
typedef struct {
    char name[32];              /* "TPU v5e (virtual)" */
    tpu_generation generation;
    uint64_t total_memory;      /* bytes this chip may allocate (HBM, or the limit) */
    uint64_t hbm_bytes;         /* the generation's HBM capacity */
    double hbm_bandwidth;       /* bytes per second */
    double peak_bf16_flops;     /* FLOP/s of the matrix units in bf16 */
    int32_t mxu_size;           /* matrix unit is mxu_size x mxu_size */
    int32_t chip_count;         /* chips in this process */
} tpu_chip_props;

/* Number of chips (TORCH_TPU_CHIPS, default 1); 0 if init failed. */
TPU_API int tpu_chip_count(void);

/* Fills *out for chip `chip`. TPU_ERR_INVALID_DEVICE if out of range. */
TPU_API tpu_status tpu_chip_get_props(int chip, tpu_chip_props *out);

/* Looks up a generation by its short name ("v5e", "v5p", "v6e", "v7x"),
 * case-insensitive. TPU_ERR_INVALID_ARG for any other name. */
TPU_API tpu_status tpu_generation_from_name(const char *name, tpu_generation *out);

/* Waits for all work on every stream of `chip`; returns the first error
 * kept on one of them (each error is reported once). */
TPU_API tpu_status tpu_chip_synchronize(int chip);

/* --------------------------------------------------------------- streams */

typedef struct tpu_stream tpu_stream;

/* Streams per chip: index 0 is the default stream, 1 .. TPU_STREAMS_MAX-1
 * are pool streams created on first use (each owns a worker thread). */
#define TPU_STREAMS_MAX 32

/* Returns in *out the stream `index` of `chip`, creating it if needed.
 * Streams live until the process exits. */
TPU_API tpu_status tpu_stream_get(int chip, int index, tpu_stream **out);

/* Returns in *out the next pool stream of `chip`, round-robin over
 * 1 .. TPU_STREAMS_MAX-1, as CUDA's stream pool does. */
TPU_API tpu_status tpu_stream_next_from_pool(int chip, tpu_stream **out);

TPU_API int tpu_stream_chip(const tpu_stream *stream);
TPU_API int tpu_stream_index(const tpu_stream *stream);

/* Submits an op: checks it (tpu_op_check) on the calling thread, checks
 * that each device tensor's storage is a live block of this stream's chip
 * that holds the whole storage, stamps it with the next sequence number,
 * and queues a copy of it (the caller's record may be reused at once).
 * A stream queues at most a fixed number of records (about 1 MiB of
 * them); when they are all waiting, the call waits for the worker, between
 * the wait hooks. In debug mode the stream is drained and
 * the op runs before the call returns; its kernel error is returned here.
 * In strict and fused modes a kernel error is kept on the stream and
 * returned by the next synchronising call. */
TPU_API tpu_status tpu_stream_submit(tpu_stream *stream, const tpu_op *op);

/* Queues fn(ctx) to run on the stream's worker after all earlier work,
 * e.g. to release host buffers an asynchronous copy reads. fn must not
 * call back into the stream. In debug mode it runs before return. */
TPU_API tpu_status tpu_stream_submit_host_fn(tpu_stream *stream, void (*fn)(void *ctx),
                                             void *ctx);

/* Waits until every record submitted so far has run. Returns the error kept
 * on the stream, if any, and forgets it: it is reported once. */
TPU_API tpu_status tpu_stream_synchronize(tpu_stream *stream);

/* *done = true if every record submitted so far has run. */
TPU_API tpu_status tpu_stream_query(tpu_stream *stream, bool *done);

/* ---------------------------------------------------------------- events */

typedef struct tpu_event tpu_event;

/* Creates an unrecorded event. An unrecorded event counts as complete. */
TPU_API tpu_status tpu_event_create(tpu_event **out);

/* Destroys an event. Safe while records on streams still refer to it. */
TPU_API void tpu_event_free(tpu_event *event);

/* Records the event at the current end of `stream`. The first record binds
 * the event to the stream's chip; recording it later on another chip's
 * stream is TPU_ERR_WRONG_DEVICE. */
TPU_API tpu_status tpu_event_record(tpu_event *event, tpu_stream *stream);

/* Makes later records of `stream` wait until the event's recorded point has
 * run. Waiting on an unrecorded event does nothing. Streams of any chip may
 * wait on an event (chips of one host share an interconnect). */
TPU_API tpu_status tpu_stream_wait_event(tpu_stream *stream, tpu_event *event);

TPU_API tpu_status tpu_event_query(tpu_event *event, bool *done);

/* Waits for the recorded point; returns (once) the error kept on the
 * stream it was recorded on. */
TPU_API tpu_status tpu_event_synchronize(tpu_event *event);

/* Milliseconds between two completed records. TPU_ERR_INVALID_ARG if either
 * was never recorded or has not completed, TPU_ERR_WRONG_DEVICE if they
 * were recorded on different chips. */
TPU_API tpu_status tpu_event_elapsed_ms(tpu_event *start, tpu_event *end, double *ms);

/* Chip an event is bound to, -1 if never recorded. */
TPU_API int tpu_event_chip(const tpu_event *event);

/* ---------------------------------------------------------------- memory */

/* One allocator statistic, kept as CUDA's caching allocator keeps its
 * own: the value now, its largest value since the last peak reset, and the
 * amounts by which it rose and fell since the last accumulated reset. */
typedef struct {
    int64_t current, peak, allocated, freed;
} tpu_mem_stat;

/* The pools statistics are split by, as CUDA splits them: every block, and
 * blocks of segments of at most 1 MiB (small; one block per segment)
 * apart from those of larger segments. */
typedef enum {
    TPU_MEM_POOL_ALL = 0,
    TPU_MEM_POOL_SMALL, /* blocks of segments of at most 1 MiB */
    TPU_MEM_POOL_LARGE,
    TPU_MEM_POOL_COUNT
} tpu_mem_pool;

/* Allocator statistics of one chip. A segment is a range taken from the
 * target; a large one (more than 1 MiB) is split into blocks of the sizes
 * asked for, and an "inactive split" block is a cached part of a split
 * segment (it cannot be returned to the target until its segment's blocks
 * merge back). A block is "active" from its allocation until its free has
 * completed: at once for a block no other stream uses, or once the work
 * recorded on it with tpu_mem_record_stream has run. */
typedef struct {
    tpu_mem_stat allocation[TPU_MEM_POOL_COUNT];      /* live allocations */
    tpu_mem_stat segment[TPU_MEM_POOL_COUNT];         /* segments held from the target */
    tpu_mem_stat active[TPU_MEM_POOL_COUNT];          /* active blocks */
    tpu_mem_stat allocated_bytes[TPU_MEM_POOL_COUNT]; /* block bytes of live allocations */
    tpu_mem_stat reserved_bytes[TPU_MEM_POOL_COUNT];  /* segment bytes, cached ones included */
    tpu_mem_stat active_bytes[TPU_MEM_POOL_COUNT];    /* block bytes of active blocks */
    tpu_mem_stat requested_bytes[TPU_MEM_POOL_COUNT]; /* bytes asked for by active blocks */
    tpu_mem_stat inactive_split[TPU_MEM_POOL_COUNT];  /* cached blocks of split segments */
    tpu_mem_stat inactive_split_bytes[TPU_MEM_POOL_COUNT];
    /* cumulative since the last tpu_mem_reset_accumulated_stats */
    uint64_t num_cache_hits;       /* allocations served from the cache */
    uint64_t num_alloc_retries;    /* cache flushes to satisfy a request */
    uint64_t num_ooms;             /* TPU_ERR_OUT_OF_MEMORY returned */
    uint64_t num_sync_all_streams; /* waits for every stream (flushes, empty_cache) */
    uint64_t num_device_alloc;     /* segments taken from the target */
    uint64_t num_device_free;      /* segments returned to it */
} tpu_mem_stats;

/* Allocates `nbytes` on `chip` for use on `stream` (NULL: the chip's
 * default stream). A cached block last used on the same stream is reused
 * at once; blocks are never handed to another stream before work recorded
 * with tpu_mem_record_stream has finished. When the capacity (or the
 * limit set by tpu_mem_set_fraction) would be exceeded, every chip's
 * streams are drained and the cache released before giving up with
 * TPU_ERR_OUT_OF_MEMORY, whose message gives the size asked, the free
 * bytes, the limit and the capacity. nbytes == 0 returns *out = NULL,
 * TPU_OK. The same as tpu_mem_alloc_ctx (tpu/mem_history.h) with no
 * context. */
TPU_API tpu_status tpu_mem_alloc(int chip, size_t nbytes, tpu_stream *stream, void **out);

/* Returns a block to its chip's cache. NULL is a no-op. A pointer this
 * allocator did not hand out is TPU_ERR_INVALID_ARG. */
TPU_API tpu_status tpu_mem_free(void *ptr);

/* Marks that work queued on `stream` so far uses the block holding `ptr`:
 * after the block is freed it is not reused until that work has run. */
TPU_API tpu_status tpu_mem_record_stream(void *ptr, tpu_stream *stream);

/* Chip of the live block containing `ptr` (any address inside it).
 * TPU_ERR_INVALID_ARG if no live block contains it. */
TPU_API tpu_status tpu_mem_chip_of(const void *ptr, int *chip);

/* Synchronises the chip and releases every cached, unused block. Kept
 * kernel errors stay on their streams for the next synchronising call. */
TPU_API tpu_status tpu_mem_empty_cache(int chip);

/* Copies the chip's statistics to *out. TPU_ERR_INVALID_DEVICE for a bad
 * chip, TPU_ERR_INVALID_ARG for a NULL out. */
TPU_API tpu_status tpu_mem_get_stats(int chip, tpu_mem_stats *out);

/* Sets every statistic's peak to its current value. */
TPU_API tpu_status tpu_mem_reset_peak_stats(int chip);

/* Zeroes every statistic's allocated and freed totals and the cumulative
 * counters (num_*); current values and peaks stay. */
TPU_API tpu_status tpu_mem_reset_accumulated_stats(int chip);

/* *free_bytes = capacity - reserved; *total_bytes = capacity. The memory
 * fraction does not change them (as cudaMemGetInfo ignores it). */
TPU_API tpu_status tpu_mem_get_info(int chip, uint64_t *free_bytes, uint64_t *total_bytes);

/* Limits the chip's reserved memory to floor(fraction * capacity) bytes
 * (CUDA's per-process memory fraction). A request that would need a new
 * segment beyond the limit first frees cached blocks, as at capacity, and
 * then fails with TPU_ERR_OUT_OF_MEMORY, whose message names the limit;
 * cached blocks within what is already reserved are still handed out.
 * Lowering the limit below what is reserved frees nothing by itself. The
 * default is 1. TPU_ERR_INVALID_ARG for a fraction outside [0, 1] or NaN. */
TPU_API tpu_status tpu_mem_set_fraction(int chip, double fraction);

/* *fraction = the chip's memory fraction (1 unless set). */
TPU_API tpu_status tpu_mem_get_fraction(int chip, double *fraction);

/* ----------------------------------------------------------------- modes */

typedef enum {
    TPU_MODE_STRICT = 0, /* queue on streams, wait only at sync points */
    TPU_MODE_DEBUG,      /* run each op before submit returns */
    TPU_MODE_FUSED,      /* strict plus fusion of element-wise chains */
    TPU_MODE_COUNT
} tpu_mode;

/* Process-wide execution mode; switching is allowed at any time. */
TPU_API tpu_status tpu_mode_set(tpu_mode mode);
TPU_API tpu_mode tpu_mode_get(void);
TPU_API const char *tpu_mode_name(tpu_mode mode);

/* What fused mode did since the process started (or the last reset):
 * groups of two or more records run as one pass, the records in them,
 * values kept in scratch tiles instead of memory and their bytes. Counted
 * over every chip and stream. */
typedef struct {
    uint64_t groups;
    uint64_t fused_records;
    uint64_t values_not_written;
    uint64_t bytes_not_written;
} tpu_fusion_stats;

TPU_API void tpu_fusion_get_stats(tpu_fusion_stats *out);
TPU_API void tpu_fusion_reset_stats(void);

/* --------------------------------------------------------- blocking waits */

/* Installs hooks called around every blocking wait of a host thread in the
 * runtime (synchronize, event waits, a full stream queue, the drains
 * behind empty_cache and an out-of-memory retry): begin() before the
 * thread blocks, end(its result) after. The Python bindings use them to
 * release the GIL while waiting, so that no wait can deadlock against a
 * thread that needs the GIL. Worker threads never need the GIL, so a wait
 * never depends on it. The hooks run with no runtime lock held and must
 * not call into the runtime. NULL for either removes both. Install them
 * once, before other threads use the runtime. */
TPU_API void tpu_runtime_set_wait_hooks(void *(*begin)(void), void (*end)(void *token));

/* ----------------------------------------------------------- thread pool */

/* Threads the pool runs a kernel on (TORCH_TPU_NUM_THREADS, default the
 * number of online cores), including the calling thread. */
TPU_API int tpu_pool_num_threads(void);

/* Runs fn(ctx, ith, nth) for ith = 0 .. nth-1 concurrently, the calling
 * thread taking ith = 0, and returns when all have returned: the first
 * non-OK status by ith, or TPU_OK. nth is clamped to [1, pool size]. When
 * another thread is using the pool the work runs on the calling thread
 * with nth = 1 (kernels give the same result for any nth). */
TPU_API tpu_status tpu_pool_run(tpu_status (*fn)(void *ctx, int ith, int nth), void *ctx,
                                int nth);

#ifdef __cplusplus
}
#endif

#endif
