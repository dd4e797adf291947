/* The caching allocator: stream-ordered reuse, record_stream, capacity and
 * OOM, statistics, empty_cache. Runs with a 64 MiB capacity per chip. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "runtime_test.h"
#include "tpu/runtime.h"

#define MIB (1024u * 1024u)

static tpu_stream *stream(int chip, int index) {
    tpu_stream *s = NULL;
    CHECK_OK(tpu_stream_get(chip, index, &s));
    return s;
}

static tpu_mem_stats stats(int chip) {
    tpu_mem_stats m;
    memset(&m, 0, sizeof m);
    CHECK_OK(tpu_mem_get_stats(chip, &m));
    return m;
}

/* Starts every test from an empty chip with zeroed counters. */
static void reset(int chip) {
    CHECK_OK(tpu_mem_empty_cache(chip));
    CHECK_OK(tpu_mem_reset_accumulated_stats(chip));
    CHECK_OK(tpu_mem_reset_peak_stats(chip));
    tpu_mem_stats m = stats(chip);
    CHECK(m.allocated_bytes == 0 && m.reserved_bytes == 0 && m.allocation_count == 0);
}

static void test_args(void) {
    void *p = (void *)1;
    CHECK_OK(tpu_mem_alloc(0, 0, NULL, &p));
    CHECK(p == NULL);
    CHECK_STATUS(tpu_mem_alloc(0, 16, NULL, NULL), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_mem_alloc(2, 16, NULL, &p), TPU_ERR_INVALID_DEVICE);
    CHECK_CONTAINS(tpu_last_error_message(), "tpu:2");
    CHECK_STATUS(tpu_mem_alloc(-1, 16, NULL, &p), TPU_ERR_INVALID_DEVICE);
    CHECK_STATUS(tpu_mem_alloc(0, 16, stream(1, 0), &p), TPU_ERR_WRONG_DEVICE);
    CHECK_CONTAINS(tpu_last_error_message(), "tpu:1");

    CHECK_OK(tpu_mem_free(NULL));
    int local;
    CHECK_STATUS(tpu_mem_free(&local), TPU_ERR_INVALID_ARG);
    CHECK_OK(tpu_mem_alloc(0, 100, NULL, &p));
    CHECK_OK(tpu_mem_free(p));
    CHECK_STATUS(tpu_mem_free(p), TPU_ERR_INVALID_ARG); /* double free */
    CHECK_STATUS(tpu_mem_record_stream(&local, stream(0, 0)), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_mem_get_stats(5, NULL), TPU_ERR_INVALID_DEVICE);
    CHECK_STATUS(tpu_mem_get_stats(0, NULL), TPU_ERR_INVALID_ARG);
}

static void test_reuse_same_stream(void) {
    reset(0);
    void *p, *q, *r;
    CHECK_OK(tpu_mem_alloc(0, 1500, NULL, &p)); /* rounds to 1536 */
    CHECK(p != NULL && (uintptr_t)p % 64 == 0);
    memset(p, 0xab, 1500); /* the virtual TPU's memory is host memory */
    CHECK_OK(tpu_mem_free(p));
    CHECK_OK(tpu_mem_alloc(0, 1500, NULL, &q));
    CHECK(q == p); /* same stream: reused at once */
    CHECK_OK(tpu_mem_free(q));
    CHECK_OK(tpu_mem_alloc(0, 800, stream(0, 0), &q));
    CHECK(q == p); /* NULL meant the default stream; 1536 <= 2 * 1024 */
    CHECK_OK(tpu_mem_free(q));
    CHECK_OK(tpu_mem_alloc(0, 100, NULL, &r));
    CHECK(r != p); /* 512 bytes: a 1536-byte block would waste too much */
    CHECK_OK(tpu_mem_free(r));

    tpu_mem_stats m = stats(0);
    CHECK(m.num_allocs == 4 && m.num_frees == 4);
    CHECK(m.num_cache_hits == 2);
    CHECK(m.num_segment_allocs == 2);
    CHECK(m.reserved_bytes == 1536 + 512);
    CHECK(m.allocated_bytes == 0 && m.allocation_count == 0 && m.requested_bytes == 0);
}

static void test_no_reuse_across_streams(void) {
    reset(0);
    void *p, *q;
    CHECK_OK(tpu_mem_alloc(0, 4096, stream(0, 1), &p));
    CHECK_OK(tpu_mem_free(p));
    CHECK_OK(tpu_mem_alloc(0, 4096, stream(0, 2), &q));
    CHECK(q != p);
    CHECK_OK(tpu_mem_free(q));
    CHECK_OK(tpu_mem_alloc(0, 4096, stream(0, 1), &q));
    CHECK(q == p);
    CHECK_OK(tpu_mem_free(q));
}

