/* The fused-eager planner: groups of element-wise records, and the row
 * reductions among them, run as one pass over memory; and a matrix
 * product with its element-wise epilogue, run on each block of the
 * product as it is finished.
 *
 * In fused mode a stream holds the fusable records it is given (and the
 * allocator's marks: a block allocated, or freed) until a sync point, a
 * threshold or a record it cannot fuse; then tpu_fuse_plan_group cuts the
 * held run into groups and the target runs each group tile by tile: for
 * one tile (a cache-sized block of the elements) every record of the group
 * runs in order, then the next tile. Data stays in cache between records,
 * and a value that dies inside the group (its block freed by the host, or
 * overwritten by a later record of the group, before anyone outside the
 * group could read it) is kept in a per-thread scratch tile and never
 * written to memory.
 *
 * A group may hold records of several element counts (the per-tensor
 * records of a foreach optimizer step interleave many shapes): each count
 * is a cluster, tiled on its own, and the clusters run one after another.
 *
 * Why this gives the same bits as strict mode: each record is the same
 * kernel on the same elements, only cut into tiles (as the thread pool
 * already cuts it), and the planner admits a record only if running the
 * group cluster by cluster and tile by tile cannot change what any record
 * reads. Two views of one cluster that share a byte, one of them written,
 * must be the very same view (data, dtype and address of every element),
 * so every byte is touched at the same tile index by every record that
 * touches it. Views of different clusters share a byte that one writes
 * only when an earlier cluster writes it and later ones only read it
 * afterwards (a scalar filled, then broadcast into a foreach step's
 * per-tensor records): clusters run in the order they were formed, so
 * every read still follows the write. Records whose kernel would take
 * another path on a tile than on the whole tensor (vector math on a
 * strided view) are not fused at all.
 *
 * Everything here is a pure function of the records: no locks, no
 * threads, no allocation. The stream (runtime/stream.c) decides when to
 * plan; the target (runtime/target_host.c) runs the tiles on its pool. */
#ifndef TPU_FUSE_H
#define TPU_FUSE_H

#include <stdbool.h>
#include <stdint.h>

#include "tpu/op.h"

/* Limits of one group; a run longer than this is cut into several. */
#define TPU_FUSE_MAX_OPS 2048     /* records */
#define TPU_FUSE_MAX_VIEWS 4096   /* distinct tensor views */
#define TPU_FUSE_MAX_STORAGES 2048 /* distinct storages (allocations) the views lie in */
#define TPU_FUSE_MAX_CLUSTERS 16  /* element counts */
#define TPU_FUSE_MAX_SLOTS 8      /* scratch tiles per thread (values never written) */
#define TPU_FUSE_MAX_OPERANDS 4   /* out and up to 3 inputs of an element-wise record */
#define TPU_FUSE_HASH 4096        /* storage hash slots, a power of two > MAX_STORAGES */
/* Elements of one tile, at most: with TPU_FUSE_MAX_SLOTS of them, each of
 * up to 8 bytes, a thread's scratch is 1 MiB. */
#define TPU_FUSE_TILE_MAX 16384

/* An entry of a held run as the planner sees it: a record, or one of the
 * allocator's marks on the block [block, block + nbytes). Only FREED
 * changes a plan (nothing after it may read what the block held);
 * ALLOCATED and RELEASED are there so that device memory can be counted in
 * stream order (tpu_fuse_unwritten_blocks). */
typedef enum {
    TPU_FUSE_RECORD,
    TPU_FUSE_FREED,     /* the host freed the block here */
    TPU_FUSE_ALLOCATED, /* the host allocated the block here */
    TPU_FUSE_RELEASED,  /* freed, but another stream's work may still read it */
} tpu_fuse_entry_kind;

typedef struct {
    tpu_fuse_entry_kind kind;
    const tpu_op *op; /* a record's; NULL for a mark */
    const void *block;
    uint64_t nbytes;
    /* FREED: no other stream ever used the block, so what this stream's
     * group writes is all that was written to it. */
    bool pairs;
} tpu_fuse_entry;

