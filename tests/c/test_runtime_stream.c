/* Streams: lookup, ordering of many records (host functions and ops),
 * concurrent submitters, query, debug mode, chip synchronisation. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "runtime_test.h"
#include "tpu/runtime.h"

static tpu_stream *stream(int chip, int index) {
    tpu_stream *s = NULL;
    CHECK_OK(tpu_stream_get(chip, index, &s));
    return s;
}

static void test_lookup(void) {
    tpu_stream *s = stream(0, 0), *t = NULL;
    CHECK(s != NULL && stream(0, 0) == s);
    CHECK(tpu_stream_chip(s) == 0 && tpu_stream_index(s) == 0);
    t = stream(1, 31);
    CHECK(t != s && tpu_stream_chip(t) == 1 && tpu_stream_index(t) == 31);
    CHECK(tpu_stream_chip(NULL) == -1 && tpu_stream_index(NULL) == -1);

    CHECK_STATUS(tpu_stream_get(0, 32, &t), TPU_ERR_INVALID_ARG);
    CHECK_CONTAINS(tpu_last_error_message(), "32");
    CHECK_STATUS(tpu_stream_get(0, -1, &t), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_stream_get(2, 0, &t), TPU_ERR_INVALID_DEVICE);
    CHECK_STATUS(tpu_stream_get(0, 0, NULL), TPU_ERR_INVALID_ARG);

    /* The pool hands out 1 .. 31 round-robin, never the default stream. */
    int seen[TPU_STREAMS_MAX] = {0};
    for (int i = 0; i < 2 * (TPU_STREAMS_MAX - 1); i++) {
        CHECK_OK(tpu_stream_next_from_pool(1, &t));
        CHECK(tpu_stream_chip(t) == 1);
        seen[tpu_stream_index(t)]++;
    }
    CHECK(seen[0] == 0);
    for (int i = 1; i < TPU_STREAMS_MAX; i++)
        CHECK(seen[i] == 2);
    CHECK_STATUS(tpu_stream_next_from_pool(7, &t), TPU_ERR_INVALID_DEVICE);

    CHECK_STATUS(tpu_stream_synchronize(NULL), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_stream_submit(NULL, NULL), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_stream_submit_host_fn(s, NULL, NULL), TPU_ERR_INVALID_ARG);
    bool done;
    CHECK_STATUS(tpu_stream_query(s, NULL), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_stream_query(NULL, &done), TPU_ERR_INVALID_ARG);
}

/* Host functions append their number to a log, on the worker thread. */
typedef struct {
    int *log;
    int n;
} log_t;

typedef struct {
    log_t *log;
    int value;
} log_item;

static void append(void *ctx) {
    log_item *it = ctx;
    it->log->log[it->log->n++] = it->value;
}

static void test_host_fn_order(void) {
    enum { N = 10000 };
    log_t log = {calloc(N, sizeof(int)), 0};
    log_item *items = calloc(N, sizeof *items);
    tpu_stream *s = stream(0, 1);
    int submitted = 1;
    for (int i = 0; i < N; i++) {
        items[i] = (log_item){&log, i};
        submitted &= tpu_stream_submit_host_fn(s, append, &items[i]) == TPU_OK;
    }
    CHECK(submitted);
    CHECK_OK(tpu_stream_synchronize(s));
    int ok = log.n == N;
    for (int i = 0; ok && i < N; i++)
        ok = log.log[i] == i;
    CHECK(ok);
    free(items);
    free(log.log);
}

/* FILL then COPY to a host slot, many times: each copy sees its fill. */
static void test_op_order(int chip) {
    enum { N = 2000 };
    tpu_stream *s = stream(chip, 2);
    int32_t *dev = NULL;
    int32_t *host = calloc(N, sizeof *host);
    CHECK_OK(tpu_mem_alloc(chip, sizeof(int32_t), s, (void **)&dev));
    int submitted = 1;
    for (int i = 0; i < N; i++) {
        tpu_op fill = fill_op(vec(dev, 1, TPU_DTYPE_I32), i);
        tpu_op copy = d2h_op(vec(&host[i], 1, TPU_DTYPE_I32), vec(dev, 1, TPU_DTYPE_I32));
        submitted &= tpu_stream_submit(s, &fill) == TPU_OK;
        submitted &= tpu_stream_submit(s, &copy) == TPU_OK;
        memset(&fill, 0xff, sizeof fill); /* the stream queued a copy */
    }
    CHECK(submitted);
    CHECK_OK(tpu_stream_synchronize(s));
    int ok = 1;
    for (int i = 0; ok && i < N; i++)
        ok = host[i] == i;
    CHECK(ok);
    CHECK_OK(tpu_mem_free(dev));
    free(host);
}

