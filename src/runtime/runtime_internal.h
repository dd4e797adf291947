/* Private interface between the files of src/runtime/.
 *
 * Module map (one concern per file):
 *   status.c       thread-local error messages
 *   init.c         configuration from the environment, once; fork detection
 *   chip.c         the table of modeled generations, chip properties
 *   target_host.c  the virtual TPU behind target.h
 *   mem.c          the per-chip caching allocator
 *   stream.c       streams: ring of records, worker thread, kept errors
 *   record.c       the compact form of a record in a ring
 *   wait.c         the hooks around blocking waits of host threads
 *   event.c        events
 *   signal.c       host signals (tpu/signal.h)
 *   mode.c         the execution mode
 *   pool.c         the intra-op thread pool
 *   host_mem.c     pinned host memory (tpu/host_mem.h)
 *
 * Nothing declared here is exported from the library. */
#ifndef TPU_RUNTIME_INTERNAL_H
#define TPU_RUNTIME_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tpu/runtime.h"

#define TPU_CHIPS_MAX 64     /* largest valid TORCH_TPU_CHIPS */
#define TPU_THREADS_MAX 1024 /* largest valid TORCH_TPU_NUM_THREADS */
#define TPU_MSG_MAX 1024     /* bytes of an error message, NUL included */
/* Bytes of queued entries a stream holds before submitters wait: about
 * 1,500 records of a binary op on matrices (records are packed, see
 * record.c). A multiple of 16. */
#define TPU_STREAM_RING_BYTES (512 * 1024)

/* The configuration read from the environment by tpu_runtime_init. */
typedef struct {
    int chips;                 /* TORCH_TPU_CHIPS */
    tpu_generation generation; /* TORCH_TPU_GENERATION */
    uint64_t memory_limit;     /* TORCH_TPU_MEMORY_LIMIT in bytes; 0 = none */
    int num_threads;           /* TORCH_TPU_NUM_THREADS */
    bool bind_threads;         /* TORCH_TPU_BIND_THREADS */
    tpu_mode mode;             /* TPU_LAUNCH_BLOCKING, TORCH_TPU_DEFER_AND_FUSE */
    int reference;             /* TORCH_TPU_REFERENCE: -1 unset, 0 or 1 */
    int isa;                   /* TORCH_TPU_ISA: -1 unset, else a tpu_isa */
} tpu_config;

/* ---------------------------------------------------------------- init.c */

/* The first step of every public entry point: TPU_ERR_FORKED in a forked
 * child, else initialises the runtime if needed (cheap once done). */
tpu_status tpu_rt_enter(void);

/* tpu_rt_enter, then checks that `chip` names a chip; `fn` is the public
 * function's name for the message. */
tpu_status tpu_rt_enter_chip(const char *fn, int chip);

/* Chips of this process; valid only after a successful tpu_rt_enter. */
int tpu_rt_chip_count(void);

/* ---------------------------------------------------------------- chip.c */

/* What a generation is, before any configured memory limit. */
typedef struct {
    const char *short_name; /* "v5e" */
    uint64_t hbm_bytes;
    double hbm_bandwidth;
    double peak_bf16_flops;
    int32_t mxu_size;
} tpu_generation_model;

/* The model of `gen`, which must be a valid generation. */
const tpu_generation_model *tpu_generation_model_of(tpu_generation gen);

/* Fills the chip table from the target; called once by init. */
tpu_status tpu_chip_setup(const tpu_config *cfg, int chips);

/* Properties of a valid chip (the stored table entry). */
const tpu_chip_props *tpu_chip_props_of(int chip);

/* ----------------------------------------------------------------- mem.c */

/* Sets every chip's capacity from the chip table; called once by init. */
void tpu_mem_setup(int chips);

/* Whether [p, p + nbytes) lies inside the bytes asked for by one live
 * block of `chip` (or, with any_chip, of any chip). TPU_OK, or
 * TPU_ERR_OUT_OF_BOUNDS with a message naming the range. */
tpu_status tpu_mem_check_range(int chip, bool any_chip, const void *p, uint64_t nbytes);

/* A range of device memory a record names: a storage's start and size. */
typedef struct {
    const void *p;
    uint64_t nbytes;
} tpu_mem_range;

