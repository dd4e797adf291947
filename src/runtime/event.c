/* Events: a recorded point in a stream.
 *
 * A record queues an EVENT_RECORD entry and remembers (stream, sequence
 * number) of it: the event is complete once that stream's completed_seq
 * reaches the number. The entry, when the worker reaches it, stamps the
 * time for elapsed_ms. Each record bumps a generation so that the stamp of
 * an older record, still queued when the event was recorded again, is
 * ignored. Queued records hold a reference, so freeing a pending event is
 * safe.
 *
 * Lock order: event lock, then a stream's lock (tpu_event_record). A
 * worker takes an event lock holding no stream lock. */
#define _POSIX_C_SOURCE 200809L

#include <assert.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "runtime_internal.h"

struct tpu_event {
    /* Acq_rel decrement: the last owner must see every other owner's
     * writes before it destroys the event. */
    atomic_int refs;
    /* The chip of the first record, -1 before. Written once under lock,
     * read lock-free by tpu_event_chip (relaxed: a lone value). */
    atomic_int chip;
    pthread_mutex_t lock; /* protects the fields below */
    tpu_stream *stream;   /* stream of the latest record, NULL if never recorded */
    uint64_t seq;         /* its sequence number there */
    uint64_t gen;         /* records so far */
    uint64_t stamped_gen; /* generation whose completion time is in `stamp` */
    struct timespec stamp;
};

/* A consistent view of an event's latest record. */
typedef struct {
    tpu_stream *stream;
    uint64_t seq;
    bool complete;
    struct timespec stamp;
} snapshot;

static void take_snapshot(tpu_event *ev, snapshot *out) {
    pthread_mutex_lock(&ev->lock);
    out->stream = ev->stream;
    out->seq = ev->seq;
    /* Complete records were stamped before their completion was published
     * (the acquire load pairs with that release), and `gen` cannot move
     * while we hold the lock, so the stamp belongs to this record. */
    out->complete = !ev->stream || tpu_stream_completed_seq(ev->stream) >= ev->seq;
    out->stamp = ev->stamp;
    assert(!ev->stream || !out->complete || ev->stamped_gen == ev->gen);
    pthread_mutex_unlock(&ev->lock);
}

tpu_status tpu_event_create(tpu_event **out) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!out)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_event_create: out is NULL");
    tpu_event *ev = calloc(1, sizeof *ev);
    if (!ev)
        return tpu_set_error(TPU_ERR_HOST_MEMORY, "tpu_event_create: no host memory for an event");
    atomic_init(&ev->refs, 1);
    atomic_init(&ev->chip, -1);
    pthread_mutex_init(&ev->lock, NULL);
    *out = ev;
    return TPU_OK;
}

void tpu_event_unref(tpu_event *ev) {
    if (atomic_fetch_sub_explicit(&ev->refs, 1, memory_order_acq_rel) == 1) {
        pthread_mutex_destroy(&ev->lock);
        free(ev);
    }
}

void tpu_event_free(tpu_event *ev) {
    /* In a forked child the event's lock may be held by a thread that does
     * not exist there: leave it alone. */
    if (!ev || tpu_runtime_is_forked())
        return;
    tpu_event_unref(ev);
}

void tpu_event_stamp(tpu_event *ev, uint64_t gen) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    pthread_mutex_lock(&ev->lock);
    if (gen == ev->gen) { /* else a later record superseded this one */
        ev->stamp = now;
        ev->stamped_gen = gen;
    }
    pthread_mutex_unlock(&ev->lock);
}

int tpu_event_chip(const tpu_event *ev) {
    return ev ? atomic_load_explicit(&ev->chip, memory_order_relaxed) : -1;
}