static void test_record_stream(void) {
    reset(0);
    tpu_stream *s1 = stream(0, 1), *s2 = stream(0, 2);
    gate g = {0};
    void *p, *q, *r;
    CHECK_OK(tpu_mem_alloc(0, 8192, s1, &p));
    CHECK_OK(tpu_stream_submit_host_fn(s2, gate_wait, &g)); /* s2 "uses" p */
    CHECK_OK(tpu_mem_record_stream((char *)p + 100, s2));   /* any address inside */
    CHECK_OK(tpu_mem_record_stream(p, s1));                 /* own stream: no effect */
    CHECK_OK(tpu_mem_free(p));
    CHECK(gate_reached(&g));

    CHECK_OK(tpu_mem_alloc(0, 8192, s1, &q));
    CHECK(q != p); /* s2 may still read p */
    gate_open(&g);
    CHECK_OK(tpu_stream_synchronize(s2));
    CHECK_OK(tpu_mem_alloc(0, 8192, s1, &r));
    CHECK(r == p); /* s2 has run: p is back in s1's cache */
    CHECK_OK(tpu_mem_free(q));
    CHECK_OK(tpu_mem_free(r));
}

static void test_stats_and_rounding(void) {
    reset(0);
    void *a, *b, *c;
    CHECK_OK(tpu_mem_alloc(0, 1, NULL, &a));
    CHECK_OK(tpu_mem_alloc(0, 1 * MIB, NULL, &b));
    CHECK_OK(tpu_mem_alloc(0, 1 * MIB + 1, NULL, &c));
    tpu_mem_stats m = stats(0);
    CHECK(m.allocated_bytes == 512 + 1 * MIB + 2 * MIB);
    CHECK(m.requested_bytes == 1 + 1 * MIB + 1 * MIB + 1);
    CHECK(m.reserved_bytes == m.allocated_bytes);
    CHECK(m.allocation_count == 3 && m.num_allocs == 3 && m.num_segment_allocs == 3);
    CHECK(m.allocated_bytes_peak == m.allocated_bytes);

    CHECK_OK(tpu_mem_free(c));
    m = stats(0);
    CHECK(m.allocated_bytes == 512 + 1 * MIB);
    CHECK(m.reserved_bytes == 512 + 3 * MIB); /* c is cached */
    CHECK(m.allocated_bytes_peak == 512 + 3 * MIB);
    CHECK_OK(tpu_mem_reset_peak_stats(0));
    m = stats(0);
    CHECK(m.allocated_bytes_peak == 512 + 1 * MIB && m.reserved_bytes_peak == 512 + 3 * MIB);

    uint64_t free_b, total;
    CHECK_OK(tpu_mem_get_info(0, &free_b, &total));
    CHECK(total == 64 * MIB && free_b == total - m.reserved_bytes);

    CHECK_OK(tpu_mem_free(a));
    CHECK_OK(tpu_mem_free(b));
    CHECK_OK(tpu_mem_empty_cache(0));
    m = stats(0);
    CHECK(m.reserved_bytes == 0 && m.allocated_bytes == 0 && m.num_segment_frees == 3);
    CHECK_OK(tpu_mem_reset_accumulated_stats(0));
    m = stats(0);
    CHECK(m.num_allocs == 0 && m.num_frees == 0 && m.num_segment_allocs == 0 &&
          m.num_segment_frees == 0 && m.num_cache_hits == 0);
}

/* Counts and peaks of allocations and segments, and byte totals, stay
 * consistent through frees, empty_cache and both kinds of reset. */
static void test_counts_peaks_and_totals(void) {
    reset(0);
    CHECK_OK(tpu_mem_empty_cache(0));
    CHECK_OK(tpu_mem_reset_peak_stats(0));
    void *a, *b;
    CHECK_OK(tpu_mem_alloc(0, 1000, NULL, &a));
    CHECK_OK(tpu_mem_alloc(0, 3 * MIB, NULL, &b));
    tpu_mem_stats m = stats(0);
    CHECK(m.allocation_count == 2 && m.allocation_count_peak == 2);
    CHECK(m.segment_count == 2 && m.segment_count_peak == 2);
    CHECK(m.requested_bytes_peak == 1000 + 3 * MIB);
    CHECK(m.allocated_bytes_total == 1024 + 4 * MIB && m.freed_bytes_total == 0);
    CHECK(m.segment_bytes_total == 1024 + 4 * MIB);
    CHECK_OK(tpu_mem_free(b));
    m = stats(0);
    CHECK(m.allocation_count == 1 && m.allocation_count_peak == 2);
    CHECK(m.freed_bytes_total == 4 * MIB && m.segment_count == 2); /* b is cached */
    CHECK_OK(tpu_mem_empty_cache(0));
    m = stats(0);
    CHECK(m.segment_count == 1 && m.segment_count_peak == 2 && m.released_bytes_total == 4 * MIB);
    CHECK_OK(tpu_mem_reset_accumulated_stats(0));
    CHECK_OK(tpu_mem_reset_peak_stats(0));
    m = stats(0);
    CHECK(m.allocated_bytes_total == 0 && m.freed_bytes_total == 0 && m.segment_bytes_total == 0 &&
          m.released_bytes_total == 0);
    CHECK(m.segment_count == 1 && m.segment_count_peak == 1 && m.allocation_count_peak == 1);
    CHECK(m.requested_bytes_peak == 1000);
    CHECK_OK(tpu_mem_free(a));
    CHECK_OK(tpu_mem_empty_cache(0));
    CHECK(stats(0).segment_count == 0);
}

