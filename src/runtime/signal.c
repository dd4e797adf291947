/* Host signals (tpu/signal.h): a flag with an outcome, set once by a host
 * thread, that stream workers wait for with a deadline.
 *
 * A signal is reference-counted: the creator holds one reference and each
 * queued wait another, which the wait drops once it has run, so the
 * creator may free its handle while streams still wait. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime_internal.h"
#include "tpu/signal.h"

struct tpu_signal {
    /* Acq_rel decrement: the last owner sees every other owner's writes. */
    atomic_int refs;
    pthread_mutex_t lock;
    pthread_cond_t cv; /* CLOCK_MONOTONIC, for the deadlines */
    bool set;          /* under lock, with the three fields below */
    tpu_status outcome;
    int64_t deadline_ns; /* tpu_signal_arm's, CLOCK_MONOTONIC; 0: none */
    char message[TPU_MSG_MAX];
    char name[256];
};

tpu_status tpu_signal_create(const char *name, tpu_signal **out) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!out)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_signal_create: out is NULL");
    tpu_signal *sig = calloc(1, sizeof *sig);
    if (!sig)
        return tpu_set_error(TPU_ERR_HOST_MEMORY, "tpu_signal_create: no host memory for a signal");
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&sig->cv, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&sig->lock, NULL);
    atomic_init(&sig->refs, 1);
    snprintf(sig->name, sizeof sig->name, "%s", name && *name ? name : "external work");
    *out = sig;
    return TPU_OK;
}

void tpu_signal_ref(tpu_signal *sig) {
    atomic_fetch_add_explicit(&sig->refs, 1, memory_order_relaxed);
}

void tpu_signal_unref(tpu_signal *sig) {
    if (atomic_fetch_sub_explicit(&sig->refs, 1, memory_order_acq_rel) == 1) {
        pthread_cond_destroy(&sig->cv);
        pthread_mutex_destroy(&sig->lock);
        free(sig);
    }
}

void tpu_signal_free(tpu_signal *sig) {
    /* In a forked child the lock may be held by a thread that does not
     * exist there: leave it alone. */
    if (!sig || tpu_runtime_is_forked())
        return;
    tpu_signal_unref(sig);
}

tpu_status tpu_signal_set(tpu_signal *sig, tpu_status outcome, const char *message) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!sig)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_signal_set: signal is NULL");
    if ((unsigned)outcome >= (unsigned)TPU_STATUS_COUNT)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_signal_set: %d is not a tpu_status", (int)outcome);
    pthread_mutex_lock(&sig->lock);
    if (sig->set) {
        pthread_mutex_unlock(&sig->lock);
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_signal_set: %s was already set", sig->name);
    }
    sig->set = true;
    sig->outcome = outcome;
    snprintf(sig->message, sizeof sig->message, "%s", message ? message : "");
    pthread_cond_broadcast(&sig->cv);
    pthread_mutex_unlock(&sig->lock);
    return TPU_OK;
}

tpu_status tpu_signal_query(tpu_signal *sig, bool *done, tpu_status *outcome) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!sig || !done || !outcome)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_signal_query: %s is NULL",
                             !sig ? "signal" : !done ? "done" : "outcome");
    pthread_mutex_lock(&sig->lock);
    *done = sig->set;
    *outcome = sig->set ? sig->outcome : TPU_OK;
    pthread_mutex_unlock(&sig->lock);
    return TPU_OK;
}

int64_t tpu_signal_deadline_ns(int64_t timeout_ms) {
    if (timeout_ms < 0)
        return 0;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    /* A deadline past what the clock can count is none (not a wrapped,
     * negative one that has always passed). */
    if (timeout_ms > (INT64_MAX - now_ns) / 1000000)
        return 0;
    return now_ns + timeout_ms * 1000000;
}

tpu_status tpu_signal_arm(tpu_signal *sig, int64_t timeout_ms) {
    tpu_status st = tpu_rt_enter();
    if (st != TPU_OK)
        return st;
    if (!sig)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_signal_arm: signal is NULL");
    int64_t deadline = tpu_signal_deadline_ns(timeout_ms);
    pthread_mutex_lock(&sig->lock);
    sig->deadline_ns = deadline;
    pthread_cond_broadcast(&sig->cv); /* waiters recompute their deadline */
    pthread_mutex_unlock(&sig->lock);
    return TPU_OK;
}

/* The earlier of two deadlines, 0 meaning none. */
static int64_t earlier_deadline(int64_t a, int64_t b) {
    if (a == 0)
        return b;
    if (b == 0)
        return a;
    return a < b ? a : b;
}

tpu_status tpu_signal_wait(tpu_signal *sig, int64_t deadline_ns, bool host_thread) {
    tpu_wait_token token = {0};
    if (host_thread)
        token = tpu_rt_wait_begin();
    bool timed_out = false;
    pthread_mutex_lock(&sig->lock);
    while (!sig->set && !timed_out) {
        /* Recomputed on each wake: tpu_signal_arm may have moved it. */
        int64_t until_ns = earlier_deadline(deadline_ns, sig->deadline_ns);
        if (until_ns == 0) {
            pthread_cond_wait(&sig->cv, &sig->lock);
        } else {
            struct timespec until = {(time_t)(until_ns / 1000000000), (long)(until_ns % 1000000000)};
            timed_out = pthread_cond_timedwait(&sig->cv, &sig->lock, &until) == ETIMEDOUT && !sig->set &&
                        earlier_deadline(deadline_ns, sig->deadline_ns) == until_ns;
        }
    }
    tpu_status outcome = sig->set ? sig->outcome : TPU_ERR_EXTERNAL;
    char message[TPU_MSG_MAX];
    memcpy(message, sig->message, sizeof message);
    pthread_mutex_unlock(&sig->lock);
    if (host_thread)
        tpu_rt_wait_end(token);
    if (timed_out)
        return tpu_set_error(TPU_ERR_EXTERNAL, "%s did not complete before the stream's deadline", sig->name);
    if (outcome != TPU_OK)
        return tpu_set_error(outcome, "%s failed%s%s", sig->name, message[0] ? ": " : "", message);
    return TPU_OK;
}