tpu_status tpu_event_record(tpu_event *ev, tpu_stream *stream) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!ev || !stream)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_event_record: %s is NULL",
                             ev ? "stream" : "event");
    int chip = tpu_stream_chip(stream);
    pthread_mutex_lock(&ev->lock);
    int bound = atomic_load_explicit(&ev->chip, memory_order_relaxed);
    if (bound >= 0 && bound != chip) {
        pthread_mutex_unlock(&ev->lock);
        return tpu_set_error(TPU_ERR_WRONG_DEVICE,
                             "tpu_event_record: the event belongs to tpu:%d (where it was first "
                             "recorded) and cannot be recorded on stream %d of tpu:%d",
                             bound, tpu_stream_index(stream), chip);
    }
    /* The queued record owns one reference until the worker stamps it. */
    atomic_fetch_add_explicit(&ev->refs, 1, memory_order_relaxed);
    uint64_t seq;
    st = tpu_stream_enqueue_event_record(stream, ev, ev->gen + 1, &seq);
    if (st != TPU_OK) {
        atomic_fetch_sub_explicit(&ev->refs, 1, memory_order_relaxed); /* we hold another */
        pthread_mutex_unlock(&ev->lock);
        return st;
    }
    ev->gen++;
    ev->stream = stream;
    ev->seq = seq;
    atomic_store_explicit(&ev->chip, chip, memory_order_relaxed);
    pthread_mutex_unlock(&ev->lock);
    return TPU_OK;
}

tpu_status tpu_stream_wait_event(tpu_stream *stream, tpu_event *ev) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!ev || !stream)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_stream_wait_event: %s is NULL",
                             ev ? "stream" : "event");
    snapshot snap;
    take_snapshot(ev, &snap);
    /* Nothing to wait for: never recorded, already complete, or recorded
     * on this same stream (which runs in order anyway). */
    if (snap.complete || snap.stream == stream)
        return TPU_OK;
    return tpu_stream_enqueue_event_wait(stream, snap.stream, snap.seq);
}

tpu_status tpu_event_query(tpu_event *ev, bool *done) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!ev || !done)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_event_query: %s is NULL",
                             ev ? "done" : "event");
    snapshot snap;
    take_snapshot(ev, &snap);
    *done = snap.complete;
    return TPU_OK;
}

tpu_status tpu_event_synchronize(tpu_event *ev) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!ev)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_event_synchronize: event is NULL");
    snapshot snap;
    take_snapshot(ev, &snap);
    if (!snap.stream)
        return TPU_OK; /* unrecorded: complete by definition */
    tpu_stream_wait_seq(snap.stream, snap.seq);
    /* Only an error from a record up to the event's point is its error. */
    return tpu_stream_take_error(snap.stream, snap.seq);
}

/* Checks that `ev` (called `what` in messages) has a completed record. */
static tpu_status completed_snapshot(tpu_event *ev, const char *what, snapshot *snap) {
    if (!ev)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_event_elapsed_ms: the %s event is NULL",
                             what);
    take_snapshot(ev, snap);
    if (!snap->stream)
        return tpu_set_error(TPU_ERR_INVALID_ARG,
                             "tpu_event_elapsed_ms: the %s event was never recorded", what);
    if (!snap->complete)
        return tpu_set_error(TPU_ERR_INVALID_ARG,
                             "tpu_event_elapsed_ms: the %s event has not completed yet "
                             "(synchronize it first)",
                             what);
    return TPU_OK;
}

tpu_status tpu_event_elapsed_ms(tpu_event *start, tpu_event *end, double *ms) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!ms)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_event_elapsed_ms: ms is NULL");
    snapshot a = {0}, b = {0}; /* zeroed: -O3 cannot see that an error return skips their use */
    if ((st = completed_snapshot(start, "start", &a)) != TPU_OK ||
        (st = completed_snapshot(end, "end", &b)) != TPU_OK)
        return st;
    /* As on CUDA: the two points must be on one chip's clock. */
    if (tpu_stream_chip(a.stream) != tpu_stream_chip(b.stream))
        return tpu_set_error(TPU_ERR_WRONG_DEVICE,
                             "tpu_event_elapsed_ms: the events were recorded on different chips "
                             "(tpu:%d and tpu:%d)",
                             tpu_stream_chip(a.stream), tpu_stream_chip(b.stream));
    *ms = (double)(b.stamp.tv_sec - a.stamp.tv_sec) * 1e3 +
          (double)(b.stamp.tv_nsec - a.stamp.tv_nsec) / 1e6;
    return TPU_OK;
}
