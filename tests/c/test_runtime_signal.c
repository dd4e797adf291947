/* Host signals: a stream waits for a signal set by another host thread
 * without blocking its submitter; failures and deadlines become errors
 * kept on the stream; one signal serves several streams; debug mode waits
 * before return; bad arguments. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>

#include "check.h"
#include "runtime_test.h"
#include "tpu/runtime.h"
#include "tpu/signal.h"
#include "../../src/runtime/runtime_internal.h" /* the stream's sequence numbers */

static tpu_stream *stream(int chip, int index) {
    tpu_stream *s = NULL;
    CHECK_OK(tpu_stream_get(chip, index, &s));
    return s;
}

static tpu_signal *signal_named(const char *name) {
    tpu_signal *sig = NULL;
    CHECK_OK(tpu_signal_create(name, &sig));
    return sig;
}

/* A host thread that sets a signal after a delay (a collective's callback). */
typedef struct {
    tpu_signal *sig;
    int delay_ms;
    tpu_status outcome;
    const char *message;
} setter;

static void *set_later(void *arg) {
    setter *st = arg;
    sleep_ms(st->delay_ms);
    CHECK_OK(tpu_signal_set(st->sig, st->outcome, st->message));
    return NULL;
}

static void test_wait_orders_later_work(void) {
    tpu_stream *s = stream(0, 1);
    tpu_signal *sig = signal_named("the transfer");
    atomic_int ran = 0;
    CHECK_OK(tpu_stream_wait_signal(s, sig, 10000));
    CHECK_OK(tpu_stream_submit_host_fn(s, set_flag, &ran));
    /* The submitter was not blocked, and the work after the wait has not run. */
    sleep_ms(30);
    bool done = true;
    CHECK_OK(tpu_stream_query(s, &done));
    CHECK(!done);
    CHECK(atomic_load(&ran) == 0);
    tpu_status outcome = TPU_ERR_INTERNAL;
    CHECK_OK(tpu_signal_query(sig, &done, &outcome));
    CHECK(!done && outcome == TPU_OK);
    setter st = {sig, 20, TPU_OK, NULL};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, set_later, &st) == 0);
    CHECK_OK(tpu_stream_synchronize(s));
    CHECK(atomic_load(&ran) == 1);
    pthread_join(th, NULL);
    CHECK_OK(tpu_signal_query(sig, &done, &outcome));
    CHECK(done && outcome == TPU_OK);
    /* Set twice: an error naming the signal; a wait on a set signal passes. */
    CHECK_STATUS(tpu_signal_set(sig, TPU_OK, NULL), TPU_ERR_INVALID_ARG);
    CHECK_CONTAINS(tpu_last_error_message(), "the transfer was already set");
    CHECK_OK(tpu_stream_wait_signal(s, sig, 0));
    CHECK_OK(tpu_stream_synchronize(s));
    tpu_signal_free(sig);
}

static void test_failure_is_kept_on_the_stream(void) {
    tpu_stream *s = stream(0, 2);
    tpu_signal *sig = signal_named("tpu_dist all_reduce (collective #3)");
    atomic_int ran = 0;
    CHECK_OK(tpu_stream_wait_signal(s, sig, -1));
    CHECK_OK(tpu_stream_submit_host_fn(s, set_flag, &ran));
    tpu_signal_free(sig); /* the queued wait holds its own reference */
    CHECK_OK(tpu_signal_set(sig, TPU_ERR_EXTERNAL, "rank 1 did not join"));
    CHECK_STATUS(tpu_stream_synchronize(s), TPU_ERR_EXTERNAL);
    CHECK_CONTAINS(tpu_last_error_message(), "tpu_dist all_reduce (collective #3) failed: rank 1 did not join");
    CHECK(atomic_load(&ran) == 1); /* later records still ran */
    CHECK_OK(tpu_stream_synchronize(s)); /* reported once */
}

