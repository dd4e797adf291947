/* Streams: a bounded ring of records per stream and one worker thread that
 * runs them in order.
 *
 * The ring is TPU_STREAM_RING_BYTES of memory allocated with the stream.
 * Queueing a record packs it into the ring (record.c: only the operands
 * and dims it uses, a few hundred bytes for most ops), with no heap
 * allocation per op, and bounds the host memory that queued work can
 * take. Entries have variable length and never wrap around the end: one
 * that does not fit before it starts at the beginning, and a pad entry
 * fills the rest. A submitter that finds no room waits for the worker to
 * free some; that wait, like every blocking wait of a host thread, runs
 * between the wait hooks (see wait.c), so a Python caller gives up the GIL
 * while it waits.
 *
 * Submitters take the stream's submit_lock among themselves; the worker
 * takes no lock to find, run and free a record. The two sides meet only
 * through atomic counters (the ring's tail and head, submitted_seq and
 * completed_seq) and, when one of them sleeps, a mutex and condition
 * variables (see the struct for the protocol).
 *
 * Every record gets the next sequence number of its stream when it is
 * queued (submitted_seq) and the worker publishes the number of the last
 * record it has run (completed_seq). Waiting for "everything so far" is
 * waiting for completed_seq to reach the submitted_seq read at the start.
 *
 * A kernel error in strict or fused mode is kept on the stream (the first
 * one only) and later records still run; the next synchronising call
 * returns it once. In debug mode the submitting thread drains the stream
 * and runs the record itself. The worker only starts the head record when
 * every earlier number has completed, which keeps that inline run in
 * order with the queue. */
#define _POSIX_C_SOURCE 200809L

#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime_internal.h"
#include "target.h"
#include "tpu/signal.h"

typedef enum {
    ENTRY_OP,
    ENTRY_HOST_FN,
    ENTRY_EVENT_RECORD,
    ENTRY_EVENT_WAIT,
    ENTRY_SIGNAL_WAIT,
    ENTRY_MARK, /* the allocator's mark on a block (tpu_block_mark): counted, nothing run */
    ENTRY_PAD,  /* only in the ring: the unused end of the buffer */
} entry_kind;

/* What an entry other than a record carries. */
typedef union {
        struct {
            void (*fn)(void *ctx);
            void *ctx;
        } host;
        struct {
            tpu_event *event; /* holds a reference */
            uint64_t gen;
        } record;
        struct {
            tpu_stream *stream; /* run once this stream has run record seq */
            uint64_t seq;
        } wait;
        struct {
            struct tpu_signal *signal; /* holds a reference */
            int64_t deadline_ns;       /* CLOCK_MONOTONIC; 0: none */
        } signal;
        tpu_block_mark mark;
} entry_args;

/* An entry as it runs: unpacked from the ring by the worker, or built on
 * the stack by a debug-mode submitter. */
typedef struct entry {
    entry_kind kind;
    uint64_t seq;
    union {
        tpu_op op; /* a copy: the caller may reuse its record at once */
        entry_args a;
    } u;
} entry;

/* The head of an entry in the ring; the packed record (ENTRY_OP) or the
 * entry_args follow it. */
typedef struct {
    uint16_t kind;   /* entry_kind */
    uint16_t hold;   /* queued in fused mode and fusable: the worker may hold it (hold_kind) */
    uint32_t nbytes; /* the whole entry, this head included; a multiple of 16 */
    uint64_t seq;
} ring_head;
_Static_assert(sizeof(ring_head) == 16 && TPU_STREAM_RING_BYTES % 16 == 0,
               "entries and the ring must keep 16-byte alignment");

/* The fields are grouped by who writes them, one cache line per group,
 * so that the submitting thread and the worker do not pull each other's
 * lines for nothing: on the hot path a queued record costs the worker's
 * read of the submitters' line and the submitter's read of the worker's
 * completed_seq (the allocator's), and nothing else but the entry's bytes.
 * No lock is taken on that path by the worker, nor by a lone submitter
 * beyond its own uncontended submit_lock.
 *
 * The ring's positions are byte counters that only grow: `tail` is every
 * byte ever queued (pads included), `head` every byte freed; the offset in
 * the buffer is the counter modulo TPU_STREAM_RING_BYTES. Submitters write
 * only in [tail, head + TPU_STREAM_RING_BYTES), the worker reads only in
 * [head, tail). */
struct tpu_stream {
    /* Set at creation, then only read. */
    int chip;
    int index;
    unsigned char *ring;
    struct fuse_state *fuse; /* the worker's, made on first use */

    /* Written by submitters, under submit_lock (a spin lock: see
     * tpu_rt_spin_lock), and read by no other thread but through
     * tpu_stream_submitted_seq: the submitters' own copies of the tail
     * and of the last number given, and head_seen, the last head a
     * submitter read, so that the room check reads the worker's line only
     * when the ring looks full. A submitter thus never reads a line the
     * worker polls, which would wait for the worker's copy. */
    _Alignas(64) atomic_bool submit_lock;
    _Atomic uint64_t tail_mine; /* relaxed: read unlocked by claim_ring_lines */
    _Atomic uint64_t queued_seq;
    uint64_t head_seen;

    /* What submitters publish, once per entry, for the worker to poll
     * (release, tail first: whoever sees the number sees the entry). */
    _Alignas(64) _Atomic uint64_t tail;
    _Atomic uint64_t submitted_seq;

    /* Written by the worker (completed_seq also by a debug-mode submitter
     * that runs a record inline). Both never go backwards; readers take
     * them with acquire. */
    _Alignas(64) _Atomic uint64_t head;
    _Atomic uint64_t completed_seq;

    /* Who sleeps, and why: written when a thread goes to sleep or wakes,
     * read by the other side on every record, so they sit apart from the
     * counters. Each sleeper stores its flag, then checks its condition
     * under `lock`; each waker stores its counter, then reads the flag
     * and, if set, signals under `lock`. A store-load barrier on both
     * sides means that either the sleeper sees the new counter or the
     * waker sees the flag, and a signal given under the lock cannot fall
     * between the sleeper's check and its wait. The barriers are seq_cst
     * accesses, except between a submitter and the sleeping worker: there
     * the submitter, once per record, has only tpu_rt_light_barrier and
     * the worker, before it sleeps, tpu_rt_heavy_barrier. A full barrier
     * after packing a record would wait for the entry's cache lines to
     * come back from the worker's core: about 200 ns a record.
     *   worker_sleeping  the worker waits on work_cv (idle, or holding)
     *   done_wake_at     the lowest completed_seq a host thread sleeps
     *                    for on done_cv (UINT64_MAX: none); a waiter
     *                    lowers it, the waker that reaches it resets it
     *                    and wakes them all, and those still short of
     *                    their number lower it again. One wake-up per
     *                    wait, not one per completed record: a thread
     *                    that waits for the last of many records would
     *                    otherwise wake (a futex call and a context
     *                    switch on both sides) for every one of them.
     *   space_waiters    submitters wait on space_cv for room (head)
     * Fused mode (see "holding" below): `holding` says the worker holds a
     * run, so that only an entry that ends it, a threshold or a flush
     * wakes it; `flush_seq` is the highest record a host thread waits
     * for: held records up to it must run now. */
    _Alignas(64) _Atomic bool worker_sleeping;
    _Atomic bool holding;
    _Atomic uint64_t done_wake_at;
    _Atomic int space_waiters;
    _Atomic uint64_t flush_seq;