/* A large op runs on the thread pool from the stream's worker. */
static void test_big_op(void) {
    enum { N = 1 << 20 };
    tpu_stream *s = stream(1, 0);
    float *dev = NULL;
    float *host = malloc(N * sizeof *host);
    CHECK_OK(tpu_mem_alloc(1, N * sizeof(float), s, (void **)&dev));
    tpu_op fill = fill_op(vec(dev, N, TPU_DTYPE_F32), 2.5);
    tpu_op copy = d2h_op(vec(host, N, TPU_DTYPE_F32), vec(dev, N, TPU_DTYPE_F32));
    CHECK(tpu_op_max_threads(&fill) > 1);
    CHECK_OK(tpu_stream_submit(s, &fill));
    CHECK_OK(tpu_stream_submit(s, &copy));
    CHECK_OK(tpu_stream_synchronize(s));
    int ok = 1;
    for (int i = 0; ok && i < N; i++)
        ok = host[i] == 2.5f;
    CHECK(ok);
    CHECK_OK(tpu_mem_free(dev));
    free(host);
}

/* Several threads submit to one stream: each one's records stay in order. */
enum { SUBMITTERS = 4, PER_THREAD = 2000 };

typedef struct {
    tpu_stream *s;
    log_t *log;
    log_item items[PER_THREAD];
    int thread;
} submitter;

static void *submit_many(void *arg) {
    submitter *sub = arg;
    for (int k = 0; k < PER_THREAD; k++) {
        sub->items[k] = (log_item){sub->log, sub->thread * PER_THREAD + k};
        tpu_stream_submit_host_fn(sub->s, append, &sub->items[k]);
    }
    return NULL;
}

static void test_concurrent_submitters(void) {
    log_t log = {calloc(SUBMITTERS * PER_THREAD, sizeof(int)), 0};
    submitter *subs = calloc(SUBMITTERS, sizeof *subs);
    pthread_t t[SUBMITTERS];
    tpu_stream *s = stream(0, 3);
    for (int i = 0; i < SUBMITTERS; i++) {
        subs[i] = (submitter){.s = s, .log = &log, .thread = i};
        pthread_create(&t[i], NULL, submit_many, &subs[i]);
    }
    for (int i = 0; i < SUBMITTERS; i++)
        pthread_join(t[i], NULL);
    CHECK_OK(tpu_stream_synchronize(s));
    CHECK(log.n == SUBMITTERS * PER_THREAD);
    int last[SUBMITTERS] = {-1, -1, -1, -1}, ok = 1;
    for (int i = 0; i < log.n; i++) {
        int th = log.log[i] / PER_THREAD, k = log.log[i] % PER_THREAD;
        ok = ok && k == last[th] + 1;
        last[th] = k;
    }
    CHECK(ok);
    free(subs);
    free(log.log);
}

static void test_query(void) {
    tpu_stream *s = stream(0, 4);
    gate g = {0};
    bool done = false;
    CHECK_OK(tpu_stream_query(s, &done));
    CHECK(done);
    CHECK_OK(tpu_stream_submit_host_fn(s, gate_wait, &g));
    CHECK_OK(tpu_stream_query(s, &done));
    CHECK(!done);
    gate_open(&g);
    CHECK_OK(tpu_stream_synchronize(s));
    CHECK_OK(tpu_stream_query(s, &done));
    CHECK(done);

    /* An op refused by tpu_op_check is not queued. */
    tpu_op bad;
    memset(&bad, 0, sizeof bad);
    bad.code = TPU_OP_COUNT;
    CHECK(tpu_stream_submit(s, &bad) != TPU_OK);
    CHECK_OK(tpu_stream_query(s, &done));
    CHECK(done);
}

