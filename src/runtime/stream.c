/* Streams: a FIFO of records per stream and one worker thread that runs them
 * in order.
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

#include "runtime_internal.h"
#include "target.h"

typedef enum {
    ENTRY_OP,
    ENTRY_HOST_FN,
    ENTRY_EVENT_RECORD,
    ENTRY_EVENT_WAIT,
} entry_kind;

typedef struct entry {
    struct entry *next;
    entry_kind kind;
    uint64_t seq;
    union {
        tpu_op op; /* a copy: the caller may reuse its record at once */
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
    } u;
} entry;

struct tpu_stream {
    int chip;
    int index;
    pthread_mutex_t lock;
    pthread_cond_t work_cv; /* the worker waits for a runnable head */
    pthread_cond_t done_cv; /* waiters for completed_seq */
    entry *head, *tail;     /* the FIFO, under lock */
    /* Both are written only under `lock` (so they never go backwards) and
     * read without it by queries and by the allocator. */
    _Atomic uint64_t submitted_seq;
    _Atomic uint64_t completed_seq;
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

/* ------------------------------------------------------------ sequences */

uint64_t tpu_stream_submitted_seq(const tpu_stream *s) {
    /* Relaxed: a caller needs the records it queued itself, which program
     * order already makes visible; others' records it must have
     * synchronised with by other means, as on CUDA. */
    return atomic_load_explicit(&s->submitted_seq, memory_order_relaxed);
}

uint64_t tpu_stream_completed_seq(const tpu_stream *s) {
    /* Acquire pairs with the worker's release store: whoever sees record N
     * completed also sees what it wrote (results, and memory it no longer
     * touches, which the allocator may then hand out again). */
    return atomic_load_explicit(&s->completed_seq, memory_order_acquire);
}

void tpu_stream_wait_seq(tpu_stream *s, uint64_t seq) {
    if (tpu_stream_completed_seq(s) >= seq)
        return;
    pthread_mutex_lock(&s->lock);
    while (atomic_load_explicit(&s->completed_seq, memory_order_relaxed) < seq)
        pthread_cond_wait(&s->done_cv, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

/* Marks record `seq` done and wakes everyone who may wait for it. Runs
 * under s->lock; records complete in order. */
static void complete_locked(tpu_stream *s, uint64_t seq) {
    assert(seq == atomic_load_explicit(&s->completed_seq, memory_order_relaxed) + 1);
    /* Release: publishes the record's effects to acquiring readers. */
    atomic_store_explicit(&s->completed_seq, seq, memory_order_release);
    pthread_cond_broadcast(&s->done_cv);
    /* The worker may be waiting for an inline record to finish. */
    pthread_cond_signal(&s->work_cv);
}

/* ---------------------------------------------------------------- errors */

/* "<name> (op #<seq> on tpu:<chip> stream <idx>): <kernel message>", plus
 * the debug-mode hint for errors that surface late. */
static void format_op_error(char *buf, size_t cap, const tpu_stream *s, const entry *e,
                            tpu_status st, const char *kernel_msg, bool hint) {
    const tpu_op *op = &e->u.op;
    const char *name = op->name ? op->name : tpu_op_name(op->code);
    if (!kernel_msg[0])
        kernel_msg = tpu_status_str(st);
    /* Drop one trailing period so the hint does not double it. */
    int len = (int)strlen(kernel_msg);
    if (hint && len > 0 && kernel_msg[len - 1] == '.')
        len--;
    snprintf(buf, cap, "%s (op #%" PRIu64 " on tpu:%d stream %d): %.*s%s", name, e->seq, s->chip,
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
        e->u.host.fn(e->u.host.ctx);
        return TPU_OK;
    case ENTRY_EVENT_RECORD:
        tpu_event_stamp(e->u.record.event, e->u.record.gen);
        tpu_event_unref(e->u.record.event);
        return TPU_OK;
    case ENTRY_EVENT_WAIT:
        tpu_stream_wait_seq(e->u.wait.stream, e->u.wait.seq);
        return TPU_OK;
    }
    assert(!"unknown entry kind");
    return TPU_ERR_INTERNAL;
}

/* The head may run once every earlier record has completed: normally at
 * once, later while a debug-mode submitter runs a record inline. */
static bool head_runnable_locked(const tpu_stream *s) {
    return s->head &&
           s->head->seq == atomic_load_explicit(&s->completed_seq, memory_order_relaxed) + 1;
}

static void *stream_worker(void *arg) {
    tpu_stream *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!head_runnable_locked(s))
            pthread_cond_wait(&s->work_cv, &s->lock);
        entry *e = s->head;
        s->head = e->next;
        if (!s->head)
            s->tail = NULL;
        pthread_mutex_unlock(&s->lock);

        tpu_status st = entry_run(s, e);

        pthread_mutex_lock(&s->lock);
        if (st != TPU_OK && s->error == TPU_OK) { /* keep the first error only */
            s->error = st;
            s->error_seq = e->seq;
            format_op_error(s->error_msg, sizeof s->error_msg, s, e, st, tpu_last_error_message(),
                            true);
        }
        complete_locked(s, e->seq);
        free(e);
    }
    return NULL;
}

/* Queues e with the next sequence number, returned in *seq if not NULL. */
static void enqueue(tpu_stream *s, entry *e, uint64_t *seq) {
    e->next = NULL;
    pthread_mutex_lock(&s->lock);
    e->seq = atomic_load_explicit(&s->submitted_seq, memory_order_relaxed) + 1;
    /* Relaxed: see tpu_stream_submitted_seq; the lock orders writers. */
    atomic_store_explicit(&s->submitted_seq, e->seq, memory_order_relaxed);
    if (s->tail)
        s->tail->next = e;
    else
        s->head = e;
    s->tail = e;
    /* Only one thread ever waits on work_cv, the worker. */
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->lock);
    if (seq)
        *seq = e->seq;
}