static void test_deadline(void) {
    tpu_stream *s = stream(0, 3);
    tpu_signal *sig = signal_named("a broadcast nobody sends");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_OK(tpu_stream_wait_signal(s, sig, 50));
    CHECK_STATUS(tpu_stream_synchronize(s), TPU_ERR_EXTERNAL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    CHECK(ms >= 45 && ms < 5000);
    CHECK_CONTAINS(tpu_last_error_message(), "a broadcast nobody sends did not complete before the stream's deadline");
    /* Setting it late is allowed and harms nothing. */
    CHECK_OK(tpu_signal_set(sig, TPU_OK, NULL));
    tpu_signal_free(sig);
}

static double ms_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

static void test_arm_starts_the_deadline_late(void) {
    /* Queued with no deadline: the time before tpu_signal_arm does not count. */
    tpu_stream *s = stream(0, 8);
    tpu_signal *sig = signal_named("a queued collective");
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_OK(tpu_stream_wait_signal(s, sig, -1));
    sleep_ms(80);
    bool done = true;
    CHECK_OK(tpu_stream_query(s, &done));
    CHECK(!done);
    CHECK_OK(tpu_signal_arm(sig, 40));
    CHECK_STATUS(tpu_stream_synchronize(s), TPU_ERR_EXTERNAL);
    double ms = ms_since(&t0);
    CHECK(ms >= 115 && ms < 5000);
    CHECK_CONTAINS(tpu_last_error_message(), "a queued collective did not complete before the stream's deadline");
    tpu_signal_free(sig);

    /* Armed, then set in time: the wait passes; a wait's own, earlier
     * deadline still applies; arm(-1) clears the signal's. */
    sig = signal_named("armed and set");
    CHECK_OK(tpu_stream_wait_signal(s, sig, -1));
    CHECK_OK(tpu_signal_arm(sig, 10000));
    setter st = {sig, 20, TPU_OK, NULL};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, set_later, &st) == 0);
    CHECK_OK(tpu_stream_synchronize(s));
    pthread_join(th, NULL);
    tpu_signal_free(sig);
    sig = signal_named("own deadline first");
    CHECK_OK(tpu_signal_arm(sig, 10000));
    CHECK_OK(tpu_stream_wait_signal(s, sig, 30));
    CHECK_STATUS(tpu_stream_synchronize(s), TPU_ERR_EXTERNAL);
    CHECK_OK(tpu_signal_arm(sig, 20));
    CHECK_OK(tpu_signal_arm(sig, -1));
    CHECK_OK(tpu_stream_wait_signal(s, sig, -1));
    st = (setter){sig, 60, TPU_OK, NULL};
    CHECK(pthread_create(&th, NULL, set_later, &st) == 0);
    CHECK_OK(tpu_stream_synchronize(s));
    pthread_join(th, NULL);
    tpu_signal_free(sig);
    CHECK_STATUS(tpu_signal_arm(NULL, 0), TPU_ERR_INVALID_ARG);
}

static void test_huge_timeout_is_no_deadline(void) {
    /* A deadline past the clock's range waits (it once wrapped negative
     * and failed at once, with the worker spinning). */
    tpu_stream *s = stream(0, 9);
    tpu_signal *sig = signal_named("far future");
    CHECK_OK(tpu_stream_wait_signal(s, sig, INT64_MAX));
    CHECK_OK(tpu_signal_arm(sig, INT64_MAX / 2));
    sleep_ms(30);
    bool done = true;
    CHECK_OK(tpu_stream_query(s, &done));
    CHECK(!done);
    CHECK_OK(tpu_signal_set(sig, TPU_OK, NULL));
    CHECK_OK(tpu_stream_synchronize(s));
    tpu_signal_free(sig);
}

static void test_many_streams_and_chips(void) {
    tpu_signal *sig = signal_named("shared");
    tpu_stream *a = stream(0, 4), *b = stream(1, 4);
    atomic_int ran_a = 0, ran_b = 0;
    CHECK_OK(tpu_stream_wait_signal(a, sig, 10000));
    CHECK_OK(tpu_stream_submit_host_fn(a, set_flag, &ran_a));
    CHECK_OK(tpu_stream_wait_signal(b, sig, 10000));
    CHECK_OK(tpu_stream_submit_host_fn(b, set_flag, &ran_b));
    tpu_signal_free(sig);
    sleep_ms(20);
    CHECK(atomic_load(&ran_a) == 0 && atomic_load(&ran_b) == 0);
    CHECK_OK(tpu_signal_set(sig, TPU_OK, NULL));
    CHECK_OK(tpu_stream_synchronize(a));
    CHECK_OK(tpu_stream_synchronize(b));
    CHECK(atomic_load(&ran_a) == 1 && atomic_load(&ran_b) == 1);
}

