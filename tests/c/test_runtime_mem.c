/* The caching allocator: stream-ordered reuse, record_stream, capacity and
 * OOM, statistics, empty_cache. Runs with a 64 MiB capacity per chip. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "runtime_test.h"
#include "tpu/mem_history.h"
#include "tpu/runtime.h"

#define MIB (1024u * 1024u)

static tpu_stream *stream(int chip, int index) {
    tpu_stream *s = NULL;
    CHECK_OK(tpu_stream_get(chip, index, &s));
    return s;
}

/* The "all" pool of a statistic. */
#define ALL(stat) ((stat)[TPU_MEM_POOL_ALL])

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
    CHECK(ALL(m.allocated_bytes).current == 0 && ALL(m.reserved_bytes).current == 0 &&
          ALL(m.allocation).current == 0);
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
    CHECK(ALL(m.allocation).allocated == 4 && ALL(m.allocation).freed == 4);
    CHECK(m.num_cache_hits == 2);
    CHECK(m.num_device_alloc == 2);
    CHECK(ALL(m.reserved_bytes).current == 1536 + 512);
    CHECK(ALL(m.allocated_bytes).current == 0 && ALL(m.allocation).current == 0 &&
          ALL(m.requested_bytes).current == 0);
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
    CHECK(ALL(m.allocated_bytes).current == 512 + 1 * MIB + 1 * MIB + 512);
    CHECK(ALL(m.requested_bytes).current == 1 + 1 * MIB + 1 * MIB + 1);
    CHECK(ALL(m.reserved_bytes).current == 512 + 1 * MIB + 2 * MIB); /* c's segment: 2 MiB */
    CHECK(ALL(m.allocation).current == 3 && ALL(m.allocation).allocated == 3 &&
          m.num_device_alloc == 3);
    CHECK(ALL(m.allocated_bytes).peak == ALL(m.allocated_bytes).current);

    CHECK_OK(tpu_mem_free(c));
    m = stats(0);
    CHECK(ALL(m.allocated_bytes).current == 512 + 1 * MIB);
    CHECK(ALL(m.reserved_bytes).current == 512 + 3 * MIB); /* c is cached */
    CHECK(ALL(m.allocated_bytes).peak == 512 + 2 * MIB + 512);
    CHECK_OK(tpu_mem_reset_peak_stats(0));
    m = stats(0);
    CHECK(ALL(m.allocated_bytes).peak == 512 + 1 * MIB &&
          ALL(m.reserved_bytes).peak == 512 + 3 * MIB);

    uint64_t free_b, total;
    CHECK_OK(tpu_mem_get_info(0, &free_b, &total));
    CHECK(total == 64 * MIB && free_b == total - (uint64_t)ALL(m.reserved_bytes).current);

    CHECK_OK(tpu_mem_free(a));
    CHECK_OK(tpu_mem_free(b));
    CHECK_OK(tpu_mem_empty_cache(0));
    m = stats(0);
    CHECK(ALL(m.reserved_bytes).current == 0 && ALL(m.allocated_bytes).current == 0 &&
          m.num_device_free == 3);
    CHECK_OK(tpu_mem_reset_accumulated_stats(0));
    m = stats(0);
    CHECK(ALL(m.allocation).allocated == 0 && ALL(m.allocation).freed == 0 &&
          m.num_device_alloc == 0 &&
          m.num_device_free == 0 && m.num_cache_hits == 0);
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
    CHECK(ALL(m.allocation).current == 2 && ALL(m.allocation).peak == 2);
    CHECK(ALL(m.segment).current == 2 && ALL(m.segment).peak == 2);
    CHECK(ALL(m.requested_bytes).peak == 1000 + 3 * MIB);
    CHECK(ALL(m.allocated_bytes).allocated == 1024 + 3 * MIB && ALL(m.allocated_bytes).freed == 0);
    CHECK(ALL(m.reserved_bytes).allocated == 1024 + 4 * MIB);
    CHECK_OK(tpu_mem_free(b));
    m = stats(0);
    CHECK(ALL(m.allocation).current == 1 && ALL(m.allocation).peak == 2);
    CHECK(ALL(m.allocated_bytes).freed == 3 * MIB && ALL(m.segment).current == 2); /* b is cached */
    CHECK_OK(tpu_mem_empty_cache(0));
    m = stats(0);
    CHECK(ALL(m.segment).current == 1 && ALL(m.segment).peak == 2 &&
          ALL(m.reserved_bytes).freed == 4 * MIB);
    CHECK_OK(tpu_mem_reset_accumulated_stats(0));
    CHECK_OK(tpu_mem_reset_peak_stats(0));
    m = stats(0);
    CHECK(ALL(m.allocated_bytes).allocated == 0 && ALL(m.allocated_bytes).freed == 0 &&
          ALL(m.reserved_bytes).allocated == 0 &&
          ALL(m.reserved_bytes).freed == 0);
    CHECK(ALL(m.segment).current == 1 && ALL(m.segment).peak == 1 && ALL(m.allocation).peak == 1);
    CHECK(ALL(m.requested_bytes).peak == 1000);
    CHECK_OK(tpu_mem_free(a));
    CHECK_OK(tpu_mem_empty_cache(0));
    CHECK(ALL(stats(0).segment).current == 0);
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
    CHECK(ALL(m.allocated_bytes).current == 48 * MIB && ALL(m.reserved_bytes).current == 48 * MIB);
    CHECK(ALL(m.allocation).current == 1 && ALL(m.allocation).allocated == 1);

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
    CHECK(ALL(stats(0).allocated_bytes).current == 0);
}