static void test_debug_mode(void) {
    tpu_stream *s = stream(0, 5);
    gate g = {0};
    atomic_int flag = 0;
    CHECK_OK(tpu_stream_submit_host_fn(s, gate_wait, &g)); /* queued in strict mode */
    CHECK_OK(tpu_mode_set(TPU_MODE_DEBUG));
    gate_open(&g);
    /* Runs after the queued record, before the call returns. */
    CHECK_OK(tpu_stream_submit_host_fn(s, set_flag, &flag));
    CHECK(atomic_load(&flag) == 1);
    bool done = false;
    CHECK_OK(tpu_stream_query(s, &done));
    CHECK(done);

    int32_t *dev = NULL, host = -1;
    CHECK_OK(tpu_mem_alloc(0, sizeof(int32_t), s, (void **)&dev));
    tpu_op fill = fill_op(vec(dev, 1, TPU_DTYPE_I32), 42);
    tpu_op copy = d2h_op(vec(&host, 1, TPU_DTYPE_I32), vec(dev, 1, TPU_DTYPE_I32));
    CHECK_OK(tpu_stream_submit(s, &fill));
    CHECK_OK(tpu_stream_submit(s, &copy));
    CHECK(host == 42);
    CHECK_OK(tpu_mode_set(TPU_MODE_STRICT));
    CHECK_OK(tpu_stream_synchronize(s));
    CHECK_OK(tpu_mem_free(dev));
}

static void test_chip_synchronize(void) {
    gate g1 = {0}, g2 = {0};
    atomic_int flag = 0;
    tpu_stream *a = stream(1, 6), *b = stream(1, 7);
    CHECK_OK(tpu_stream_submit_host_fn(a, gate_wait, &g1));
    CHECK_OK(tpu_stream_submit_host_fn(b, gate_wait, &g2));
    CHECK_OK(tpu_stream_submit_host_fn(b, set_flag, &flag));
    gate_open(&g1);
    gate_open(&g2);
    CHECK_OK(tpu_chip_synchronize(1));
    CHECK(atomic_load(&flag) == 1);
    CHECK_STATUS(tpu_chip_synchronize(2), TPU_ERR_INVALID_DEVICE);
}

/* Wait hooks that count their calls, and tell whether a wait is open. */
static atomic_int g_hook_begins, g_hook_ends;
static int g_hook_token;

static void *count_begin(void) {
    atomic_fetch_add(&g_hook_begins, 1);
    return &g_hook_token;
}

static void count_end(void *token) {
    if (token == &g_hook_token)
        atomic_fetch_add(&g_hook_ends, 1);
}

typedef struct {
    tpu_stream *s;
    int n;
    atomic_int submitted;
    int *order; /* order[i] = the i-th host function's position */
} flood;

static atomic_int g_next_pos;

static void record_pos(void *ctx) {
    *(int *)ctx = atomic_fetch_add(&g_next_pos, 1);
}

static void *flood_thread(void *arg) {
    flood *f = arg;
    for (int i = 0; i < f->n; i++) {
        CHECK_OK(tpu_stream_submit_host_fn(f->s, record_pos, &f->order[i]));
        atomic_fetch_add(&f->submitted, 1);
    }
    return NULL;
}

/* A stream queues a bounded number of bytes of records: past the bound
 * the submitter waits (between the wait hooks) until the worker makes
 * room, and nothing is lost or reordered. A host function takes 32 bytes
 * of the 512 KiB ring, so about 16,000 fit. */