/* A view of a group, with its strides over the group's shape. */
typedef struct {
    char *data;
    tpu_dtype dtype;
    int32_t elem_size;
    uintptr_t lo, hi;               /* bytes it touches: [lo, hi) */
    int32_t cdims;                  /* its canonical form: dims merged, size-1 dims dropped */
    int64_t csizes[TPU_MAX_DIMS], cstrides[TPU_MAX_DIMS];
    int64_t gstrides[TPU_MAX_DIMS]; /* strides (elements) over its cluster's dims */
    int32_t cluster;
    int32_t storage;                /* its storage's index, and the next view of it (-1: none) */
    int32_t next_of_storage;
    bool written;
    bool read_later; /* read by a later cluster: never in scratch, never written again */
    /* Its layout over the cluster: flat (element i of the cluster's
     * row-major order at data + i elements) and/or one value (every
     * stride 0; both for one element); broadcast: some stride 0 (a
     * reduction's out, or a read of one), never in scratch. */
    bool flat, one_value, broadcast;
    /* In a matmul group (tpu_fuse_plan.matmul): element (i, j) of the
     * product's [M, N] out lies at data + (i * row_stride + j *
     * col_stride) elements; col_stride is 0 or 1. A view of the
     * product's inputs belongs to no cluster (cluster -1): it is there
     * so that no epilogue step writes what the product reads. */
    int64_t row_stride, col_stride;
} tpu_fuse_view;

/* An allocation views of the group lie in. Views of different storages
 * never share a byte: the planner ends a group rather than admit a
 * storage that overlaps another one (a storage made over part of
 * another's memory). */
typedef struct {
    uintptr_t lo, hi;
    int32_t first_view; /* its views, newest first (-1: none) */
} tpu_fuse_storage;

/* One record of a group: which view each operand is (k = 0 is out, k = 1
 * .. n_in the inputs), and where its tile lives: slot[k] >= 0 is that
 * scratch tile of the running thread, -1 is the view's memory. */
typedef struct {
    const tpu_op *op;
    int32_t entry;                  /* its index in the planned entries */
    int32_t cluster;
    int32_t n_operands;
    int32_t view[TPU_FUSE_MAX_OPERANDS];
    int32_t slot[TPU_FUSE_MAX_OPERANDS];
    int32_t part; /* its part, numbered across the group's clusters */
    /* A reduction: elements per output (tpu_fuse_row_length). A row step:
     * the elements of the rows whose one value per row it computes. Else 0. */
    int64_t row_length;
    /* An element-wise record on one value per row of its cluster's
     * reductions (var + eps between a variance and the division that
     * reads it back): each operand is a view of the cluster with a
     * trailing dim of row_length elements, stride 0; on a tile it runs on
     * the tile's rows, one element each. */
    bool row_step;
} tpu_fuse_step;

/* The records of one element count, and how its elements are cut into
 * tiles: a tile is one index of each dim before tile_dim and a block of
 * tile_block indices of tile_dim (the last block may be shorter), with all
 * the dims after it.
 *
 * Its steps fall into parts: steps of different parts touch no common
 * storage that a step of the cluster writes (a foreach step's records of
 * different tensors), so the parts may run in any order. Each part runs
 * all of its tiles before the next part starts: a tile then reads a few
 * long streams (one tensor's state) instead of a short piece of every
 * tensor's, which the hardware prefetchers follow; and many small parts
 * spread over the threads. The cluster's work items are (part, tile)
 * pairs, part-major: item w is tile w % n_tiles of part w / n_tiles. */
typedef struct {
    int64_t numel;
    /* Its shape: the records' elements, row-major, refined so that each of
     * its views is a strided tensor over it; boundaries while planning. */
    int32_t ndim;
    int64_t sizes[TPU_MAX_DIMS];
    int32_t n_bounds;
    int64_t bounds[TPU_MAX_DIMS + 1];
    int32_t n_steps;
    int32_t first;   /* its steps are order[first .. first + n_steps) of the plan */
    int32_t n_parts; /* its parts are the group's parts first_part .. first_part + n_parts - 1 */
    int32_t first_part;
    int32_t n_slots; /* scratch tiles it uses (<= TPU_FUSE_MAX_SLOTS) */
    int64_t row_length; /* the longest row its reductions reduce: tiles hold whole rows (0: none) */
    int32_t tile_dim;
    int64_t tile_block, tile_elems, n_tiles;
    /* Elements per chunk when a part runs as flat runs: about 64 KiB of
     * operands at its largest part's bytes per element, within
     * TPU_FUSE_CHUNK_MIN .. TPU_FUSE_CHUNK_MAX. */
    int64_t chunk;
    int64_t n_work; /* n_parts * n_tiles */
} tpu_fuse_cluster;