/* Small (<= 1 MiB) and large blocks are counted in their own pools and
 * add up to "all"; a block freed while another stream's recorded work may
 * use it is no longer allocated but still active (and its requested bytes
 * still count) until that work has run. */
static void test_pools_and_active(void) {
    reset(0);
    void *small, *large;
    CHECK_OK(tpu_mem_alloc(0, 1000, NULL, &small));     /* a 1024-byte block */
    CHECK_OK(tpu_mem_alloc(0, 3 * MIB, NULL, &large)); /* of a 4 MiB segment */
    tpu_mem_stats m = stats(0);
    CHECK(m.allocated_bytes[TPU_MEM_POOL_SMALL].current == 1024);
    CHECK(m.allocated_bytes[TPU_MEM_POOL_LARGE].current == 3 * MIB);
    CHECK(ALL(m.allocated_bytes).current == 1024 + 3 * MIB);
    CHECK(m.reserved_bytes[TPU_MEM_POOL_LARGE].current == 4 * MIB);
    CHECK(m.inactive_split_bytes[TPU_MEM_POOL_LARGE].current == 1 * MIB);
    CHECK(m.segment[TPU_MEM_POOL_SMALL].current == 1 && m.segment[TPU_MEM_POOL_LARGE].current == 1);
    CHECK(m.reserved_bytes[TPU_MEM_POOL_SMALL].current == 1024);
    CHECK(m.requested_bytes[TPU_MEM_POOL_LARGE].current == 3 * MIB);
    CHECK(ALL(m.active).current == 2 && ALL(m.active_bytes).current == 1024 + 3 * MIB);
    CHECK_OK(tpu_mem_free(small));
    CHECK_OK(tpu_mem_free(large));

    tpu_stream *s1 = stream(0, 1), *s2 = stream(0, 2);
    gate g = {0};
    void *p, *q;
    CHECK_OK(tpu_mem_alloc(0, 8192, s1, &p));
    CHECK_OK(tpu_stream_submit_host_fn(s2, gate_wait, &g));
    CHECK_OK(tpu_mem_record_stream(p, s2));
    CHECK(gate_reached(&g));
    CHECK_OK(tpu_mem_free(p));
    m = stats(0);
    CHECK(ALL(m.allocation).current == 0 && ALL(m.allocated_bytes).current == 0);
    CHECK(ALL(m.active).current == 1 && ALL(m.active_bytes).current == 8192);
    CHECK(ALL(m.requested_bytes).current == 8192);
    gate_open(&g);
    CHECK_OK(tpu_stream_synchronize(s2));
    CHECK_OK(tpu_mem_alloc(0, 100, s1, &q)); /* frees complete lazily, at the next allocation */
    m = stats(0);
    CHECK(ALL(m.active).current == 1 && ALL(m.active_bytes).current == 512);
    CHECK(ALL(m.active).freed == 3 && ALL(m.active_bytes).freed == 1024 + 3 * MIB + 8192);
    CHECK(ALL(m.requested_bytes).current == 100);
    CHECK_OK(tpu_mem_free(q));
    CHECK(m.num_sync_all_streams == 0);
    CHECK_OK(tpu_mem_empty_cache(0));
    CHECK(stats(0).num_sync_all_streams == 1);
}