static void test_queue_bound(void) {
    enum { FIT = 512 * 1024 / 32, EXTRA = 1000 };
    tpu_stream *s = stream(0, 6);
    tpu_runtime_set_wait_hooks(count_begin, count_end);
    gate g = {0};
    CHECK_OK(tpu_stream_submit_host_fn(s, gate_wait, &g));
    CHECK(gate_reached(&g)); /* running: its slot stays taken until it returns */
    flood f = {.s = s, .n = FIT + EXTRA};
    f.order = calloc((size_t)f.n, sizeof *f.order);
    atomic_store(&g_next_pos, 0);
    pthread_t t;
    pthread_create(&t, NULL, flood_thread, &f);
    /* The submitter fills the free slots, then blocks. */
    int last = -1;
    for (int i = 0; i < 200 && atomic_load(&f.submitted) != last; i++) {
        last = atomic_load(&f.submitted);
        sleep_ms(20);
    }
    CHECK(atomic_load(&f.submitted) < f.n);
    CHECK(atomic_load(&f.submitted) >= FIT - 10);
    CHECK(atomic_load(&g_hook_begins) >= 1 && atomic_load(&g_hook_ends) == 0);
    gate_open(&g);
    pthread_join(t, NULL);
    CHECK_OK(tpu_stream_synchronize(s));
    CHECK(atomic_load(&f.submitted) == f.n);
    CHECK(atomic_load(&g_hook_ends) == atomic_load(&g_hook_begins));
    int in_order = 1;
    for (int i = 0; i < f.n; i++)
        in_order &= f.order[i] == i;
    CHECK(in_order);
    tpu_runtime_set_wait_hooks(NULL, NULL);
    free(f.order);
}

/* Records of every size (FILLs of 1 to TPU_MAX_DIMS dims, D2H copies,
 * host functions) queued behind a gate until the ring is full, many
 * times its size in all: each entry runs once, in order, whole, across
 * the pads at the end of the buffer and the waits for room. */
typedef struct {
    tpu_stream *s;
    int32_t *dev;     /* TPU_MAX_DIMS elements of device memory */
    int32_t *host;    /* n slots */
    int *order;       /* n slots: the host function's position */
    int n;
    atomic_int done;  /* the submitter has queued everything */
} mixed;

static void *submit_mixed(void *arg) {
    mixed *m = arg;
    for (int i = 0; i < m->n; i++) {
        int rank = 1 + i % TPU_MAX_DIMS, slot = i % TPU_MAX_DIMS;
        tpu_tensor t = vec(m->dev + slot, 1, TPU_DTYPE_I32);
        t.ndim = rank; /* [1, 1, ..., 1]: one element, rank dims of record */
        for (int d = 0; d < rank; d++)
            t.sizes[d] = 1, t.strides[d] = 1;
        tpu_op fill = fill_op(t, i);
        CHECK_OK(tpu_stream_submit(m->s, &fill));
        tpu_op copy = d2h_op(vec(&m->host[i], 1, TPU_DTYPE_I32), vec(m->dev + slot, 1, TPU_DTYPE_I32));
        CHECK_OK(tpu_stream_submit(m->s, &copy));
        if (i % 3 == 0)
            CHECK_OK(tpu_stream_submit_host_fn(m->s, record_pos, &m->order[i]));
    }
    atomic_store(&m->done, 1);
    return NULL;
}

static void test_records_of_every_size(void) {
    tpu_stream *s = stream(1, 9);
    mixed m = {.s = s, .n = 12000};
    CHECK_OK(tpu_mem_alloc(1, TPU_MAX_DIMS * sizeof(int32_t), s, (void **)&m.dev));
    m.host = calloc((size_t)m.n, sizeof *m.host);
    m.order = calloc((size_t)m.n, sizeof *m.order);
    for (int i = 0; i < m.n; i++)
        m.host[i] = -1, m.order[i] = -1;
    atomic_store(&g_next_pos, 0);
    gate g = {0};
    CHECK_OK(tpu_stream_submit_host_fn(s, gate_wait, &g));
    pthread_t t;
    pthread_create(&t, NULL, submit_mixed, &m);
    sleep_ms(200);
    CHECK(!atomic_load(&m.done)); /* the ring filled and the submitter waits */
    gate_open(&g);
    pthread_join(t, NULL);
    CHECK_OK(tpu_stream_synchronize(s));
    int values = 1, in_order = 1;
    for (int i = 0; i < m.n; i++) {
        values &= m.host[i] == i;
        if (i % 3 == 0)
            in_order &= m.order[i] == i / 3;
    }
    CHECK(values);
    CHECK(in_order);
    CHECK_OK(tpu_mem_free(m.dev));
    free(m.host);
    free(m.order);
}

/* Records whose device memory is not live memory of the stream's chip are
 * refused at submit: freed, shrunk, another chip's (except a copy's
 * source), or past the end of the block. */