    /* Sleeping and waking, and the kept error. */
    _Alignas(64) pthread_mutex_t lock;
    pthread_cond_t work_cv;  /* the worker waits for a runnable head */
    pthread_cond_t done_cv;  /* waiters for completed_seq */
    pthread_cond_t space_cv; /* submitters waiting for room */
    /* The first kernel error not yet reported, under lock. */
    tpu_status error;
    uint64_t error_seq;
    char error_msg[TPU_MSG_MAX];
};

/* Streams are created on first use and never destroyed. A slot is written
 * once, with release after the stream is fully built, and read with
 * acquire, so a reader that sees the pointer sees an initialised stream. */
static _Atomic(tpu_stream *) g_streams[TPU_CHIPS_MAX][TPU_STREAMS_MAX];
static pthread_mutex_t g_create_lock = PTHREAD_MUTEX_INITIALIZER;
/* Round-robin cursor per chip; relaxed: only its own value matters. */
static atomic_uint g_next_pool[TPU_CHIPS_MAX];

static const char k_blocking_hint[] = ". Run with TPU_LAUNCH_BLOCKING=1 to raise it at the call.";

/* Set on stream workers: what they free queues no mark (a full ring
 * would make a worker wait for itself), and their waits need no hooks. */
static _Thread_local bool t_is_worker;

/* ------------------------------------------------------------ sequences */

uint64_t tpu_stream_submitted_seq(const tpu_stream *s) {
    /* Relaxed: a caller needs the records it queued itself, which program
     * order already makes visible; others' records it must have
     * synchronised with by other means, as on CUDA. The submitters' copy,
     * stored before the worker's: see the struct. */
    return atomic_load_explicit(&s->queued_seq, memory_order_relaxed);
}

uint64_t tpu_stream_completed_seq(const tpu_stream *s) {
    /* Acquire pairs with the worker's release store: whoever sees record N
     * completed also sees what it wrote (results, and memory it no longer
     * touches, which the allocator may then hand out again). */
    return atomic_load_explicit(&s->completed_seq, memory_order_acquire);
}

/* Before a thread sleeps on a condition it polls the counter behind it
 * for a while: waking a sleeping thread costs tens of microseconds on a
 * VM, more than a small op takes, and up to a few hundred when the other
 * vCPU has gone idle (measured 2026-12-06: a single 1M-element mul, issued
 * after a pause, took 0.66 ms against the CPU's 0.41 with spins of 50 and
 * 30 us, 0.52 with these).
 *   HOST_SPIN_NS       a host thread waiting for records, holding the GIL
 *                      (the wait hooks release it only to wait longer);
 *                      CUDA's synchronize spins too
 *   HOST_SPIN_FREE_NS  then without the GIL, before it sleeps
 *   WORKER_SPIN_NS     an idle worker waiting for the next record: small
 *                      ops run faster than Python issues them, so without
 *                      it each submit would pay a futex wake-up and the
 *                      worker a context switch
 * A polling thread yields its core every microsecond or so
 * (tpu_rt_poll_until), so it delays no runnable thread. */
#define HOST_SPIN_NS 30000
#define HOST_SPIN_FREE_NS 1000000
#define WORKER_SPIN_NS 1000000

/* Wakes the worker if it sleeps (see the struct: the caller has stored,
 * seq_cst, what the worker's condition reads). */
static void wake_worker(tpu_stream *s) {
    if (atomic_load(&s->worker_sleeping)) {
        pthread_mutex_lock(&s->lock);
        pthread_cond_signal(&s->work_cv);
        pthread_mutex_unlock(&s->lock);
    }
}

/* Fused mode: asks the worker to run held records up to `seq` now. */
static void request_flush(tpu_stream *s, uint64_t seq) {
    uint64_t cur = atomic_load(&s->flush_seq);
    while (cur < seq && !atomic_compare_exchange_weak(&s->flush_seq, &cur, seq)) {
    }
    wake_worker(s);
}