static void test_chip_of(void) {
    void *p;
    int chip = -1;
    CHECK_OK(tpu_mem_alloc(1, 3000, NULL, &p));
    CHECK_OK(tpu_mem_chip_of((char *)p + 2999, &chip));
    CHECK(chip == 1);
    CHECK_OK(tpu_mem_chip_of(p, &chip));
    CHECK(chip == 1);
    int local;
    CHECK_STATUS(tpu_mem_chip_of(&local, &chip), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_mem_chip_of(NULL, &chip), TPU_ERR_INVALID_ARG);
    CHECK_OK(tpu_mem_free(p));
    CHECK_STATUS(tpu_mem_chip_of(p, &chip), TPU_ERR_INVALID_ARG);
    CHECK_OK(tpu_mem_empty_cache(1));
}

static void test_oom(void) {
    reset(0);
    void *big, *more, *huge = (void *)1;
    CHECK_OK(tpu_mem_alloc(0, 48 * MIB, NULL, &big));
    tpu_clear_error();
    CHECK_STATUS(tpu_mem_alloc(0, 32 * MIB, NULL, &more), TPU_ERR_OUT_OF_MEMORY);
    CHECK(more == NULL);
    const char *msg = tpu_last_error_message();
    CHECK_CONTAINS(msg, "tpu:0 out of memory");
    CHECK_CONTAINS(msg, "tried to allocate 32.00 MiB (33554432 bytes)");
    CHECK_CONTAINS(msg, "16.00 MiB (16777216 bytes) free of 64.00 MiB capacity");
    CHECK_CONTAINS(msg, "(0 bytes cached)");

    tpu_mem_stats m = stats(0);
    CHECK(m.num_ooms == 1 && m.num_alloc_retries == 1);
    CHECK(m.allocated_bytes == 48 * MIB && m.reserved_bytes == 48 * MIB);
    CHECK(m.allocation_count == 1 && m.num_allocs == 1);

    /* More than the capacity: refused at once. */
    CHECK_STATUS(tpu_mem_alloc(0, (size_t)1 << 40, NULL, &huge), TPU_ERR_OUT_OF_MEMORY);
    CHECK(huge == NULL);
    CHECK_CONTAINS(tpu_last_error_message(), "(1099511627776 bytes)");
    CHECK(stats(0).num_ooms == 2);
    tpu_clear_error();

    /* Free and asked-for sizes that round alike are told apart by their
     * exact byte counts and the block size. */
    void *small = NULL;
    CHECK_OK(tpu_mem_alloc(0, 512, NULL, &small)); /* 16 MiB - 512 bytes left */
    CHECK_STATUS(tpu_mem_alloc(0, 16 * MIB - 100, NULL, &more), TPU_ERR_OUT_OF_MEMORY);
    msg = tpu_last_error_message();
    CHECK_CONTAINS(msg, "(16777116 bytes, a block of 16777216 bytes)");
    CHECK_CONTAINS(msg, "(16776704 bytes) free");
    CHECK_OK(tpu_mem_free(small));

    /* After freeing, the same request fits: nothing leaked. */
    CHECK_OK(tpu_mem_free(big));
    CHECK_OK(tpu_mem_alloc(0, 32 * MIB, NULL, &more));
    CHECK_OK(tpu_mem_free(more));
    CHECK(stats(0).allocated_bytes == 0);
}

/* Opens a gate after 50 ms, from another thread. */
static void *open_gate_later(void *arg) {
    sleep_ms(50);
    gate_open(arg);
    return NULL;
}