/* A group ready to run. Steps are in stream order. */
typedef struct {
    int32_t n_steps;
    tpu_fuse_step steps[TPU_FUSE_MAX_OPS];
    int32_t n_views;
    tpu_fuse_view views[TPU_FUSE_MAX_VIEWS];
    int32_t n_clusters;
    tpu_fuse_cluster clusters[TPU_FUSE_MAX_CLUSTERS];
    int32_t order[TPU_FUSE_MAX_OPS]; /* step indices by cluster, then part; stream order within */
    /* Part k's steps are order[part_start[k] .. part_start[k + 1]): parts
     * are numbered across clusters in order, so one more entry ends the last. */
    int32_t n_parts;
    int32_t part_start[TPU_FUSE_MAX_OPS + 1];
    /* Planning state: the storages and their hash (index + 1, 0 empty). */
    int32_t n_storages;
    tpu_fuse_storage storages[TPU_FUSE_MAX_STORAGES];
    int32_t hash[TPU_FUSE_HASH];
    /* What the group saves: values kept in scratch instead of memory. */
    int32_t n_elided;
    int64_t bytes_elided;
    /* A matmul group: step 0 is an MM/ADDMM record and every other step
     * an element-wise record on its out's elements (its bias and
     * activation), run on each block of out as the product finishes it
     * (epilogue.c); one cluster of M * N elements, mm_cols = N. */
    bool matmul;
    int64_t mm_cols;
} tpu_fuse_plan;

/* Epilogue steps a matmul group takes at most. */
#define TPU_FUSE_MM_MAX_STEPS 64

/* Whether a checked record may join a group: the element-wise families
 * (UNARY, BINARY, TERNARY), plain device copies, constant fills, the
 * row reductions (tpu_fuse_row_length) and matrix products (MATMUL,
 * which only start groups), with one phase, no scratch, at most 3 inputs
 * and at least one element. The stream asks at enqueue time; only such
 * records are ever held. */
bool tpu_fuse_fusable(const tpu_op *op);

/* Whether a fusable record can only be the first step of a group (a
 * matrix product, whose epilogue follows it): the stream ends a held run
 * before it, so it heads the next. */
bool tpu_fuse_starts_group(const tpu_op *op);

/* For a REDUCE record that a group may hold, the elements of one row (one
 * output's inputs), else 0: tpu_op_row_length's rows (each output computed
 * from its own row alone, in an order fixed by the row, so a tile of
 * whole rows gives each row's strict-mode bits) of at most
 * TPU_FUSE_TILE_MAX elements. In a group its out is
 * a view of its input's cluster broadcast along the row (stride 0), so
 * an element-wise record reading it (x - mean) joins the same cluster and
 * tile; the cluster's tiles then hold whole rows. */
int64_t tpu_fuse_row_length(const tpu_op *op);

/* Plans the group that starts at entries[0] (a run of n >= 1 entries,
 * records that tpu_fuse_fusable accepts and marks): takes entries
 * while the group stays safe and within the limits above, and returns how
 * many it took (>= 1). plan->n_steps is the number of records among them;
 * with fewer than 2 the caller runs the record (if any) on its own and the
 * plan's other fields are unspecified. */
int tpu_fuse_plan_group(const tpu_fuse_entry *entries, int n, tpu_fuse_plan *plan);

/* For the group just planned from entries[0, n) (n: what
 * tpu_fuse_plan_group took; the plan run fused): sets unwritten[e] for
 * the marks of every block that lives and dies inside the group without
 * being written to memory: an ALLOCATED mark and the first FREED (with
 * `pairs`) of the same block after it, with no step between them writing
 * memory of that block (each of its writes went to a scratch slot). The
 * device never held those bytes, so they are never counted as allocated.
 * Every other entry's flag is cleared. */
