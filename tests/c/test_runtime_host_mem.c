/* Pinned host memory (tpu/host_mem.h): lookups by any address inside a
 * block, references held by queued copies, and the statistics. */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "tpu/host_mem.h"

static tpu_host_stats stats(void) {
    tpu_host_stats h;
    memset(&h, 0xff, sizeof h);
    tpu_host_get_stats(&h);
    return h;
}

static void test_args_and_lookup(void) {
    void *p = (void *)1;
    CHECK_OK(tpu_host_alloc(0, &p));
    CHECK(p == NULL);
    CHECK_STATUS(tpu_host_alloc(16, NULL), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_host_alloc(SIZE_MAX, &p), TPU_ERR_HOST_MEMORY);
    CHECK_OK(tpu_host_free(NULL));
    int local;
    CHECK_STATUS(tpu_host_free(&local), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_host_retain(&local), TPU_ERR_INVALID_ARG);
    tpu_host_release(&local); /* ignored */
    tpu_host_get_stats(NULL);

    CHECK_OK(tpu_host_alloc(100, &p));
    CHECK((uintptr_t)p % 4096 == 0);
    CHECK(tpu_host_is_pinned(p) && tpu_host_is_pinned((char *)p + 99));
    CHECK(tpu_host_is_pinned((char *)p + 100)); /* a zero-byte view at the end */
    CHECK(!tpu_host_is_pinned(&local));
    CHECK_STATUS(tpu_host_free((char *)p + 1), TPU_ERR_INVALID_ARG); /* not its start */
    CHECK_OK(tpu_host_free(p));
    CHECK(!tpu_host_is_pinned(p));
    tpu_clear_error();
}

/* A block and its bytes are counted from its allocation until its last
 * reference goes, whoever drops it (the owner or a queued copy). */
static void test_stats(void) {
    tpu_host_reset_accumulated_stats();
    tpu_host_reset_peak_stats();
    tpu_host_stats h = stats();
    CHECK(h.allocations.current == 0 && h.allocations.peak == 0 && h.allocations.allocated == 0);
    CHECK(h.num_host_alloc == 0 && h.host_alloc_time.count == 0 && h.host_alloc_time.max_us == 0);

    void *a, *b;
    CHECK_OK(tpu_host_alloc(100, &a));  /* one page */
    CHECK_OK(tpu_host_alloc(5000, &b)); /* two */
    h = stats();
    CHECK(h.allocations.current == 2 && h.allocated_bytes.current == 3 * 4096);
    CHECK(h.active_requests.current == 2 && h.active_bytes.current == 3 * 4096);
    CHECK(h.num_host_alloc == 2 && h.host_alloc_time.count == 2);
    CHECK(h.host_alloc_time.max_us >= h.host_alloc_time.min_us && h.host_alloc_time.min_us >= 0);

    CHECK_OK(tpu_host_retain((char *)b + 4500)); /* a queued copy's reference */
    CHECK_OK(tpu_host_free(b));
    h = stats();
    CHECK(h.allocations.current == 2 && h.num_host_free == 0); /* the copy still holds it */
    tpu_host_release(b);
    h = stats();
    CHECK(h.allocations.current == 1 && h.allocated_bytes.current == 4096);
    CHECK(h.allocations.peak == 2 && h.allocated_bytes.peak == 3 * 4096);
    CHECK(h.allocations.freed == 1 && h.allocated_bytes.freed == 2 * 4096);
    CHECK(h.num_host_free == 1 && h.host_free_time.count == 1);

    tpu_host_reset_peak_stats();
    h = stats();
    CHECK(h.allocations.peak == 1 && h.active_bytes.peak == 4096);
    CHECK(h.host_alloc_time.max_us == 0 && h.host_alloc_time.count == 2);
    tpu_host_reset_accumulated_stats();
    h = stats();
    CHECK(h.allocations.allocated == 0 && h.allocations.freed == 0 && h.allocations.current == 1);
    CHECK(h.num_host_alloc == 0 && h.num_host_free == 0 && h.host_alloc_time.count == 0);
    CHECK_OK(tpu_host_free(a));
    h = stats();
    CHECK(h.allocations.current == 0 && h.active_requests.current == 0 && h.num_host_free == 1);
}

int main(void) {
    test_args_and_lookup();
    test_stats();
    return check_report();
}