/* Cached blocks of another stream are released to make room. */
static void test_oom_retry_releases_cache(void) {
    reset(0);
    void *p, *q;
    CHECK_OK(tpu_mem_alloc(0, 40 * MIB, stream(0, 1), &p));
    CHECK_OK(tpu_mem_free(p));
    CHECK(stats(0).reserved_bytes == 40 * MIB);
    CHECK_OK(tpu_mem_alloc(0, 40 * MIB, stream(0, 2), &q));
    tpu_mem_stats m = stats(0);
    CHECK(m.num_alloc_retries == 1 && m.num_ooms == 0 && m.num_segment_frees == 1);
    CHECK(m.reserved_bytes == 40 * MIB);
    CHECK_OK(tpu_mem_free(q));

    /* A freed block still used by recorded work on another chip's stream
     * (as after a chip-to-chip copy) is reclaimed too: the retry waits for
     * every chip's streams, not only the allocating chip's. */
    tpu_stream *busy = stream(1, 1);
    gate g = {0};
    CHECK_OK(tpu_mem_alloc(0, 40 * MIB, stream(0, 2), &p));
    CHECK_OK(tpu_stream_submit_host_fn(busy, gate_wait, &g));
    CHECK_OK(tpu_mem_record_stream(p, busy));
    CHECK_OK(tpu_mem_free(p));
    CHECK(gate_reached(&g));
    pthread_t opener;
    pthread_create(&opener, NULL, open_gate_later, &g);
    CHECK_OK(tpu_mem_alloc(0, 40 * MIB, stream(0, 4), &q));
    pthread_join(opener, NULL);
    m = stats(0);
    CHECK(m.reserved_bytes == 40 * MIB && m.num_ooms == 0);
    CHECK_OK(tpu_mem_free(q));
}

/* empty_cache must not release a block while queued work may use it. */
typedef struct {
    atomic_int done;
} flag;

static void *empty_cache_thread(void *arg) {
    flag *f = arg;
    tpu_mem_empty_cache(0);
    atomic_store(&f->done, 1);
    return NULL;
}

static void test_empty_cache_waits(void) {
    reset(0);
    tpu_stream *s1 = stream(0, 1);
    gate g = {0};
    void *p;
    CHECK_OK(tpu_mem_alloc(0, 4096, s1, &p));
    CHECK_OK(tpu_stream_submit_host_fn(s1, gate_wait, &g));
    CHECK_OK(tpu_mem_free(p)); /* stream-ordered free: s1 may still use p */
    CHECK(gate_reached(&g));

    flag f = {0};
    pthread_t t;
    pthread_create(&t, NULL, empty_cache_thread, &f);
    sleep_ms(50);
    CHECK(!atomic_load(&f.done)); /* waiting for s1 */
    CHECK(stats(0).reserved_bytes == 512 * 8);
    gate_open(&g);
    pthread_join(t, NULL);
    CHECK(atomic_load(&f.done));
    CHECK(stats(0).reserved_bytes == 0);
}

/* Many threads allocating and freeing: the counters stay consistent. */
static void *churn(void *arg) {
    int chip = (int)(intptr_t)arg % 2;
    tpu_stream *s;
    tpu_stream_get(chip, 1 + (int)(intptr_t)arg, &s);
    void *ptrs[16];
    for (int rep = 0; rep < 500; rep++) {
        for (int i = 0; i < 16; i++)
            if (tpu_mem_alloc(chip, (size_t)(1 + (rep * 7 + i * 13) % 5000), s, &ptrs[i]) != TPU_OK)
                ptrs[i] = NULL;
        for (int i = 0; i < 16; i++)
            tpu_mem_free(ptrs[i]);
    }
    return NULL;
}

static void test_threads(void) {
    reset(0);
    reset(1);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, churn, (void *)(intptr_t)i);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    for (int c = 0; c < 2; c++) {
        tpu_mem_stats m = stats(c);
        CHECK(m.num_allocs == 2 * 500 * 16 && m.num_frees == m.num_allocs);
        CHECK(m.allocated_bytes == 0 && m.allocation_count == 0 && m.requested_bytes == 0);
        CHECK(m.num_cache_hits + m.num_segment_allocs == m.num_allocs);
        CHECK_OK(tpu_mem_empty_cache(c));
        CHECK(stats(c).reserved_bytes == 0);
    }
}

int main(void) {
    /* Must be set before the runtime initialises, i.e. before any call. */
    setenv("TORCH_TPU_MEMORY_LIMIT", "64M", 1);
    setenv("TORCH_TPU_CHIPS", "2", 1);
    test_args();
    test_reuse_same_stream();
    test_no_reuse_across_streams();
    test_record_stream();
    test_stats_and_rounding();
    test_counts_peaks_and_totals();
    test_chip_of();
    test_oom();
    test_oom_retry_releases_cache();
    test_empty_cache_waits();
    test_threads();
    return check_report();
}