static void test_submit_checks_device_memory(void) {
    tpu_stream *s0 = stream(0, 0);
    int32_t *a = NULL, *b = NULL, host[4] = {0};
    CHECK_OK(tpu_mem_alloc(0, 4 * sizeof(int32_t), s0, (void **)&a));
    CHECK_OK(tpu_mem_alloc(1, 4 * sizeof(int32_t), NULL, (void **)&b));
    tpu_op fill = fill_op(vec(a, 4, TPU_DTYPE_I32), 7);
    CHECK_OK(tpu_stream_submit(s0, &fill));

    tpu_op too_long = fill_op(vec(a, 5, TPU_DTYPE_I32), 7); /* claims 20 bytes of a 16-byte block */
    tpu_clear_error();
    CHECK_STATUS(tpu_stream_submit(s0, &too_long), TPU_ERR_OUT_OF_BOUNDS);
    CHECK_CONTAINS(tpu_last_error_message(), "fill: the storage of out: 20 bytes at");
    CHECK_CONTAINS(tpu_last_error_message(), "are not live memory of tpu:0");

    tpu_op other_chip = fill_op(vec(b, 4, TPU_DTYPE_I32), 1);
    CHECK_STATUS(tpu_stream_submit(s0, &other_chip), TPU_ERR_OUT_OF_BOUNDS);
    /* A copy may read another chip's memory (chip-to-chip copies), not write it. */
    tpu_op cross = copy_op(vec(a, 4, TPU_DTYPE_I32), vec(b, 4, TPU_DTYPE_I32));
    CHECK_OK(tpu_stream_submit(s0, &cross));
    tpu_op cross_out = copy_op(vec(b, 4, TPU_DTYPE_I32), vec(a, 4, TPU_DTYPE_I32));
    CHECK_STATUS(tpu_stream_submit(s0, &cross_out), TPU_ERR_OUT_OF_BOUNDS);
    /* Host memory is only allowed on the host side of a transfer. */
    tpu_op to_host = d2h_op(vec(host, 4, TPU_DTYPE_I32), vec(a, 4, TPU_DTYPE_I32));
    CHECK_OK(tpu_stream_submit(s0, &to_host));
    tpu_op host_as_device = copy_op(vec(host, 4, TPU_DTYPE_I32), vec(a, 4, TPU_DTYPE_I32));
    CHECK_STATUS(tpu_stream_submit(s0, &host_as_device), TPU_ERR_OUT_OF_BOUNDS);
    /* A good out, then an input inside a (a live block's interior: allowed),
     * then one that runs past its end: the error names that input. */
    tpu_op interior = copy_op(vec(a, 2, TPU_DTYPE_I32), vec(a + 2, 2, TPU_DTYPE_I32));
    CHECK_OK(tpu_stream_submit(s0, &interior));
    int32_t *c = NULL;
    CHECK_OK(tpu_mem_alloc(0, 4 * sizeof(int32_t), s0, (void **)&c));
    tpu_op past_end = copy_op(vec(c, 4, TPU_DTYPE_I32), vec(a + 1, 4, TPU_DTYPE_I32));
    tpu_clear_error();
    CHECK_STATUS(tpu_stream_submit(s0, &past_end), TPU_ERR_OUT_OF_BOUNDS);
    CHECK_CONTAINS(tpu_last_error_message(), "copy: the storage of in[0]: 16 bytes at");
    CHECK_OK(tpu_mem_free(c));
    CHECK_OK(tpu_stream_synchronize(s0));

    CHECK_OK(tpu_mem_free(a));
    tpu_op after_free = fill_op(vec(a, 4, TPU_DTYPE_I32), 7);
    CHECK_STATUS(tpu_stream_submit(s0, &after_free), TPU_ERR_OUT_OF_BOUNDS);
    CHECK_OK(tpu_mem_free(b));
    CHECK_OK(tpu_stream_synchronize(s0));
}

/* The worker sleeps after WORKER_SPIN_NS (1 ms) idle, and a submitter
 * wakes it without a full fence of its own (stream.c, the struct). Records
 * queued just as the worker goes to sleep must still run without anyone
 * waiting on the stream: each host function is polled for here (a wait
 * or query would itself wake the worker), with a deadline, so a lost
 * wake-up fails instead of hanging. The gaps straddle the spin. */