void tpu_stream_wait_seq(tpu_stream *s, uint64_t seq) {
    if (atomic_load_explicit(&s->completed_seq, memory_order_acquire) >= seq)
        return;
    request_flush(s, seq);
    if (tpu_rt_poll_until(&s->completed_seq, seq, HOST_SPIN_NS))
        return;
    tpu_wait_token token = tpu_rt_wait_begin();
    if (tpu_rt_poll_until(&s->completed_seq, seq, HOST_SPIN_FREE_NS)) {
        tpu_rt_wait_end(token);
        return;
    }
    pthread_mutex_lock(&s->lock);
    for (;;) {
        /* seq_cst, both: before the check (see the struct). A lower
         * number already there wakes this thread first, to lower it again. */
        uint64_t at = atomic_load(&s->done_wake_at);
        while (seq < at && !atomic_compare_exchange_weak(&s->done_wake_at, &at, seq)) {
        }
        if (atomic_load(&s->completed_seq) >= seq)
            break;
        pthread_cond_wait(&s->done_cv, &s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    tpu_rt_wait_end(token);
}

/* Marks every record up to `seq` done and wakes whoever waits for it:
 * host threads, and the worker when a debug-mode submitter completes a
 * record it ran inline. Records complete in order. */
static void complete_upto(tpu_stream *s, uint64_t seq) {
    assert(seq > atomic_load_explicit(&s->completed_seq, memory_order_relaxed));
    /* seq_cst: publishes the records' effects to acquiring readers, and
     * orders the store before the flag reads below. */
    atomic_store(&s->completed_seq, seq);
    if (atomic_load(&s->done_wake_at) <= seq) {
        pthread_mutex_lock(&s->lock);
        atomic_store(&s->done_wake_at, UINT64_MAX); /* the woken re-register */
        pthread_cond_broadcast(&s->done_cv);
        pthread_mutex_unlock(&s->lock);
    }
    if (!t_is_worker)
        wake_worker(s);
}

/* ---------------------------------------------------------------- errors */

/* "<name> (op #<seq> on tpu:<chip> stream <idx>): <kernel message>", plus
 * the debug-mode hint for errors that surface late. */
static void format_op_error(char *buf, size_t cap, const tpu_stream *s, const tpu_op *op,
                            uint64_t seq, tpu_status st, const char *kernel_msg, bool hint) {
    const char *name = op->name ? op->name : tpu_op_fn_name(op->code, op->fn);
    if (!kernel_msg[0])
        kernel_msg = tpu_status_str(st);
    /* Drop one trailing period so the hint does not double it. */
    int len = (int)strlen(kernel_msg);
    if (hint && len > 0 && kernel_msg[len - 1] == '.')
        len--;
    snprintf(buf, cap, "%s (op #%" PRIu64 " on tpu:%d stream %d): %.*s%s", name, seq, s->chip,
             s->index, len, kernel_msg, hint ? k_blocking_hint : "");
}

tpu_status tpu_stream_take_error(tpu_stream *s, uint64_t upto_seq) {
    char msg[TPU_MSG_MAX];
    pthread_mutex_lock(&s->lock);
    tpu_status st = TPU_OK;
    if (s->error != TPU_OK && s->error_seq <= upto_seq) {
        st = s->error;
        memcpy(msg, s->error_msg, sizeof msg);
        s->error = TPU_OK;
    }
    pthread_mutex_unlock(&s->lock);
    if (st != TPU_OK)
        return tpu_set_error(st, "%s", msg);
    return TPU_OK;
}

/* --------------------------------------------------------------- running */


/* Runs one record on the calling thread (the worker, or the submitter in
 * debug mode). On error the thread's message says why. */
static tpu_status entry_run(tpu_stream *s, entry *e) {
    switch (e->kind) {
    case ENTRY_OP:
        return tpu_target_get()->execute(s->chip, &e->u.op);
    case ENTRY_HOST_FN:
        e->u.a.host.fn(e->u.a.host.ctx);
        return TPU_OK;
    case ENTRY_EVENT_RECORD:
        tpu_event_stamp(e->u.a.record.event, e->u.a.record.gen);
        tpu_event_unref(e->u.a.record.event);
        return TPU_OK;
    case ENTRY_EVENT_WAIT:
        tpu_stream_wait_seq(e->u.a.wait.stream, e->u.a.wait.seq);
        return TPU_OK;
    case ENTRY_SIGNAL_WAIT: {
        tpu_status st = tpu_signal_wait(e->u.a.signal.signal, e->u.a.signal.deadline_ns, !t_is_worker);
        tpu_signal_unref(e->u.a.signal.signal);
        return st;
    }
    case ENTRY_MARK:
        tpu_mem_mark_ran(s->chip, &e->u.a.mark, true);
        return TPU_OK;
    case ENTRY_PAD:
        break;
    }
    assert(!"unknown entry kind");
    return TPU_ERR_INTERNAL;
}

/* The entry that starts at ring counter `at`. */
static const ring_head *entry_at(const tpu_stream *s, uint64_t at) {
    return (const ring_head *)(s->ring + at % TPU_STREAM_RING_BYTES);
}

/* The worker frees the ring up to counter `head`; a submitter may be
 * waiting for the room. */
static void free_upto(tpu_stream *s, uint64_t head) {
    atomic_store(&s->head, head); /* seq_cst: before the flag read (see the struct) */
    if (atomic_load(&s->space_waiters) > 0) {
        pthread_mutex_lock(&s->lock);
        pthread_cond_broadcast(&s->space_cv);
        pthread_mutex_unlock(&s->lock);
    }
}

/* The head entry, if it can run now (the worker's view): queued, a pad
 * before it dropped, and every earlier record completed (a debug-mode
 * submitter may be running one inline). NULL otherwise. */
static const ring_head *runnable_head(tpu_stream *s) {
    uint64_t head = atomic_load_explicit(&s->head, memory_order_relaxed);
    uint64_t tail = atomic_load(&s->tail); /* seq_cst: see the struct */
    if (head == tail)
        return NULL;
    const ring_head *h = entry_at(s, head);
    if (h->kind == ENTRY_PAD) {
        /* Queued with the entry after it, at the start of the buffer. */
        head += h->nbytes;
        assert(head != tail);
        atomic_store_explicit(&s->head, head, memory_order_release);
        h = entry_at(s, head);
    }
    return h->seq == atomic_load(&s->completed_seq) + 1 ? h : NULL;
}

/* Rebuilds the entry whose head is h (see enqueue). */
static void entry_unpack(const ring_head *h, entry *e) {
    e->kind = (entry_kind)h->kind;
    e->seq = h->seq;
    if (e->kind == ENTRY_OP)
        tpu_record_unpack(h + 1, &e->u.op);
    else
        memcpy(&e->u.a, h + 1, sizeof e->u.a);
}

/* ----------------------------------------------------------- fused mode */

/* In fused mode an entry queued with `hold` set (a record the planner can
 * fuse, or one of the allocator's marks) is not run at once: the worker
 * holds the run of such entries at the head until it ends (an entry
 * without `hold` is queued behind it, or a product, HOLD_STARTS, that
 * heads the next run so that its epilogue can join it), reaches HOLD_MAX_ENTRIES, a host thread waits for one
 * of them (flush_seq: every wait goes through tpu_stream_wait_seq), a
 * submitter waits for room in the ring, no entry has joined it for
 * HOLD_GAP_NS (the host is doing other things), or HOLD_MAX_NS have
 * passed since the run started. The gap rather than a fixed time keeps
 * one group for a host that issues a long run in bursts: a foreach
 * optimizer step's Python takes several milliseconds between its first
 * record and its last, and a run cut in the middle writes and reads back
 * every tensor the two halves share. Then the planner (src/fuse) cuts the run into groups and
 * the target runs each group as one pass over memory; a record that joins
 * no group runs as in strict mode. Deferred work is bounded by the ring,
 * as in strict mode. */
/* What `hold` says of an entry. A record that only starts groups (a
 * matrix product, whose epilogue follows it) ends the run before it and
 * heads the next. */
enum hold_kind { HOLD_NONE = 0, HOLD_JOINS, HOLD_STARTS };

static uint16_t hold_of(const tpu_op *op) {
    if (tpu_mode_get() != TPU_MODE_FUSED || !tpu_fuse_fusable(op))
        return HOLD_NONE;
    return tpu_fuse_starts_group(op) ? HOLD_STARTS : HOLD_JOINS;
}

#define HOLD_MAX_ENTRIES 4096 /* records and marks; the planner takes 2,048 records a group */
#define HOLD_GAP_NS 2000000
#define HOLD_MAX_NS 20000000

struct fuse_state {
    tpu_op ops[HOLD_MAX_ENTRIES];
    tpu_fuse_entry entries[HOLD_MAX_ENTRIES];
    uint64_t seqs[HOLD_MAX_ENTRIES];
    tpu_block_mark marks[HOLD_MAX_ENTRIES];
    bool unwritten[HOLD_MAX_ENTRIES]; /* marks not counted (tpu_fuse_unwritten_blocks) */
    tpu_fuse_plan plan;
    int n_scratch; /* per-share scratch tiles, made on the first group */
    void *scratch[TPU_THREADS_MAX];
};

/* What fused mode did, over every stream (tpu_fusion_get_stats). */
static _Atomic uint64_t g_fuse_groups, g_fuse_records, g_fuse_values, g_fuse_bytes;

void tpu_fusion_get_stats(tpu_fusion_stats *out) {
    if (!out)
        return;
    out->groups = atomic_load_explicit(&g_fuse_groups, memory_order_relaxed);
    out->fused_records = atomic_load_explicit(&g_fuse_records, memory_order_relaxed);
    out->values_not_written = atomic_load_explicit(&g_fuse_values, memory_order_relaxed);
    out->bytes_not_written = atomic_load_explicit(&g_fuse_bytes, memory_order_relaxed);
}

void tpu_fusion_reset_stats(void) {
    atomic_store(&g_fuse_groups, 0);
    atomic_store(&g_fuse_records, 0);
    atomic_store(&g_fuse_values, 0);
    atomic_store(&g_fuse_bytes, 0);
}

/* TORCH_TPU_FUSE_LOG=1: one line per group on stderr. Read once. */
static bool fuse_log_on(void) {
    static atomic_int on = -1;
    int v = atomic_load_explicit(&on, memory_order_relaxed);
    if (v < 0) {
        const char *e = getenv("TORCH_TPU_FUSE_LOG");
        v = e && e[0] && strcmp(e, "0") != 0;
        atomic_store_explicit(&on, v, memory_order_relaxed);
    }
    return v;
}

static void log_group(const tpu_stream *s, const tpu_fuse_plan *p) {
    char names[256];
    int len = 0;
    for (int i = 0; i < p->n_steps && len < (int)sizeof names - 40; i++) {
        const tpu_op *op = p->steps[i].op;
        len += snprintf(names + len, sizeof names - (size_t)len, "%s%s", i ? " " : "",
                        op->name ? op->name : tpu_op_fn_name(op->code, op->fn));
        if (i + 1 < p->n_steps && len >= (int)sizeof names - 40)
            len += snprintf(names + len, sizeof names - (size_t)len, " ...");
    }
    char shapes[200];
    int sl = 0;
    for (int c = 0; c < p->n_clusters && sl < (int)sizeof shapes - 40; c++) {
        const tpu_fuse_cluster *cl = &p->clusters[c];
        sl += snprintf(shapes + sl, sizeof shapes - (size_t)sl, "%s%d x [", c ? ", " : "",
                       cl->n_steps);
        for (int d = 0; d < cl->ndim && sl < (int)sizeof shapes - 24; d++)
            sl += snprintf(shapes + sl, sizeof shapes - (size_t)sl, "%s%" PRId64, d ? ", " : "",
                           cl->sizes[d]);
        sl += snprintf(shapes + sl, sizeof shapes - (size_t)sl, "]");
    }
    fprintf(stderr,
            "tpu fuse: tpu:%d stream %d: %d records (%s): %s; %d values not written (%" PRId64
            " bytes)\n",
            s->chip, s->index, p->n_steps, shapes, names, p->n_elided, p->bytes_elided);
}

/* The run of held entries at the head, as the worker scans it. */
typedef struct {
    int n;        /* entries (pads not counted) */
    bool ended;   /* an entry without `hold` follows */
    uint64_t end; /* the ring counter after them (and their pads) */
} held_run;

static void scan_held(const tpu_stream *s, held_run *r) {
    uint64_t at = atomic_load_explicit(&s->head, memory_order_relaxed);
    const uint64_t tail = atomic_load(&s->tail); /* seq_cst: see the struct */
    r->n = 0;
    r->ended = false;
    while (at < tail && r->n < HOLD_MAX_ENTRIES) {
        const ring_head *h = entry_at(s, at);
        if (h->kind == ENTRY_PAD) {
            at += h->nbytes;
            continue;
        }
        if (h->hold == HOLD_NONE || (h->hold == HOLD_STARTS && r->n > 0)) {
            r->ended = true;
            break;
        }
        r->n++;
        at += h->nbytes;
    }
    r->end = at;
}

/* Keeps the first error of a run: its op, number and message. */
typedef struct {
    tpu_status st;
    uint64_t seq;
    char msg[TPU_MSG_MAX];
} run_error;

static void note_error(const tpu_stream *s, run_error *err, const tpu_op *op, uint64_t seq,
                       tpu_status st) {
    if (st == TPU_OK || err->st != TPU_OK)
        return;
    err->st = st;
    err->seq = seq;
    format_op_error(err->msg, sizeof err->msg, s, op, seq, st, tpu_last_error_message(), true);
}

/* A failed wait for a host signal: its message names the awaited work. */
static void note_wait_error(run_error *err, uint64_t seq, tpu_status st) {
    err->st = st;
    err->seq = seq;
    snprintf(err->msg, sizeof err->msg, "%s", tpu_last_error_message());
}

/* Keeps err on the stream unless it already keeps an earlier error (the
 * first one only is reported). Under lock. */
static void keep_error_locked(tpu_stream *s, const run_error *err) {
    if (err->st == TPU_OK || s->error != TPU_OK)
        return;
    s->error = err->st;
    s->error_seq = err->seq;
    memcpy(s->error_msg, err->msg, sizeof s->error_msg);
}

static struct fuse_state *fuse_state_of(tpu_stream *s) {
    if (!s->fuse)
        s->fuse = calloc(1, sizeof *s->fuse);
    return s->fuse;
}

/* Scratch tiles for every share of the pool, made once; false if the host
 * has no memory for them (the group's records then run one by one). */
static bool fuse_scratch(struct fuse_state *f) {
    if (f->n_scratch > 0)
        return true;
    int n = tpu_pool_num_threads();
    for (int i = 0; i < n; i++) {
        f->scratch[i] = aligned_alloc(64, (size_t)TPU_FUSE_SCRATCH_BYTES);
        if (!f->scratch[i]) {
            while (i-- > 0)
                free(f->scratch[i]);
            return false;
        }
    }
    f->n_scratch = n;
    return true;
}

static tpu_fuse_entry_kind fuse_kind_of(const tpu_block_mark *m) {
    switch ((tpu_mark_kind)m->kind) {
    case TPU_MARK_ALLOC:
        return TPU_FUSE_ALLOCATED;
    case TPU_MARK_FREE:
        return TPU_FUSE_FREED;
    case TPU_MARK_RELEASE:
        break;
    }
    return TPU_FUSE_RELEASED;
}

/* Runs the marks of entries [i, i + n) in stream order: each counts its
 * block, but for those the group's plan found unwritten (if `unwritten`). */
static void run_marks(const tpu_stream *s, const struct fuse_state *f, int i, int n,
                      const bool *unwritten) {
    for (int k = i; k < i + n; k++)
        if (f->entries[k].kind != TPU_FUSE_RECORD)
            tpu_mem_mark_ran(s->chip, &f->marks[k], !(unwritten && unwritten[k]));
}

/* Runs the held run r, keeping its first error in *err. */
static void run_held(tpu_stream *s, const held_run *r, run_error *err) {
    const tpu_target *target = tpu_target_get();
    struct fuse_state *f = fuse_state_of(s);
    uint64_t at = atomic_load_explicit(&s->head, memory_order_relaxed);
    for (int n = 0; n < r->n;) {
        const ring_head *h = entry_at(s, at);
        at += h->nbytes;
        if (h->kind == ENTRY_PAD)
            continue;
        if (!f) { /* no host memory for planning: one by one */
            entry e;
            entry_unpack(h, &e);
            if (e.kind == ENTRY_OP)
                note_error(s, err, &e.u.op, e.seq, target->execute(s->chip, &e.u.op));
            else
                (void)entry_run(s, &e); /* a mark */
            n++;
            continue;
        }
        f->seqs[n] = h->seq;
        if (h->kind == ENTRY_OP) {
            tpu_record_unpack(h + 1, &f->ops[n]);
            f->entries[n] = (tpu_fuse_entry){.kind = TPU_FUSE_RECORD, .op = &f->ops[n]};
        } else {
            entry_args a;
            memcpy(&a, h + 1, sizeof a);
            f->marks[n] = a.mark;
            f->entries[n] = (tpu_fuse_entry){.kind = fuse_kind_of(&a.mark),
                                             .block = a.mark.ptr,
                                             .nbytes = a.mark.nbytes,
                                             .pairs = a.mark.pairs};
        }
        n++;
    }
    if (!f)
        return;
    for (int i = 0; i < r->n;) {
        tpu_fuse_plan *p = &f->plan;
        int taken = tpu_fuse_plan_group(&f->entries[i], r->n - i, p);
        if (p->n_steps >= 2 && fuse_scratch(f)) {
            int failed = 0;
            tpu_status st = target->execute_group(s->chip, p, f->scratch, f->n_scratch, &failed);
            if (st != TPU_OK) {
                int k = i + p->steps[failed].entry;
                note_error(s, err, &f->ops[k], f->seqs[k], st);
            }
            tpu_fuse_unwritten_blocks(p, &f->entries[i], taken, &f->unwritten[i]);
            run_marks(s, f, i, taken, f->unwritten);
            atomic_fetch_add_explicit(&g_fuse_groups, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&g_fuse_records, (uint64_t)p->n_steps, memory_order_relaxed);
            atomic_fetch_add_explicit(&g_fuse_values, (uint64_t)p->n_elided, memory_order_relaxed);
            atomic_fetch_add_explicit(&g_fuse_bytes, (uint64_t)p->bytes_elided,
                                      memory_order_relaxed);
            if (fuse_log_on())
                log_group(s, p);
        } else {
            for (int k = i; k < i + taken; k++)
                if (f->entries[k].kind == TPU_FUSE_RECORD)
                    note_error(s, err, &f->ops[k], f->seqs[k],
                               target->execute(s->chip, &f->ops[k]));
            run_marks(s, f, i, taken, NULL);
        }
        i += taken;
    }
}

static struct timespec deadline_after(uint64_t start_ns, uint64_t ns) {
    uint64_t t = start_ns + ns;
    return (struct timespec){.tv_sec = (time_t)(t / 1000000000u), .tv_nsec = (long)(t % 1000000000u)};
}

/* The worker's turn when the head entry (record `first`) is held: waits
 * until the run is due, runs it, then completes it. */
static void run_held_due(tpu_stream *s, uint64_t first) {
    uint64_t start = tpu_rt_now_ns();
    uint64_t joined = start; /* when the run last grew */
    int seen = 0;
    held_run r;
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->holding, true);
    for (bool announced = false;; announced = !announced) {
        /* Checked once as it stands, then again after announcing the
         * sleep (see the struct), which costs a process-wide barrier. */
        if (announced) {
            atomic_store(&s->worker_sleeping, true);
            tpu_rt_heavy_barrier();
        }
        scan_held(s, &r);
        const uint64_t now = tpu_rt_now_ns();
        if (r.n != seen) {
            seen = r.n;
            joined = now;
        }
        if (r.ended || r.n >= HOLD_MAX_ENTRIES || atomic_load(&s->space_waiters) > 0 ||
            atomic_load(&s->flush_seq) >= first || now - joined >= HOLD_GAP_NS ||
            now - start >= HOLD_MAX_NS)
            break;
        if (!announced)
            continue;
        const uint64_t gap_end = joined + HOLD_GAP_NS, max_end = start + HOLD_MAX_NS;
        struct timespec until = deadline_after(gap_end < max_end ? gap_end : max_end, 0);
        pthread_cond_timedwait(&s->work_cv, &s->lock, &until);
        atomic_store(&s->worker_sleeping, false);
    }
    atomic_store(&s->worker_sleeping, false);
    atomic_store(&s->holding, false);
    pthread_mutex_unlock(&s->lock);

    run_error err = {.st = TPU_OK};
    run_held(s, &r, &err);
    if (err.st != TPU_OK) {
        pthread_mutex_lock(&s->lock);
        keep_error_locked(s, &err);
        pthread_mutex_unlock(&s->lock);
    }
    complete_upto(s, first + (uint64_t)r.n - 1); /* a stream's entries are numbered in order */
    free_upto(s, r.end);
}

/* The worker's idle spell: polls a while for a record, then sleeps until
 * the head can run. */
static void wait_for_work(tpu_stream *s) {
    if (tpu_rt_poll_until(&s->submitted_seq,
                          atomic_load_explicit(&s->completed_seq, memory_order_relaxed) + 1,
                          WORKER_SPIN_NS) &&
        runnable_head(s))
        return;
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->worker_sleeping, true); /* before the check: see the struct */
    tpu_rt_heavy_barrier();
    while (!runnable_head(s))
        pthread_cond_wait(&s->work_cv, &s->lock);
    atomic_store(&s->worker_sleeping, false);
    pthread_mutex_unlock(&s->lock);
}