/* The common case of tpu_mem_check_range for a whole record, under one
 * lock: the index of the first of ranges[0, n) that is not within a live
 * block of `chip` starting at its p, or n if all are. Sets no error: the
 * caller asks tpu_mem_check_range about the ranges from that index on
 * (another chip's block, an interior address, or the message). The
 * stream's submit path runs it on every record. */
int tpu_mem_first_unlisted(int chip, const tpu_mem_range *ranges, int n);

/* -------------------------------------------------------------- record.c */

/* Bytes of the compact form of a checked record `op`: its fields, and of
 * each tensor it uses (out, n_in inputs, n_aux further outputs) only the
 * ndim dims in use. A multiple of 16, at most sizeof(tpu_op) + 256. */
size_t tpu_record_packed_size(const tpu_op *op);

/* Writes the compact form of `op` to dst: tpu_record_packed_size(op)
 * bytes, dst 8-aligned. */
void tpu_record_pack(const tpu_op *op, void *dst);

/* Rebuilds into *op the record packed at src; the slots and dims it does
 * not use read as zero (absent). */
void tpu_record_unpack(const void *src, tpu_op *op);

/* -------------------------------------------------------------- stream.c */

/* The stream `index` of `chip` if it was ever created, else NULL (a stream
 * that does not exist has no queued work). Never creates one. */
tpu_stream *tpu_stream_peek(int chip, int index);

/* Sequence number of the last record queued on / run by the stream. */
uint64_t tpu_stream_submitted_seq(const tpu_stream *stream);
uint64_t tpu_stream_completed_seq(const tpu_stream *stream);

/* Internal waits: block until the stream has run record `seq`, or until
 * every stream of `chip` has run what was queued when the call started.
 * Kept errors are left in place for the user's next synchronising call. */
void tpu_stream_wait_seq(tpu_stream *stream, uint64_t seq);
void tpu_chip_drain(int chip);

/* Returns (and forgets) the error kept on the stream if it came from a
 * record numbered <= upto_seq, setting the thread's message; else TPU_OK. */
tpu_status tpu_stream_take_error(tpu_stream *stream, uint64_t upto_seq);

/* Queue the records behind events (see event.c). The record entry holds a
 * reference to `event` that the worker drops after stamping it. *seq gets
 * the record's sequence number on `stream`. */
tpu_status tpu_stream_enqueue_event_record(tpu_stream *stream, tpu_event *event, uint64_t gen,
                                           uint64_t *seq);
tpu_status tpu_stream_enqueue_event_wait(tpu_stream *stream, tpu_stream *other, uint64_t seq);

/* The allocator's markers: what happened to a block of device memory at
 * this point of its stream. They run nothing. In fused mode the planner
 * reads them (a freed value need not be written; src/fuse), and the
 * allocated statistics are counted as they run, in stream order, so that
 * a value the device never writes (it lives and dies inside a fused
 * group) never counts as allocated (tpu_mem_mark_ran). */
typedef enum {
    TPU_MARK_ALLOC,   /* allocated here */
    TPU_MARK_FREE,    /* freed here: nothing after it may read what it held */
    TPU_MARK_RELEASE, /* freed here, but another stream's work may still read it */
} tpu_mark_kind;

typedef struct { /* 16 bytes, as small as a stream's other entries */
    const void *ptr;
    uint64_t nbytes : 56; /* the block's (rounded) size */
    uint64_t kind : 2;    /* tpu_mark_kind */
    uint64_t pool : 2;    /* tpu_mem_pool of its segment */
    uint64_t pairs : 1;   /* FREE: no other stream ever used the block */
} tpu_block_mark;
_Static_assert(sizeof(tpu_block_mark) == 16, "a mark takes a stream entry's 16 bytes");

/* Queues mark m on the stream (fused mode holds it with the records
 * around it). Returns false, queueing nothing, on a stream worker (a full
 * ring would make it wait for itself). The allocator queues a FREE before
 * the block can be handed out again. */
bool tpu_stream_enqueue_mark(tpu_stream *stream, const tpu_block_mark *m);

/* Whether the calling thread is a stream worker. */
bool tpu_stream_on_worker(void);

/* (mem.c) The stream calls it as mark m runs: counts the block of an
 * ALLOC mark into the chip's allocated statistics (allocation,
 * allocated_bytes), that of a FREE or RELEASE mark out of them, or, with
 * `written` false (a fused group never wrote the block between its ALLOC
 * and its FREE), neither. The allocator queues a mark instead of counting
 * at once only in fused mode, and for blocks counted in by one. */