static void test_wakeup_without_waiting(void) {
    tpu_stream *s = NULL;
    CHECK_OK(tpu_stream_get(0, 7, &s));
    unsigned seed = 12345;
    int lost = 0;
    for (int i = 0; i < 400 && !lost; i++) {
        seed = seed * 1103515245u + 12345u;
        int gap_us = 500 + (int)((seed >> 16) % 1000); /* 0.5..1.5 ms */
        struct timespec ts = {0, gap_us * 1000L};
        nanosleep(&ts, NULL);
        atomic_int flag = 0;
        CHECK_OK(tpu_stream_submit_host_fn(s, set_flag, &flag));
        for (int ms = 0; ms < 2000 && !atomic_load(&flag); ms++)
            sleep_ms(1);
        lost = !atomic_load(&flag);
        CHECK(!lost);
        if (lost) /* let the record run before its flag goes out of scope */
            CHECK_OK(tpu_stream_synchronize(s));
    }
}

/* Several host threads wait on one stream for different records (events
 * recorded after each of a chain of gated host functions): each returns
 * once its own record has run, and none before, whichever waiter the
 * completing records wake first. */
enum { WAITERS = 4 };

typedef struct {
    atomic_int *allowed; /* step i runs once allowed > i */
    int step;
    atomic_int *ran;
} gated_step;

static void run_gated(void *ctx) {
    gated_step *g = ctx;
    while (atomic_load(g->allowed) <= g->step)
        sleep_ms(1);
    atomic_store(&g->ran[g->step], 1);
}

typedef struct {
    tpu_event *event;
    atomic_int *ran_at_return; /* what ran[step] read when the wait returned */
    atomic_int *ran;
    int step;
    atomic_int returned;
} step_waiter;

static void *wait_step(void *arg) {
    step_waiter *w = arg;
    tpu_status st = tpu_event_synchronize(w->event);
    atomic_store(w->ran_at_return, st == TPU_OK ? atomic_load(&w->ran[w->step]) : -1);
    atomic_store(&w->returned, 1);
    return NULL;
}

static void test_waiters_for_different_records(void) {
    tpu_stream *s = stream(0, 8);
    atomic_int allowed = 0, ran[WAITERS] = {0}, ran_at_return[WAITERS] = {0};
    gated_step steps[WAITERS];
    step_waiter waiters[WAITERS];
    pthread_t t[WAITERS];
    for (int i = 0; i < WAITERS; i++) {
        steps[i] = (gated_step){&allowed, i, ran};
        CHECK_OK(tpu_stream_submit_host_fn(s, run_gated, &steps[i]));
        waiters[i] = (step_waiter){NULL, &ran_at_return[i], ran, i, 0};
        CHECK_OK(tpu_event_create(&waiters[i].event));
        CHECK_OK(tpu_event_record(waiters[i].event, s));
    }
    /* Started last first, so that the highest numbers register first. */
    for (int i = WAITERS - 1; i >= 0; i--)
        pthread_create(&t[i], NULL, wait_step, &waiters[i]);
    sleep_ms(20); /* past the waits' polling: asleep */
    for (int k = 0; k <= WAITERS; k++) {
        /* Steps below k are allowed: exactly waiters below k return. */
        for (int i = 0; i < k; i++)
            for (int ms = 0; ms < 2000 && !atomic_load(&waiters[i].returned); ms++)
                sleep_ms(1);
        sleep_ms(10);
        for (int i = 0; i < WAITERS; i++)
            CHECK(atomic_load(&waiters[i].returned) == (i < k));
        atomic_store(&allowed, k + 1);
    }
    for (int i = 0; i < WAITERS; i++) {
        pthread_join(t[i], NULL);
        CHECK(atomic_load(&ran_at_return[i]) == 1);
        tpu_event_free(waiters[i].event);
    }
}

int main(void) {
    setenv("TORCH_TPU_CHIPS", "2", 0);
    setenv("TORCH_TPU_NUM_THREADS", "4", 0);
    test_lookup();
    test_host_fn_order();
    test_op_order(0);
    test_op_order(1);
    test_big_op();
    test_concurrent_submitters();
    test_query();
    test_debug_mode();
    test_chip_synchronize();
    test_queue_bound();
    test_records_of_every_size();
    test_submit_checks_device_memory();
    test_wakeup_without_waiting();
    test_waiters_for_different_records();
    return check_report();
}
