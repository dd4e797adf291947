/* Events: record, query, synchronize, waits across streams and chips,
 * elapsed time, unrecorded events, chip binding, free while pending. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>

#include "check.h"
#include "runtime_test.h"
#include "tpu/runtime.h"

static tpu_stream *stream(int chip, int index) {
    tpu_stream *s = NULL;
    CHECK_OK(tpu_stream_get(chip, index, &s));
    return s;
}

static tpu_event *event(void) {
    tpu_event *e = NULL;
    CHECK_OK(tpu_event_create(&e));
    return e;
}

/* Host functions log the order in which they ran, across streams. */
typedef struct {
    atomic_int next;
    int order[8];
} ticket;

typedef struct {
    ticket *t;
    int id;
} ticket_item;

static void take_ticket(void *ctx) {
    ticket_item *it = ctx;
    it->t->order[atomic_fetch_add(&it->t->next, 1)] = it->id;
}

static void sleep_20ms(void *ctx) {
    (void)ctx;
    sleep_ms(20);
}

static void test_unrecorded(void) {
    tpu_event *e = event(), *f = event();
    bool done = false;
    double ms;
    CHECK(tpu_event_chip(e) == -1);
    CHECK_OK(tpu_event_query(e, &done));
    CHECK(done);
    CHECK_OK(tpu_event_synchronize(e));
    CHECK_OK(tpu_stream_wait_event(stream(0, 0), e)); /* does nothing */
    CHECK_STATUS(tpu_event_elapsed_ms(e, f, &ms), TPU_ERR_INVALID_ARG);
    CHECK_CONTAINS(tpu_last_error_message(), "never recorded");
    CHECK_STATUS(tpu_event_elapsed_ms(e, f, NULL), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_event_create(NULL), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_event_record(NULL, stream(0, 0)), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_event_record(e, NULL), TPU_ERR_INVALID_ARG);
    tpu_event_free(e);
    tpu_event_free(f);
    tpu_event_free(NULL);
}

static void test_record_query_sync(void) {
    tpu_stream *s = stream(0, 1);
    tpu_event *e = event();
    gate g = {0};
    bool done = true;
    double ms;
    CHECK_OK(tpu_stream_submit_host_fn(s, gate_wait, &g));
    CHECK_OK(tpu_event_record(e, s));
    CHECK(tpu_event_chip(e) == 0);
    CHECK_OK(tpu_event_query(e, &done));
    CHECK(!done);
    CHECK_STATUS(tpu_event_elapsed_ms(e, e, &ms), TPU_ERR_INVALID_ARG);
    CHECK_CONTAINS(tpu_last_error_message(), "not completed");
    gate_open(&g);
    CHECK_OK(tpu_event_synchronize(e));
    CHECK_OK(tpu_event_query(e, &done));
    CHECK(done);
    CHECK_OK(tpu_event_elapsed_ms(e, e, &ms));
    CHECK(ms == 0.0);

    /* Re-recording moves the point. */
    gate g2 = {0};
    CHECK_OK(tpu_stream_submit_host_fn(s, gate_wait, &g2));
    CHECK_OK(tpu_event_record(e, s));
    CHECK_OK(tpu_event_query(e, &done));
    CHECK(!done);
    gate_open(&g2);
    CHECK_OK(tpu_event_synchronize(e));
    CHECK_OK(tpu_event_query(e, &done));
    CHECK(done);

    /* Elapsed time between points on different chips is refused, as on CUDA. */
    tpu_event *other = event();
    CHECK_OK(tpu_event_record(other, stream(1, 1)));
    CHECK_OK(tpu_event_synchronize(other));
    CHECK_STATUS(tpu_event_elapsed_ms(e, other, &ms), TPU_ERR_WRONG_DEVICE);
    CHECK_CONTAINS(tpu_last_error_message(), "different chips (tpu:0 and tpu:1)");
    tpu_event_free(other);
    tpu_event_free(e);
}

static void test_wait_across_streams(int chip_a, int chip_b) {
    tpu_stream *a = stream(chip_a, 2), *b = stream(chip_b, 3);
    tpu_event *e = event();
    ticket t = {0};
    ticket_item first = {&t, 1}, second = {&t, 2};
    gate g = {0};
    CHECK_OK(tpu_stream_submit_host_fn(a, gate_wait, &g));
    CHECK_OK(tpu_stream_submit_host_fn(a, take_ticket, &first));
    CHECK_OK(tpu_event_record(e, a));
    CHECK_OK(tpu_stream_wait_event(b, e));
    CHECK_OK(tpu_stream_submit_host_fn(b, take_ticket, &second));
    sleep_ms(20);
    bool done = true;
    CHECK_OK(tpu_stream_query(b, &done));
    CHECK(!done); /* b waits for a, which waits at the gate */
    CHECK(atomic_load(&t.next) == 0);
    gate_open(&g);
    CHECK_OK(tpu_stream_synchronize(b));
    CHECK(atomic_load(&t.next) == 2 && t.order[0] == 1 && t.order[1] == 2);
    CHECK_OK(tpu_stream_synchronize(a));
    tpu_event_free(e);
}

static void test_elapsed(void) {
    tpu_stream *s = stream(1, 1);
    tpu_event *start = event(), *end = event();
    double ms = -1;
    CHECK_OK(tpu_event_record(start, s));
    CHECK_OK(tpu_stream_submit_host_fn(s, sleep_20ms, NULL));
    CHECK_OK(tpu_event_record(end, s));
    CHECK_OK(tpu_event_synchronize(end));
    CHECK_OK(tpu_event_elapsed_ms(start, end, &ms));
    CHECK(ms >= 19.0 && ms < 5000.0);
    CHECK_OK(tpu_event_elapsed_ms(end, start, &ms));
    CHECK(ms <= -19.0);
    tpu_event_free(start);
    tpu_event_free(end);
}

static void test_wrong_device(void) {
    tpu_event *e = event();
    CHECK_OK(tpu_event_record(e, stream(0, 0)));
    CHECK_STATUS(tpu_event_record(e, stream(1, 4)), TPU_ERR_WRONG_DEVICE);
    CHECK_CONTAINS(tpu_last_error_message(), "tpu:0");
    CHECK_CONTAINS(tpu_last_error_message(), "tpu:1");
    CHECK(tpu_event_chip(e) == 0);
    CHECK_OK(tpu_event_record(e, stream(0, 4))); /* another stream of the same chip */
    CHECK_OK(tpu_event_synchronize(e));
    tpu_event_free(e);
}

/* Freeing an event whose record is still queued is safe. */
static void test_free_pending(void) {
    tpu_stream *s = stream(0, 5), *w = stream(0, 6);
    tpu_event *e = event();
    gate g = {0};
    atomic_int flag = 0;
    CHECK_OK(tpu_stream_submit_host_fn(s, gate_wait, &g));
    CHECK_OK(tpu_event_record(e, s));
    CHECK_OK(tpu_stream_wait_event(w, e));
    tpu_event_free(e);
    CHECK_OK(tpu_stream_submit_host_fn(w, set_flag, &flag));
    gate_open(&g);
    CHECK_OK(tpu_stream_synchronize(w));
    CHECK_OK(tpu_stream_synchronize(s));
    CHECK(atomic_load(&flag) == 1);
}

int main(void) {
    setenv("TORCH_TPU_CHIPS", "2", 0);
    test_unrecorded();
    test_record_query_sync();
    test_wait_across_streams(0, 0);
    test_wait_across_streams(0, 1); /* a chip-1 stream waits on a chip-0 event */
    test_elapsed();
    test_wrong_device();
    test_free_pending();
    return check_report();
}