static void *stream_worker(void *arg) {
    tpu_stream *s = arg;
    t_is_worker = true;
    entry e; /* the head entry, unpacked: what runs */
    for (;;) {
        const ring_head *h = runnable_head(s);
        if (!h) {
            wait_for_work(s);
            continue;
        }
        if (h->hold) {
            run_held_due(s, h->seq);
            continue;
        }
        /* Submitters write only outside [head, tail): the entry stays as
         * it is until free_upto. */
        uint64_t next = atomic_load_explicit(&s->head, memory_order_relaxed) + h->nbytes;
        entry_unpack(h, &e);
        tpu_status st = entry_run(s, &e);
        if (st != TPU_OK) {
            run_error err = {.st = TPU_OK};
            if (e.kind == ENTRY_OP)
                note_error(s, &err, &e.u.op, e.seq, st);
            else
                note_wait_error(&err, e.seq, st);
            pthread_mutex_lock(&s->lock);
            keep_error_locked(s, &err);
            pthread_mutex_unlock(&s->lock);
        }
        complete_upto(s, e.seq);
        free_upto(s, next);
    }
    return NULL;
}

/* Whether an entry of `nbytes` fits after ring counter `tail` with the
 * ring freed up to `head`; *pad: the bytes of pad it needs first. An
 * entry never wraps: if it does not fit before the end of the buffer, a
 * pad (dropped by the worker as it reaches it) fills that end and the
 * entry goes at the start. */