/* The per-process memory fraction limits reserved memory: cached blocks
 * are released first, then the request fails naming the limit; cached
 * blocks within the reservation are still handed out; mem_get_info does
 * not change. */
static void test_fraction(void) {
    reset(0);
    double f = -1;
    CHECK_OK(tpu_mem_get_fraction(0, &f));
    CHECK(f == 1.0);
    CHECK_STATUS(tpu_mem_set_fraction(0, 1.5), TPU_ERR_INVALID_ARG);
    CHECK_CONTAINS(tpu_last_error_message(), "fraction 1.5 is outside [0, 1]");
    CHECK_STATUS(tpu_mem_set_fraction(0, -0.25), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_mem_set_fraction(0, NAN), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_mem_set_fraction(2, 0.5), TPU_ERR_INVALID_DEVICE);
    CHECK_STATUS(tpu_mem_get_fraction(0, NULL), TPU_ERR_INVALID_ARG);
    CHECK_OK(tpu_mem_get_fraction(0, &f));
    CHECK(f == 1.0);

    CHECK_OK(tpu_mem_set_fraction(0, 0.25)); /* 16 MiB of 64 */
    CHECK_OK(tpu_mem_get_fraction(0, &f));
    CHECK(f == 0.25);
    CHECK_OK(tpu_mem_get_fraction(1, &f));
    CHECK(f == 1.0); /* per chip */
    void *a, *b = (void *)1, *c;
    CHECK_OK(tpu_mem_alloc(0, 8 * MIB, NULL, &a));
    CHECK_STATUS(tpu_mem_alloc(0, 12 * MIB, NULL, &b), TPU_ERR_OUT_OF_MEMORY);
    CHECK(b == NULL);
    const char *msg = tpu_last_error_message();
    CHECK_CONTAINS(msg, "tried to allocate 12.00 MiB (12582912 bytes)");
    CHECK_CONTAINS(msg, "free of 64.00 MiB capacity");
    CHECK_CONTAINS(msg, "memory fraction 0.25 limits this process to 16.00 MiB (16777216 bytes)");
    CHECK_CONTAINS(msg, "8388608 bytes reserved");
    tpu_mem_stats m = stats(0);
    CHECK(m.num_ooms == 1 && m.num_alloc_retries == 1);
    uint64_t free_b, total;
    CHECK_OK(tpu_mem_get_info(0, &free_b, &total));
    CHECK(total == 64 * MIB && free_b == 56 * MIB);
    CHECK_OK(tpu_mem_alloc(0, 8 * MIB, NULL, &b)); /* exactly up to the limit */
    CHECK_OK(tpu_mem_free(b));

    /* A cached block of another stream is released to make room. */
    CHECK_OK(tpu_mem_free(a));
    CHECK_OK(tpu_mem_alloc(0, 12 * MIB, stream(0, 3), &c));
    m = stats(0);
    CHECK(m.num_ooms == 1 && m.num_alloc_retries == 2);
    CHECK(ALL(m.reserved_bytes).current == 12 * MIB);
    CHECK_OK(tpu_mem_free(c));

    /* Below what is reserved: nothing is freed, the cache still serves its
     * stream, and a new segment is refused. */
    CHECK_OK(tpu_mem_set_fraction(0, 0.0));
    CHECK(ALL(stats(0).reserved_bytes).current == 12 * MIB);
    CHECK_OK(tpu_mem_alloc(0, 12 * MIB, stream(0, 3), &c));
    CHECK_STATUS(tpu_mem_alloc(0, 100, NULL, &b), TPU_ERR_OUT_OF_MEMORY);
    CHECK_CONTAINS(tpu_last_error_message(), "limits this process to 0 bytes (0 bytes)");
    CHECK_OK(tpu_mem_free(c));
    CHECK_OK(tpu_mem_set_fraction(0, 1.0));
    CHECK_OK(tpu_mem_alloc(0, 40 * MIB, NULL, &b));
    CHECK_OK(tpu_mem_free(b));
    tpu_clear_error();
}