static void test_debug_mode_waits_before_return(void) {
    tpu_stream *s = stream(0, 5);
    CHECK_OK(tpu_mode_set(TPU_MODE_DEBUG));
    tpu_signal *sig = signal_named("debug");
    setter st = {sig, 30, TPU_OK, NULL};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, set_later, &st) == 0);
    CHECK_OK(tpu_stream_wait_signal(s, sig, 10000));
    bool done = false;
    tpu_status outcome;
    CHECK_OK(tpu_signal_query(sig, &done, &outcome));
    CHECK(done);
    pthread_join(th, NULL);
    tpu_signal_free(sig);
    sig = signal_named("debug failure");
    setter bad = {sig, 10, TPU_ERR_EXTERNAL, "peer gone"};
    CHECK(pthread_create(&th, NULL, set_later, &bad) == 0);
    CHECK_STATUS(tpu_stream_wait_signal(s, sig, 10000), TPU_ERR_EXTERNAL);
    CHECK_CONTAINS(tpu_last_error_message(), "debug failure failed: peer gone");
    pthread_join(th, NULL);
    tpu_signal_free(sig);
    CHECK_OK(tpu_mode_set(TPU_MODE_STRICT));
}

static void test_fused_mode_flushes_before_waiting(void) {
    /* Held (fusable) records before a wait run before the stream blocks. */
    tpu_stream *s = stream(0, 6);
    CHECK_OK(tpu_mode_set(TPU_MODE_FUSED));
    float *buf = NULL;
    CHECK_OK(tpu_mem_alloc(0, 4 * sizeof(float), s, (void **)&buf));
    tpu_op fill = fill_op(vec(buf, 4, TPU_DTYPE_F32), 7.0);
    CHECK_OK(tpu_stream_submit(s, &fill));
    const uint64_t fill_seq = tpu_stream_submitted_seq(s);
    tpu_signal *sig = signal_named("fused");
    CHECK_OK(tpu_stream_wait_signal(s, sig, 10000));
    /* The fill completes while the stream waits for the signal; reading
     * its completion (an acquire) orders the values before this thread's
     * reads of them. */
    bool ran = false;
    for (int ms = 0; ms < 5000 && !(ran = tpu_stream_completed_seq(s) >= fill_seq); ms++)
        sleep_ms(1);
    CHECK(ran);
    CHECK(ran && buf[0] == 7.0f && buf[3] == 7.0f);
    CHECK_OK(tpu_signal_set(sig, TPU_OK, NULL));
    CHECK_OK(tpu_stream_synchronize(s));
    tpu_signal_free(sig);
    CHECK_OK(tpu_mem_free(buf));
    CHECK_OK(tpu_mode_set(TPU_MODE_STRICT));
}

static void test_bad_arguments(void) {
    tpu_signal *sig = signal_named(NULL);
    bool done;
    tpu_status outcome;
    CHECK_STATUS(tpu_signal_create("x", NULL), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_stream_wait_signal(NULL, sig, 0), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_stream_wait_signal(stream(0, 0), NULL, 0), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_signal_set(NULL, TPU_OK, NULL), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_signal_set(sig, (tpu_status)999, NULL), TPU_ERR_INVALID_ARG);
    CHECK_CONTAINS(tpu_last_error_message(), "999 is not a tpu_status");
    CHECK_STATUS(tpu_signal_query(sig, NULL, &outcome), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_signal_query(NULL, &done, &outcome), TPU_ERR_INVALID_ARG);
    /* An unnamed signal's failure still says what failed. */
    tpu_stream *s = stream(0, 7);
    CHECK_OK(tpu_stream_wait_signal(s, sig, 10000));
    CHECK_OK(tpu_signal_set(sig, TPU_ERR_EXTERNAL, NULL));
    CHECK_STATUS(tpu_stream_synchronize(s), TPU_ERR_EXTERNAL);
    CHECK_CONTAINS(tpu_last_error_message(), "external work failed");
    tpu_signal_free(sig);
    tpu_signal_free(NULL);
}

int main(void) {
    test_wait_orders_later_work();
    test_failure_is_kept_on_the_stream();
    test_deadline();
    test_arm_starts_the_deadline_late();
    test_huge_timeout_is_no_deadline();
    test_many_streams_and_chips();
    test_debug_mode_waits_before_return();
    test_fused_mode_flushes_before_waiting();
    test_bad_arguments();
    return check_report();
}