static bool room_for(uint64_t head, uint64_t tail, uint32_t nbytes, uint32_t *pad) {
    const uint32_t cap = TPU_STREAM_RING_BYTES, off = (uint32_t)(tail % cap);
    *pad = cap - off >= nbytes ? 0 : cap - off;
    return cap - (tail - head) >= (uint64_t)*pad + nbytes;
}

/* A submitter without room: waits, between the wait hooks and without
 * submit_lock (see wait.c), until the worker has freed enough. Another
 * submitter may take that room first: the caller checks again. */
static void wait_for_room(tpu_stream *s, uint32_t nbytes) {
    tpu_wait_token token = tpu_rt_wait_begin();
    pthread_mutex_lock(&s->lock);
    atomic_fetch_add(&s->space_waiters, 1);
    if (atomic_load(&s->worker_sleeping)) /* it may be holding records: they must run */
        pthread_cond_signal(&s->work_cv);
    uint32_t pad;
    while (!room_for(atomic_load(&s->head), atomic_load(&s->tail), nbytes, &pad))
        pthread_cond_wait(&s->space_cv, &s->lock);
    atomic_fetch_sub(&s->space_waiters, 1);
    pthread_mutex_unlock(&s->lock);
    tpu_rt_wait_end(token);
}

/* Queues a record (op, packed) or another entry (kind and args) with the
 * next sequence number (returned in *seq if not NULL). A ring without room
 * makes the caller wait for the worker to free some. */