/* Caching off: no block is handed out twice, and a segment goes back to
 * the target as soon as no queued work can use it. */
static void test_caching_off(void) {
    reset(0);
    CHECK(tpu_mem_caching_enabled());
    tpu_mem_set_caching(false);
    CHECK(!tpu_mem_caching_enabled());
    void *p, *q;
    CHECK_OK(tpu_mem_alloc(0, 4096, NULL, &p));
    CHECK_OK(tpu_mem_free(p));
    tpu_mem_stats m = stats(0);
    CHECK(ALL(m.reserved_bytes).current == 0 && m.num_device_free == 1 && m.num_cache_hits == 0);

    tpu_stream *s1 = stream(0, 1);
    gate g = {0};
    CHECK_OK(tpu_mem_alloc(0, 8192, s1, &p));
    CHECK_OK(tpu_stream_submit_host_fn(s1, gate_wait, &g)); /* s1 may still use p */
    CHECK(gate_reached(&g));
    CHECK_OK(tpu_mem_free(p));
    CHECK(ALL(stats(0).reserved_bytes).current == 8192); /* kept until s1 is done */
    CHECK_OK(tpu_mem_alloc(0, 8192, s1, &q));
    CHECK(q != p && stats(0).num_cache_hits == 0); /* not handed out again */
    gate_open(&g);
    CHECK_OK(tpu_stream_synchronize(s1));
    CHECK_OK(tpu_mem_free(q)); /* s1 is idle: released at once */
    CHECK(ALL(stats(0).reserved_bytes).current == 8192);
    CHECK_OK(tpu_mem_alloc(0, 100, NULL, &q)); /* and p at the next allocation */
    CHECK(ALL(stats(0).reserved_bytes).current == 512);
    CHECK_OK(tpu_mem_free(q));
    CHECK(ALL(stats(0).reserved_bytes).current == 0);

    tpu_mem_set_caching(true);
    CHECK_OK(tpu_mem_alloc(0, 4096, NULL, &p));
    CHECK_OK(tpu_mem_free(p));
    CHECK_OK(tpu_mem_alloc(0, 4096, NULL, &q));
    CHECK(q == p && stats(0).num_cache_hits == 1);
    CHECK_OK(tpu_mem_free(q));
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
    CHECK(ALL(stats(0).reserved_bytes).current == 40 * MIB);
    CHECK_OK(tpu_mem_alloc(0, 40 * MIB, stream(0, 2), &q));
    tpu_mem_stats m = stats(0);
    CHECK(m.num_alloc_retries == 1 && m.num_ooms == 0 && m.num_device_free == 1);
    CHECK(ALL(m.reserved_bytes).current == 40 * MIB);
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
    CHECK(ALL(m.reserved_bytes).current == 40 * MIB && m.num_ooms == 0);
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
    CHECK(ALL(stats(0).reserved_bytes).current == 512 * 8);
    gate_open(&g);
    pthread_join(t, NULL);
    CHECK(atomic_load(&f.done));
    CHECK(ALL(stats(0).reserved_bytes).current == 0);
}

/* Large blocks: a segment's rest of more than 1 MiB becomes a cached
 * block; a large request splits the smallest cached block that fits; a
 * freed block merges with its free neighbours; only whole segments go
 * back to the target; parts never cross streams; the snapshot lists every
 * part inside its segment. */
