/* What the device allocator tells about itself, for memory debugging: a
 * snapshot of every chip's segments and blocks, and a ring of allocator
 * events (allocations, frees, segments taken and returned, out-of-memory
 * errors). These are the facts PyTorch's memory visualizer reads from
 * CUDA's caching allocator, under the same names.
 *
 * Contexts. An embedder may attach an opaque context (e.g. the stack trace
 * of the allocating thread) to an allocation or a free. The allocator
 * never looks inside one: it takes a reference (ops.retain) for every
 * place it keeps the context (the block, each event of the ring) and drops
 * it (ops.release) when that place goes. The caller keeps its own
 * reference and releases it when it likes, e.g. right after the call.
 * Without installed ops the allocator keeps no contexts.
 *
 * Thread safety: every function may be called from any thread. */
#ifndef TPU_MEM_HISTORY_H
#define TPU_MEM_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/export.h"
#include "tpu/runtime.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The retain/release pair behind contexts. Both may run with an allocator
 * lock held, on any thread that allocates or frees: they must be cheap and
 * must not call into the runtime. */
typedef struct {
    void (*retain)(void *context);
    void (*release)(void *context);
} tpu_mem_context_ops;

/* Installs the context ops; NULL (or either function NULL) removes them,
 * after which new contexts are ignored. Install them once, before
 * recording starts: contexts kept so far are released with the ops they
 * were retained with only if those are still installed. */
TPU_API void tpu_mem_set_context_ops(const tpu_mem_context_ops *ops);

/* ------------------------------------------------------------- recording */

/* Which events keep a context, as CUDA's RecordContext: none; only the
 * blocks that are allocated now; also the events of allocations (and the
 * segments and out-of-memory errors they cause); also the events of
 * frees. */
typedef enum {
    TPU_MEM_CONTEXT_NEVER = 0,
    TPU_MEM_CONTEXT_STATE,
    TPU_MEM_CONTEXT_ALLOC,
    TPU_MEM_CONTEXT_ALL,
    TPU_MEM_CONTEXT_COUNT
} tpu_mem_context_level;

/* What the allocator did, the actions of CUDA's TraceEntry. */
typedef enum {
    TPU_MEM_ACTION_ALLOC = 0,      /* a block handed out (size: bytes asked for) */
    TPU_MEM_ACTION_FREE_REQUESTED, /* the caller freed it */
    TPU_MEM_ACTION_FREE_COMPLETED, /* it may be reused: no other stream's recorded work is left */
    TPU_MEM_ACTION_SEGMENT_ALLOC,  /* a segment taken from the target */
    TPU_MEM_ACTION_SEGMENT_FREE,   /* a segment returned to it */
    TPU_MEM_ACTION_OOM,            /* TPU_ERR_OUT_OF_MEMORY (size: bytes asked for) */
    TPU_MEM_ACTION_SNAPSHOT,       /* tpu_mem_snapshot was taken (size: active bytes) */
    TPU_MEM_ACTION_COUNT
} tpu_mem_action;

/* CUDA's name of an action ("alloc", "free_requested", ...); "unknown"
 * outside the enum. */
TPU_API const char *tpu_mem_action_name(tpu_mem_action action);

/* How the allocator records. trace: keep each chip's last max_entries
 * events (a ring; older events are overwritten). context: which events and
 * blocks keep the context given with them. skip_actions: a bit
 * (1u << action) for every action not to record. clear: forget the
 * events kept so far before the new settings apply. */
typedef struct {
    bool trace;
    uint64_t max_entries;
    tpu_mem_context_level context;
    uint32_t skip_actions;
    bool clear;
} tpu_mem_history_config;

/* Applies `cfg` to every chip. NULL, or trace false and context NEVER,
 * turns recording off and forgets the events kept (as CUDA does when
 * history is disabled); the contexts of blocks allocated while recording
 * stay with them. TPU_ERR_INVALID_ARG for trace with max_entries 0, a
 * context level outside the enum, or skip bits beyond the actions. */
TPU_API tpu_status tpu_mem_history_configure(const tpu_mem_history_config *cfg);

/* The context level in force (TPU_MEM_CONTEXT_NEVER when off): an
 * embedder asks it to decide whether to build a context at all. One
 * atomic load. */