static void enqueue(tpu_stream *s, entry_kind kind, const tpu_op *op, const entry_args *args,
                    uint16_t hold, uint64_t *seq) {
    uint32_t nbytes = (uint32_t)(sizeof(ring_head) + (kind == ENTRY_OP ? tpu_record_packed_size(op)
                                                                       : (sizeof *args + 15) & ~15u));
    /* Any entry then fits in an empty ring, pad included. */
    assert(nbytes <= TPU_STREAM_RING_BYTES / 2);
    tpu_rt_spin_lock(&s->submit_lock);
    uint64_t tail = atomic_load_explicit(&s->tail_mine, memory_order_relaxed);
    uint32_t pad;
    while (!room_for(s->head_seen, tail, nbytes, &pad)) {
        /* Acquire: the worker is done with the bytes it freed. */
        s->head_seen = atomic_load_explicit(&s->head, memory_order_acquire);
        if (room_for(s->head_seen, tail, nbytes, &pad))
            break;
        tpu_rt_spin_unlock(&s->submit_lock);
        wait_for_room(s, nbytes);
        tpu_rt_spin_lock(&s->submit_lock);
        tail = atomic_load_explicit(&s->tail_mine, memory_order_relaxed);
    }
    if (pad > 0) {
        ring_head p = {ENTRY_PAD, 0, pad, 0};
        memcpy(s->ring + tail % TPU_STREAM_RING_BYTES, &p, sizeof p);
    }
    ring_head *h = (ring_head *)(s->ring + (tail + pad) % TPU_STREAM_RING_BYTES);
    h->kind = (uint16_t)kind;
    h->hold = hold;
    h->nbytes = nbytes;
    h->seq = atomic_load_explicit(&s->queued_seq, memory_order_relaxed) + 1;
    if (kind == ENTRY_OP)
        tpu_record_pack(op, h + 1);
    else
        memcpy(h + 1, args, sizeof *args);
    const uint64_t n = h->seq;
    atomic_store_explicit(&s->tail_mine, tail + pad + nbytes, memory_order_relaxed);
    atomic_store_explicit(&s->queued_seq, n, memory_order_relaxed);
    atomic_store_explicit(&s->tail, tail + pad + nbytes, memory_order_release);
    atomic_store_explicit(&s->submitted_seq, n, memory_order_release);
    tpu_rt_spin_unlock(&s->submit_lock);
    if (seq)
        *seq = n;
    /* The stores above before the flag reads below: see the struct. A
     * worker holding records is woken only by what ends its run. */
    tpu_rt_light_barrier();
    if (atomic_load(&s->worker_sleeping) &&
        (hold != HOLD_JOINS || !atomic_load(&s->holding) ||
         n - atomic_load(&s->completed_seq) >= HOLD_MAX_ENTRIES)) {
        pthread_mutex_lock(&s->lock);
        pthread_cond_signal(&s->work_cv);
        pthread_mutex_unlock(&s->lock);
    }
}

/* Debug mode: drain the stream (without taking its kept error), then run
 * e on this thread as the stream's next record; its error is returned. */
static tpu_status run_inline(tpu_stream *s, entry *e) {
    /* Drain first (between the wait hooks), then claim the next number; a
     * record queued by another thread in between is simply waited for. */
    tpu_rt_spin_lock(&s->submit_lock);
    uint64_t upto;
    while (atomic_load_explicit(&s->completed_seq, memory_order_acquire) !=
           (upto = atomic_load_explicit(&s->queued_seq, memory_order_relaxed))) {
        tpu_rt_spin_unlock(&s->submit_lock);
        tpu_stream_wait_seq(s, upto);
        tpu_rt_spin_lock(&s->submit_lock);
    }
    e->seq = upto + 1;
    atomic_store_explicit(&s->queued_seq, e->seq, memory_order_relaxed);
    atomic_store_explicit(&s->submitted_seq, e->seq, memory_order_relaxed);
    tpu_rt_spin_unlock(&s->submit_lock);

    tpu_status st = entry_run(s, e);
    if (st != TPU_OK && e->kind == ENTRY_OP) {
        char msg[TPU_MSG_MAX];
        format_op_error(msg, sizeof msg, s, &e->u.op, e->seq, st, tpu_last_error_message(), false);
        tpu_set_error(st, "%s", msg);
    }
    complete_upto(s, e->seq);
    return st;
}

/* ------------------------------------------------------------- creation */

/* Frees a stream whose worker never started. */
static void stream_destroy(tpu_stream *s) {
    pthread_cond_destroy(&s->space_cv);
    pthread_cond_destroy(&s->done_cv);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->lock);
    free(s->ring);
    free(s);
}