static void test_split_and_merge(void) {
    reset(0);
    void *p, *q, *r, *t;
    CHECK_OK(tpu_mem_alloc(0, 8 * MIB + 100, NULL, &p)); /* 8 MiB + 512 of a 10 MiB segment */
    tpu_mem_stats m = stats(0);
    CHECK(ALL(m.allocated_bytes).current == 8 * MIB + 512);
    CHECK(ALL(m.reserved_bytes).current == 10 * MIB && m.segment[TPU_MEM_POOL_LARGE].current == 1);
    CHECK(ALL(m.inactive_split).current == 1 &&
          ALL(m.inactive_split_bytes).current == 2 * MIB - 512);

    tpu_mem_block_info *blocks = NULL;
    size_t n = 0;
    CHECK_OK(tpu_mem_snapshot(0, &blocks, &n));
    CHECK(n == 2);
    for (size_t i = 0; i < n && n == 2; i++)
        CHECK(blocks[i].segment_address == (uint64_t)(uintptr_t)p &&
              blocks[i].segment_size == 10 * MIB);
    if (n == 2)
        CHECK(blocks[0].address == (uint64_t)(uintptr_t)p && blocks[0].size == 8 * MIB + 512 &&
              blocks[0].state == TPU_MEM_BLOCK_ACTIVE_ALLOCATED &&
              blocks[1].address == blocks[0].address + blocks[0].size &&
              blocks[1].size == 2 * MIB - 512 && blocks[1].state == TPU_MEM_BLOCK_INACTIVE);
    tpu_mem_blocks_free(blocks, n);

    CHECK_OK(tpu_mem_free(p)); /* merges back: one whole cached segment */
    m = stats(0);
    CHECK(ALL(m.inactive_split).current == 0 && ALL(m.inactive_split_bytes).current == 0);

    /* Two large requests split the cached segment (each block at most
     * twice the request); no new segment. */
    CHECK_OK(tpu_mem_alloc(0, 5 * MIB, NULL, &q));
    CHECK_OK(tpu_mem_alloc(0, 3 * MIB, NULL, &r));
    CHECK(q == p && (char *)r == (char *)p + 5 * MIB);
    m = stats(0);
    CHECK(m.num_device_alloc == 1 && m.num_cache_hits == 2);
    CHECK(ALL(m.allocated_bytes).current == 8 * MIB && ALL(m.reserved_bytes).current == 10 * MIB);
    CHECK(ALL(m.inactive_split_bytes).current == 2 * MIB);

    /* The rest (2 MiB) is split again; its last 512 KiB waits for a merge
     * (no large request fits it, and small ones never take a part). */
    void *small;
    CHECK_OK(tpu_mem_alloc(0, 3 * MIB / 2, NULL, &t));
    CHECK_OK(tpu_mem_alloc(0, 1 * MIB, NULL, &small));
    CHECK((char *)t == (char *)p + 8 * MIB &&
          ((char *)small < (char *)p || (char *)small >= (char *)p + 10 * MIB));
    m = stats(0);
    CHECK(ALL(m.allocated_bytes).current == 10 * MIB + MIB / 2 &&
          ALL(m.inactive_split_bytes).current == MIB / 2);
    CHECK(m.allocated_bytes[TPU_MEM_POOL_LARGE].current == 9 * MIB + MIB / 2);
    CHECK_OK(tpu_mem_free(small));

    /* A split segment is not released while any part is live. */
    CHECK_OK(tpu_mem_free(q));
    CHECK_OK(tpu_mem_free(t)); /* merges with the 512 KiB rest */
    CHECK_OK(tpu_mem_empty_cache(0));
    m = stats(0);
    CHECK(ALL(m.reserved_bytes).current == 10 * MIB && m.num_device_free == 1); /* small's */
    CHECK(ALL(m.inactive_split).current == 2 &&
          ALL(m.inactive_split_bytes).current == 7 * MIB);
    /* Another stream never takes a part: a segment of its own. */
    void *other;
    CHECK_OK(tpu_mem_alloc(0, 2 * MIB, stream(0, 1), &other));
    CHECK(other != q && other != t);
    CHECK_OK(tpu_mem_free(other));
    CHECK_OK(tpu_mem_free(r)); /* merges both neighbours */
    m = stats(0);
    CHECK(ALL(m.inactive_split).current == 0 && ALL(m.allocated_bytes).current == 0);
    CHECK_OK(tpu_mem_empty_cache(0));
    m = stats(0);
    CHECK(ALL(m.reserved_bytes).current == 0 && m.num_device_free == 3);

    /* A block of more than twice the request is not split: the request
     * takes a segment of its own, so that the free block can still go
     * back to the target when a large request needs the room. */
    reset(0);
    void *big, *pin, *large;
    CHECK_OK(tpu_mem_alloc(0, 20 * MIB, NULL, &big));
    CHECK_OK(tpu_mem_free(big));
    CHECK_OK(tpu_mem_alloc(0, 2 * MIB, NULL, &pin));
    CHECK(pin != big && ALL(stats(0).inactive_split).current == 0);
    CHECK_OK(tpu_mem_alloc(0, 48 * MIB, NULL, &large)); /* the OOM retry releases big */
    CHECK_OK(tpu_mem_free(large));
    CHECK_OK(tpu_mem_free(pin));

    /* An OOM names the cache that split segments pin. */
    reset(0);
    CHECK_OK(tpu_mem_alloc(0, 10 * MIB, NULL, &big));
    CHECK_OK(tpu_mem_free(big));
    CHECK_OK(tpu_mem_alloc(0, 6 * MIB, NULL, &pin)); /* leaves a cached 4 MiB part */
    CHECK_STATUS(tpu_mem_alloc(0, 56 * MIB, NULL, &large), TPU_ERR_OUT_OF_MEMORY);
    CHECK_CONTAINS(tpu_last_error_message(),
                   "4.00 MiB of the cache lies in segments with live blocks and cannot be released");
    tpu_clear_error();
    CHECK_OK(tpu_mem_free(pin));

    /* Peak: a smaller request after a larger free counts its own bytes. */
    reset(0);
    CHECK_OK(tpu_mem_alloc(0, 16 * MIB, NULL, &p));
    CHECK_OK(tpu_mem_free(p));
    CHECK_OK(tpu_mem_reset_peak_stats(0));
    CHECK_OK(tpu_mem_alloc(0, 9 * MIB, NULL, &q));
    CHECK(q == p && ALL(stats(0).allocated_bytes).peak == 9 * MIB);
    CHECK_OK(tpu_mem_free(q));
}