void tpu_mem_mark_ran(int chip, const tpu_block_mark *m, bool written);

/* --------------------------------------------------------------- event.c */

/* Called by a stream worker when it reaches a record of generation `gen`:
 * stamps the completion time if `gen` is still the event's latest. */
void tpu_event_stamp(tpu_event *event, uint64_t gen);

/* Drops one reference; the last one destroys the event. */
void tpu_event_unref(tpu_event *event);

/* -------------------------------------------------------------- signal.c */

struct tpu_signal;

/* One more reference (a queued wait's), and dropping one; the last one
 * destroys the signal. */
void tpu_signal_ref(struct tpu_signal *signal);
void tpu_signal_unref(struct tpu_signal *signal);

/* The CLOCK_MONOTONIC time, in ns, `timeout_ms` from now; 0 (no deadline)
 * for a negative timeout. */
int64_t tpu_signal_deadline_ns(int64_t timeout_ms);

/* Blocks until the signal is set or the deadline (0: none) passes; the
 * wait hooks bracket it on a host thread. TPU_OK, or the failure with the
 * thread's message naming the signal. */
tpu_status tpu_signal_wait(struct tpu_signal *signal, int64_t deadline_ns, bool host_thread);

/* ---------------------------------------------------------------- wait.c */

/* What tpu_rt_wait_begin hands to tpu_rt_wait_end. */
typedef struct {
    const void *hooks; /* the hooks in force at the start of the wait */
    void *state;       /* what their begin returned */
} tpu_wait_token;

/* Bracket every blocking wait of a host thread (see wait.c). Call them
 * with no runtime lock held. */
tpu_wait_token tpu_rt_wait_begin(void);
void tpu_rt_wait_end(tpu_wait_token token);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t tpu_rt_now_ns(void);

/* Polls, unlocked, until *counter >= target (true; an acquire load, so
 * what was written before the counter's release is visible) or `ns` have
 * passed (false). For a thread about to sleep on a condition variable
 * whose wake-up, on a VM, costs more than a small op takes. Every few
 * polls it yields the core: the host thread, the stream worker and the
 * pool's workers are more threads than the cores, and a poller that
 * never yields keeps the thread it waits for off the core. */
bool tpu_rt_poll_until(const _Atomic uint64_t *counter, uint64_t target, uint64_t ns);

/* A lock for sections of a few hundred nanoseconds that must not end in a
 * full barrier: its release is a plain release store, where unlocking a
 * pthread mutex drains the store buffer (a few hundred nanoseconds after
 * writing lines another core holds). A waiter spins, yielding the core
 * every few polls. Never held across a wait. */
void tpu_rt_spin_lock(_Atomic bool *lock);
void tpu_rt_spin_unlock(_Atomic bool *lock);

/* An asymmetric store-load barrier pair, for a Dekker handshake whose one
 * side runs on every queued record and the other only before a thread
 * sleeps: "I stored X, did the barrier, then loaded Y" on both sides
 * means at least one side sees the other's store.
 *   tpu_rt_light_barrier  the hot side: a compiler barrier where the
 *                         kernel can make the heavy side interrupt every
 *                         thread of the process (Linux membarrier), else
 *                         a full fence
 *   tpu_rt_heavy_barrier  the sleeping side: that process-wide barrier
 *                         (about 2 us), else a full fence */
void tpu_rt_light_barrier(void);
void tpu_rt_heavy_barrier(void);
/* Sets the pair up; call before starting a thread that uses it. Once
 * registered, the process-wide barrier cannot fail. */
void tpu_rt_barriers_setup(void);

/* ---------------------------------------------------------------- mode.c */

/* Sets the initial mode from the configuration; called once by init. */
void tpu_mode_setup(tpu_mode mode);

/* ---------------------------------------------------------------- pool.c */

/* Sets the pool size (threads, caller included) and whether the runtime's
 * threads are bound to cores; called once by init. The worker threads
 * start on the first parallel region. */
void tpu_pool_setup(int num_threads, bool bind);

/* Binds stream worker t to the core of share 0 if it is the first stream
 * worker and the pool binds its threads (see pool.c, "Binding");
 * otherwise, or when the process may no longer run on that core, does
 * nothing. */
void tpu_pool_bind_stream_worker(pthread_t t);

#endif