TPU_API tpu_mem_context_level tpu_mem_history_context_level(void);

/* tpu_mem_alloc, attaching `context` (may be NULL) to the block and to the
 * events the allocation records. */
TPU_API tpu_status tpu_mem_alloc_ctx(int chip, size_t nbytes, tpu_stream *stream, void *context,
                                     void **out);

/* tpu_mem_free, attaching `context` (may be NULL) to the free's events;
 * without one they carry the allocation's context, as on CUDA. */
TPU_API tpu_status tpu_mem_free_ctx(void *ptr, void *context);

/* ---------------------------------------------------------------- caching */

/* Turns block caching on (the default) or off for every chip, CUDA's
 * caching_allocator_enable. Off, no freed block is handed out again: a
 * segment goes back to the target as soon as no queued work can still use
 * it (at its free if its stream has run everything queued before it, else
 * at the next allocation or empty_cache on that chip). The statistics,
 * history and range checks go on as before. Turning caching off does not
 * release what is cached already; empty_cache does. */
TPU_API void tpu_mem_set_caching(bool enabled);

/* Whether caching is on. */
TPU_API bool tpu_mem_caching_enabled(void);

/* --------------------------------------------------------------- snapshot */

/* A block's state, as CUDA names them in snapshots. */
typedef enum {
    TPU_MEM_BLOCK_ACTIVE_ALLOCATED = 0, /* handed out and not freed */
    TPU_MEM_BLOCK_ACTIVE_PENDING_FREE,  /* freed; another stream's recorded work may still use it */
    TPU_MEM_BLOCK_INACTIVE,             /* cached, free for reuse on its stream */
    TPU_MEM_BLOCK_STATE_COUNT
} tpu_mem_block_state;

/* One block of a snapshot, with the segment it lies in. Blocks of one
 * segment come one after another in ascending address order and cover it
 * exactly. */
typedef struct {
    uint64_t segment_address;
    uint64_t segment_size;
    void *segment_context;   /* the context of the allocation that took the segment */
    uint64_t address;
    uint64_t size;           /* bytes of the block (rounded) */
    uint64_t requested_size; /* bytes asked for; 0 for an inactive block */
    int32_t chip;
    int32_t stream;          /* index on its chip of the stream it is allocated for */
    tpu_mem_block_state state;
    void *context;           /* the context of its allocation; NULL when inactive */
} tpu_mem_block_info;

/* Every block of `chip`, segments in ascending address order, in a new
 * array (*count entries; *out = NULL when there are none) that the caller
 * gives back to tpu_mem_blocks_free. Each context in it is retained for
 * the caller. When events are being traced, records a SNAPSHOT event.
 * TPU_ERR_HOST_MEMORY if the array cannot be allocated. */
TPU_API tpu_status tpu_mem_snapshot(int chip, tpu_mem_block_info **out, size_t *count);

/* Releases the contexts of a tpu_mem_snapshot array, then frees it. NULL
 * is a no-op. */
TPU_API void tpu_mem_blocks_free(tpu_mem_block_info *blocks, size_t count);

/* One recorded event. */
typedef struct {
    tpu_mem_action action;
    int32_t stream;       /* stream index on the chip */
    uint64_t addr;        /* block or segment address; 0 for OOM and SNAPSHOT */
    uint64_t size;        /* see tpu_mem_action */
    uint64_t device_free; /* OOM: free bytes of the chip (capacity - reserved) */
    int64_t time_us;      /* microseconds since the Unix epoch */
    void *context;        /* NULL when none was kept */
} tpu_mem_event;

/* The events kept for `chip`, oldest first, in a new array that the
 * caller gives back to tpu_mem_events_free; contexts are retained for the
 * caller. *out = NULL and *count = 0 when there are none. */
TPU_API tpu_status tpu_mem_history_events(int chip, tpu_mem_event **out, size_t *count);

/* Releases the contexts of a tpu_mem_history_events array, then frees it.
 * NULL is a no-op. */
TPU_API void tpu_mem_events_free(tpu_mem_event *events, size_t count);

#ifdef __cplusplus
}
#endif

#endif