static tpu_status stream_create(int chip, int index, tpu_stream **out) {
    /* Aligned for the struct's cache-line groups. */
    tpu_stream *s = aligned_alloc(_Alignof(tpu_stream), sizeof *s);
    if (s)
        memset(s, 0, sizeof *s);
    if (!s)
        return tpu_set_error(TPU_ERR_HOST_MEMORY, "tpu_stream_get: no host memory for a stream");
    s->chip = chip;
    s->index = index;
    atomic_init(&s->done_wake_at, UINT64_MAX);
    pthread_mutex_init(&s->lock, NULL);
    /* The worker's timed wait (fused mode) counts on the monotonic clock. */
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&s->work_cv, &attr);
    pthread_condattr_destroy(&attr);
    pthread_cond_init(&s->done_cv, NULL);
    pthread_cond_init(&s->space_cv, NULL);
    s->ring = aligned_alloc(64, TPU_STREAM_RING_BYTES);
    if (!s->ring) {
        stream_destroy(s);
        return tpu_set_error(TPU_ERR_HOST_MEMORY,
                             "tpu_stream_get: no host memory for the queue of stream %d of tpu:%d",
                             index, chip);
    }

    tpu_rt_barriers_setup(); /* before the worker, which relies on it */

    /* The worker must not take the process's signals: block them all
     * while creating it, it inherits the mask. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t thread;
    int rc = pthread_create(&thread, NULL, stream_worker, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        stream_destroy(s);
        return tpu_set_error(TPU_ERR_HOST_MEMORY,
                             "tpu_stream_get: cannot start the worker thread of stream %d of tpu:%d "
                             "(%s)",
                             index, chip, strerror(rc));
    }
    tpu_pool_bind_stream_worker(thread);
    pthread_detach(thread);
    *out = s;
    return TPU_OK;
}

tpu_stream *tpu_stream_peek(int chip, int index) {
    assert(chip >= 0 && chip < TPU_CHIPS_MAX && index >= 0 && index < TPU_STREAMS_MAX);
    return atomic_load_explicit(&g_streams[chip][index], memory_order_acquire);
}

tpu_status tpu_stream_get(int chip, int index, tpu_stream **out) {
    tpu_status st = tpu_rt_enter_chip("tpu_stream_get", chip);
    if (st != TPU_OK)
        return st;
    if (!out)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_stream_get: out is NULL");
    if (index < 0 || index >= TPU_STREAMS_MAX)
        return tpu_set_error(TPU_ERR_INVALID_ARG,
                             "tpu_stream_get: stream index %d of tpu:%d is out of range 0..%d",
                             index, chip, TPU_STREAMS_MAX - 1);
    tpu_stream *s = tpu_stream_peek(chip, index);
    if (!s) {
        pthread_mutex_lock(&g_create_lock);
        /* Relaxed: the lock orders this against the creator's store. */
        s = atomic_load_explicit(&g_streams[chip][index], memory_order_relaxed);
        if (!s) {
            st = stream_create(chip, index, &s);
            if (st == TPU_OK)
                atomic_store_explicit(&g_streams[chip][index], s, memory_order_release);
        }
        pthread_mutex_unlock(&g_create_lock);
        if (st != TPU_OK)
            return st;
    }
    *out = s;
    return TPU_OK;
}

tpu_status tpu_stream_next_from_pool(int chip, tpu_stream **out) {
    tpu_status st = tpu_rt_enter_chip("tpu_stream_next_from_pool", chip);
    if (st != TPU_OK)
        return st;
    unsigned n = atomic_fetch_add_explicit(&g_next_pool[chip], 1, memory_order_relaxed);
    return tpu_stream_get(chip, 1 + (int)(n % (TPU_STREAMS_MAX - 1)), out);
}

int tpu_stream_chip(const tpu_stream *s) {
    return s ? s->chip : -1;
}

int tpu_stream_index(const tpu_stream *s) {
    return s ? s->index : -1;
}

/* ----------------------------------------------------------- submission */


/* Every device tensor of a checked record must lie in live memory: its
 * storage a live block of the stream's chip (a copy may read another
 * chip's), so that no record of a freed or shrunk storage ever runs; so
 * must its scratch. The host side of a transfer is host memory, bounded
 * by tpu_op_check alone. */

/* Slot k of check_device_memory's walk: out (-1), the inputs, then the
 * further outputs; n_in + n_aux stands for the scratch. */
static void describe_slot(const tpu_op *op, int k, char *buf, size_t cap) {
    if (k < 0)
        snprintf(buf, cap, "the storage of out");
    else if (k < op->n_in)
        snprintf(buf, cap, "the storage of in[%d]", k);
    else if (k < op->n_in + op->n_aux)
        snprintf(buf, cap, "the storage of aux[%d]", k - op->n_in);
    else
        snprintf(buf, cap, "the scratch");
}

/* One range of a record: live memory of the stream's chip (any chip's
 * with any_chip), else an error naming the op and slot k. The message is
 * formatted only on failure: this runs for every tensor of every op. */
static tpu_status check_live(const tpu_stream *s, const tpu_op *op, int k, bool any_chip,
                             const void *p, int64_t nbytes) {
    tpu_status st = tpu_mem_check_range(s->chip, any_chip, p, (uint64_t)nbytes);
    if (st == TPU_OK)
        return TPU_OK;
    char msg[TPU_MSG_MAX], what[32];
    snprintf(msg, sizeof msg, "%s", tpu_last_error_message());
    describe_slot(op, k, what, sizeof what);
    return tpu_set_error(st, "%s: %s: %s", op->name ? op->name : tpu_op_fn_name(op->code, op->fn), what, msg);
}

static tpu_status check_device_memory(const tpu_stream *s, const tpu_op *op) {
    /* The ranges and their slots (k as describe_slot counts them), then
     * all of them under one allocator lock; only a range that is not a
     * storage of this chip takes the slow path, in order from there. */
    tpu_mem_range ranges[2 + TPU_OP_MAX_IN + TPU_OP_MAX_AUX];
    int slot[2 + TPU_OP_MAX_IN + TPU_OP_MAX_AUX], n = 0;
    for (int k = -1; k < op->n_in + op->n_aux; k++) {
        const tpu_tensor *t = k < 0 ? &op->out : k < op->n_in ? &op->in[k] : &op->aux[k - op->n_in];
        bool host = (k < 0 && op->code == TPU_OP_COPY_D2H) || (k == 0 && op->code == TPU_OP_COPY_H2D);
        if (host || !t->data)
            continue; /* host memory, or no elements or absent (data is NULL then) */
        ranges[n] = (tpu_mem_range){t->storage, (uint64_t)t->storage_nbytes};
        slot[n++] = k;
    }
    if (op->scratch_nbytes > 0) {
        ranges[n] = (tpu_mem_range){op->scratch, (uint64_t)op->scratch_nbytes};
        slot[n++] = op->n_in + op->n_aux;
    }
    for (int i = tpu_mem_first_unlisted(s->chip, ranges, n); i < n; i++) {
        const int k = slot[i];
        bool any_chip = k >= 0 && k < op->n_in && op->code == TPU_OP_COPY;
        tpu_status st = check_live(s, op, k, any_chip, ranges[i].p, (int64_t)ranges[i].nbytes);
        if (st != TPU_OK)
            return st;
    }
    return TPU_OK;
}