/* Many threads allocating and freeing: the counters stay consistent. */
static void *churn(void *arg) {
    int chip = (int)(intptr_t)arg % 2;
    tpu_stream *s;
    tpu_stream_get(chip, 1 + (int)(intptr_t)arg, &s);
    void *ptrs[16];
    for (int rep = 0; rep < 500; rep++) {
        for (int i = 0; i < 16; i++) {
            /* Two large blocks (1 to 3 MiB) among small ones: splits and merges. */
            size_t n = i < 2 ? MIB + (size_t)((rep * 7919 + i * 104729) % (2 * MIB))
                             : (size_t)(1 + (rep * 7 + i * 13) % 5000);
            if (tpu_mem_alloc(chip, n, s, &ptrs[i]) != TPU_OK)
                ptrs[i] = NULL;
        }
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
        CHECK(ALL(m.allocation).allocated == 2 * 500 * 16 &&
              ALL(m.allocation).freed == ALL(m.allocation).allocated);
        CHECK(ALL(m.allocated_bytes).current == 0 && ALL(m.allocation).current == 0 &&
              ALL(m.requested_bytes).current == 0);
        CHECK(m.num_cache_hits + m.num_device_alloc == (uint64_t)ALL(m.allocation).allocated);
        CHECK_OK(tpu_mem_empty_cache(c));
        m = stats(c);
        CHECK(ALL(m.reserved_bytes).current == 0 && ALL(m.inactive_split).current == 0);
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
    test_pools_and_active();
    test_fraction();
    test_caching_off();
    test_oom_retry_releases_cache();
    test_empty_cache_waits();
    test_split_and_merge();
    test_threads();
    return check_report();
}