/* Debug mode: drain the stream (without taking its kept error), then run
 * e on this thread as the stream's next record; its error is returned. */
static tpu_status run_inline(tpu_stream *s, entry *e) {
    pthread_mutex_lock(&s->lock);
    while (atomic_load_explicit(&s->completed_seq, memory_order_relaxed) !=
           atomic_load_explicit(&s->submitted_seq, memory_order_relaxed))
        pthread_cond_wait(&s->done_cv, &s->lock);
    e->seq = atomic_load_explicit(&s->submitted_seq, memory_order_relaxed) + 1;
    atomic_store_explicit(&s->submitted_seq, e->seq, memory_order_relaxed);
    pthread_mutex_unlock(&s->lock);

    tpu_status st = entry_run(s, e);
    if (st != TPU_OK && e->kind == ENTRY_OP) {
        char msg[TPU_MSG_MAX];
        format_op_error(msg, sizeof msg, s, e, st, tpu_last_error_message(), false);
        tpu_set_error(st, "%s", msg);
    }

    pthread_mutex_lock(&s->lock);
    complete_locked(s, e->seq);
    pthread_mutex_unlock(&s->lock);
    return st;
}

/* ------------------------------------------------------------- creation */

static tpu_status stream_create(int chip, int index, tpu_stream **out) {
    tpu_stream *s = calloc(1, sizeof *s);
    if (!s)
        return tpu_set_error(TPU_ERR_HOST_MEMORY, "tpu_stream_get: no host memory for a stream");
    s->chip = chip;
    s->index = index;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->done_cv, NULL);

    /* The worker must not take the process's signals: block them all
     * while creating it, it inherits the mask. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t thread;
    int rc = pthread_create(&thread, NULL, stream_worker, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_cond_destroy(&s->done_cv);
        pthread_cond_destroy(&s->work_cv);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return tpu_set_error(TPU_ERR_HOST_MEMORY,
                             "tpu_stream_get: cannot start the worker thread of stream %d of tpu:%d "
                             "(%s)",
                             index, chip, strerror(rc));
    }
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

/* Queues a heap copy of the entry `proto` (built on the caller's stack, as
 * the debug path uses it directly). `what` names the request for the
 * out-of-memory message. */
static tpu_status queue_copy(tpu_stream *s, const entry *proto, uint64_t *seq, const char *what) {
    entry *e = malloc(sizeof *e);
    if (!e)
        return tpu_set_error(TPU_ERR_HOST_MEMORY, "no host memory to queue %s", what);
    *e = *proto;
    enqueue(s, e, seq);
    return TPU_OK;
}

tpu_status tpu_stream_submit(tpu_stream *s, const tpu_op *op) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!s || !op)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_stream_submit: %s is NULL",
                             s ? "op" : "stream");
    st = tpu_op_check(op);
    if (st != TPU_OK)
        return st;
    entry e = {.kind = ENTRY_OP, .u.op = *op};
    if (tpu_mode_get() == TPU_MODE_DEBUG)
        return run_inline(s, &e);
    return queue_copy(s, &e, NULL, op->name ? op->name : tpu_op_name(op->code));
}

tpu_status tpu_stream_submit_host_fn(tpu_stream *s, void (*fn)(void *ctx), void *ctx) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!s || !fn)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_stream_submit_host_fn: %s is NULL",
                             s ? "fn" : "stream");
    entry e = {.kind = ENTRY_HOST_FN, .u.host = {fn, ctx}};
    if (tpu_mode_get() == TPU_MODE_DEBUG)
        return run_inline(s, &e);
    return queue_copy(s, &e, NULL, "a host function");
}

tpu_status tpu_stream_enqueue_event_record(tpu_stream *s, tpu_event *event, uint64_t gen,
                                           uint64_t *seq) {
    entry e = {.kind = ENTRY_EVENT_RECORD, .u.record = {event, gen}};
    return queue_copy(s, &e, seq, "an event record");
}

tpu_status tpu_stream_enqueue_event_wait(tpu_stream *s, tpu_stream *other, uint64_t seq) {
    entry e = {.kind = ENTRY_EVENT_WAIT, .u.wait = {other, seq}};
    return queue_copy(s, &e, NULL, "an event wait");
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