/* Asks for the cache lines the record will (likely) take in the ring,
 * for writing, before the checks run: the worker's core holds them (it read
 * them a lap ago, and its prefetcher read ahead), and a store to a line
 * held elsewhere waits for it in the store buffer, which the next full
 * barrier (the allocator's lock, the GIL) must drain: about 200 ns a
 * record. Asked for here, they arrive while the checks run. Only a hint:
 * another submitter may take the spot first. */
#define CLAIMED_RING_BYTES 384 /* a binary op on 2-d tensors; a longer record claims the rest as it packs */

static void claim_ring_lines(const tpu_stream *s) {
    /* A fixed size: the record is not checked yet, so its own size (which
     * reads n_in, n_aux and every ndim) cannot be trusted here. */
    const uint64_t at = atomic_load_explicit(&s->tail_mine, memory_order_relaxed);
    const unsigned char *p = s->ring + at % TPU_STREAM_RING_BYTES;
    const unsigned char *end = s->ring + TPU_STREAM_RING_BYTES;
    for (size_t off = 0; off < CLAIMED_RING_BYTES && p + off < end; off += 64) {
#if defined(__x86_64__) || defined(__i386__)
        /* Not __builtin_prefetch: without -mprfchw it reads, for sharing.
         * A CPU without PREFETCHW runs this encoding as a no-op. */
        __asm__ volatile("prefetchw %0" ::"m"(p[off]));
#else
        __builtin_prefetch(p + off, 1, 3);
#endif
    }
}

tpu_status tpu_stream_submit(tpu_stream *s, const tpu_op *op) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!s || !op)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_stream_submit: %s is NULL",
                             s ? "op" : "stream");
    claim_ring_lines(s);
    st = tpu_op_check(op);
    if (st == TPU_OK)
        st = check_device_memory(s, op);
    if (st != TPU_OK)
        return st;
    if (tpu_mode_get() == TPU_MODE_DEBUG) {
        entry e = {.kind = ENTRY_OP, .u.op = *op};
        return run_inline(s, &e);
    }
    enqueue(s, ENTRY_OP, op, NULL, hold_of(op), NULL);
    return TPU_OK;
}

tpu_status tpu_stream_submit_host_fn(tpu_stream *s, void (*fn)(void *ctx), void *ctx) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!s || !fn)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_stream_submit_host_fn: %s is NULL",
                             s ? "fn" : "stream");
    entry e = {.kind = ENTRY_HOST_FN, .u.a.host = {fn, ctx}};
    if (tpu_mode_get() == TPU_MODE_DEBUG)
        return run_inline(s, &e);
    enqueue(s, ENTRY_HOST_FN, NULL, &e.u.a, HOLD_NONE, NULL);
    return TPU_OK;
}

tpu_status tpu_stream_enqueue_event_record(tpu_stream *s, tpu_event *event, uint64_t gen,
                                           uint64_t *seq) {
    entry_args a = {.record = {event, gen}};
    enqueue(s, ENTRY_EVENT_RECORD, NULL, &a, HOLD_NONE, seq);
    return TPU_OK;
}

tpu_status tpu_stream_enqueue_event_wait(tpu_stream *s, tpu_stream *other, uint64_t seq) {
    entry_args a = {.wait = {other, seq}};
    enqueue(s, ENTRY_EVENT_WAIT, NULL, &a, HOLD_NONE, NULL);
    return TPU_OK;
}

tpu_status tpu_stream_wait_signal(tpu_stream *s, tpu_signal *signal, int64_t timeout_ms) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!s || !signal)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_stream_wait_signal: %s is NULL",
                             s ? "signal" : "stream");
    /* The queued entry owns one reference until it has run. */
    tpu_signal_ref(signal);
    entry e = {.kind = ENTRY_SIGNAL_WAIT,
               .u.a.signal = {signal, tpu_signal_deadline_ns(timeout_ms)}};
    if (tpu_mode_get() == TPU_MODE_DEBUG)
        return run_inline(s, &e);
    enqueue(s, ENTRY_SIGNAL_WAIT, NULL, &e.u.a, HOLD_NONE, NULL);
    return TPU_OK;
}

bool tpu_stream_enqueue_mark(tpu_stream *s, const tpu_block_mark *m) {
    if (t_is_worker)
        return false;
    entry_args a = {.mark = *m};
    enqueue(s, ENTRY_MARK, NULL, &a, tpu_mode_get() == TPU_MODE_FUSED ? HOLD_JOINS : HOLD_NONE,
            NULL);
    return true;
}

bool tpu_stream_on_worker(void) {
    return t_is_worker;
}

/* ------------------------------------------------------ synchronisation */

tpu_status tpu_stream_synchronize(tpu_stream *s) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!s)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_stream_synchronize: stream is NULL");
    tpu_stream_wait_seq(s, tpu_stream_submitted_seq(s));
    return tpu_stream_take_error(s, UINT64_MAX);
}

tpu_status tpu_stream_query(tpu_stream *s, bool *done) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!s || !done)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_stream_query: %s is NULL",
                             s ? "done" : "stream");
    uint64_t submitted = tpu_stream_submitted_seq(s);
    *done = tpu_stream_completed_seq(s) >= submitted;
    if (!*done) /* held records must make progress for a caller that polls */
        request_flush(s, submitted);
    return TPU_OK;
}

void tpu_chip_drain(int chip) {
    for (int i = 0; i < TPU_STREAMS_MAX; i++) {
        tpu_stream *s = tpu_stream_peek(chip, i);
        if (s)
            tpu_stream_wait_seq(s, tpu_stream_submitted_seq(s));
    }
}

tpu_status tpu_chip_synchronize(int chip) {
    tpu_status st = tpu_rt_enter_chip("tpu_chip_synchronize", chip);
    if (st != TPU_OK)
        return st;
    tpu_chip_drain(chip);
    /* Report one error; the others stay for the next synchronising call,
     * so each is reported exactly once. */
    for (int i = 0; i < TPU_STREAMS_MAX; i++) {
        tpu_stream *s = tpu_stream_peek(chip, i);
        if (s && (st = tpu_stream_take_error(s, UINT64_MAX)) != TPU_OK)
            return st;
    }
    return TPU_OK;
}