void tpu_fuse_unwritten_blocks(const tpu_fuse_plan *plan, const tpu_fuse_entry *entries, int n,
                               bool *unwritten);

/* Bounds of a cluster's chunk (tpu_fuse_cluster.chunk): elements per
 * chunk when a part runs as flat runs (tile.c), its operands' chunks
 * staying in L1 between its steps. */
#define TPU_FUSE_CHUNK_MIN 1024
#define TPU_FUSE_CHUNK_MAX 4096

/* Runs work items [w0, w1) of cluster c of a planned group on the calling
 * thread (0 <= w0 <= w1 <= n_work): for each, its part's steps in order
 * on its tile. A part whose records all have flat runs (tpu_op_span_of)
 * over flat or one-value views runs each tile chunk by chunk instead, every
 * step on a chunk of the cluster's `chunk` elements before the next: the
 * same bytes (each record is the same kernel on the same elements), with
 * the operands in L1 and the memory streams all read together. `scratch`
 * is this thread's TPU_FUSE_MAX_SLOTS tiles of
 * TPU_FUSE_TILE_MAX * 8 bytes each. On a kernel error the lowest failing
 * step is in *failed (else it is left alone) and its status returned; the
 * remaining items still run. */
tpu_status tpu_fuse_run_tiles(const tpu_fuse_plan *plan, int c, void *scratch, int64_t w0,
                              int64_t w1, int *failed);

/* ------------------------------------------------------ matmul groups
 *
 * A matmul group runs as its product, split into shares as the product
 * splits itself (tpu_op_run_blocks): each share, on each block of out it
 * finishes, runs every epilogue step on the block in stream order, row
 * piece by row piece of at most the cluster's chunk (a block of whole
 * rows of flat views as one run), while the block is still in cache.
 * Each step is the same kernel on the same elements, so the bytes are
 * strict mode's; the planner admitted only steps that read and write
 * the product's out elements at their own (i, j), and none that writes
 * what the product reads. */

/* The most shares a matmul group runs on. */
#define TPU_FUSE_MAX_SHARES 1024

/* A matmul group while it runs: filled by tpu_fuse_mm_begin, shared by
 * the shares (each writes only its own entries). */
typedef struct {
    const tpu_fuse_plan *plan;
    void *const *scratch; /* per share, TPU_FUSE_SCRATCH_BYTES each */
    /* Every epilogue step has a flat run that fits its views: span[i] is
     * step i's. Else each step runs as its record cut to the piece. */
    bool spans;
    /* Every view is flat over out's rows or one value: a block of whole
     * rows runs as one flat run. */
    bool rows_flat;
    tpu_op_span span[TPU_FUSE_MM_MAX_STEPS + 1];
    tpu_op_block_hook hook;
    int64_t claims; /* the product's units (tpu_op_run_blocks_claimed) */
    int failed[TPU_FUSE_MAX_SHARES]; /* per share: its lowest failing step, or n_steps */
    tpu_status status[TPU_FUSE_MAX_SHARES];
    char msg[4][512]; /* the first shares' messages; later ones read generic */
} tpu_fuse_mm_run;

/* Prepares r to run matmul group p (p->matmul) with per-share scratch. */
void tpu_fuse_mm_begin(tpu_fuse_mm_run *r, const tpu_fuse_plan *p, void *const *scratch);

/* Runs share ith of nth (nth <= TPU_FUSE_MAX_SHARES) of the group on the
 * calling thread: the product's share with the epilogue on each block.
 * Failures are kept in r for tpu_fuse_mm_end; returns TPU_OK. */
tpu_status tpu_fuse_mm_share(tpu_fuse_mm_run *r, int ith, int nth);

/* After all nth shares ran: TPU_OK, or the lowest failing step in
 * *failed (0: the product) with its status and message. */
tpu_status tpu_fuse_mm_end(const tpu_fuse_mm_run *r, int nth, int *failed);

/* Bytes of scratch one thread needs to run any group. */
#define TPU_FUSE_SCRATCH_BYTES ((int64_t)TPU_FUSE_MAX_SLOTS * TPU_FUSE_TILE_MAX * 8)

#endif
