/* The device allocator's statistics, mem_get_info and the per-process
 * memory fraction (see mem_internal.h). */
#include <math.h>
#include <pthread.h>

#include "mem_internal.h"

void tpu_mem_stat_raise(tpu_mem_stat *stat, tpu_mem_pool pool, int64_t n) {
    tpu_mem_pool pools[2] = {TPU_MEM_POOL_ALL, pool};
    for (int i = 0; i < 2; i++) {
        tpu_mem_stat *s = &stat[pools[i]];
        s->current += n;
        s->allocated += n;
        if (s->current > s->peak)
            s->peak = s->current;
    }
}

void tpu_mem_stat_lower(tpu_mem_stat *stat, tpu_mem_pool pool, int64_t n) {
    tpu_mem_pool pools[2] = {TPU_MEM_POOL_ALL, pool};
    for (int i = 0; i < 2; i++) {
        stat[pools[i]].current -= n;
        stat[pools[i]].freed += n;
    }
}

/* Every tpu_mem_stat array of a tpu_mem_stats, for the resets. */
#define FOR_EACH_STAT_ARRAY(m, X)                                                                  \
    X((m)->allocation);                                                                            \
    X((m)->segment);                                                                               \
    X((m)->active);                                                                                \
    X((m)->allocated_bytes);                                                                       \
    X((m)->reserved_bytes);                                                                        \
    X((m)->active_bytes);                                                                          \
    X((m)->requested_bytes);                                                                       \
    X((m)->inactive_split);                                                                        \
    X((m)->inactive_split_bytes)

static void reset_peaks(tpu_mem_stat stat[TPU_MEM_POOL_COUNT]) {
    for (int p = 0; p < TPU_MEM_POOL_COUNT; p++)
        stat[p].peak = stat[p].current;
}

static void reset_totals(tpu_mem_stat stat[TPU_MEM_POOL_COUNT]) {
    for (int p = 0; p < TPU_MEM_POOL_COUNT; p++)
        stat[p].allocated = stat[p].freed = 0;
}

/* Lets every stream of the chip run its queued marks, so that the
 * allocated statistics count every block the host holds (fused mode
 * counts them in stream order; tpu_mem_mark_ran). */
static void settle_marks(int chip) {
    tpu_mem_allocator *a = &tpu_mem_allocators[chip];
    pthread_mutex_lock(&a->lock);
    bool queued = a->marks_queued > 0;
    pthread_mutex_unlock(&a->lock);
    if (queued && !tpu_stream_on_worker())
        tpu_chip_drain(chip);
}

tpu_status tpu_mem_get_stats(int chip, tpu_mem_stats *out) {
    tpu_status st = tpu_rt_enter_chip("tpu_mem_get_stats", chip);
    if (st != TPU_OK)
        return st;
    if (!out)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_mem_get_stats: out is NULL");
    settle_marks(chip);
    tpu_mem_allocator *a = &tpu_mem_allocators[chip];
    pthread_mutex_lock(&a->lock);
    *out = a->stats;
    pthread_mutex_unlock(&a->lock);
    return TPU_OK;
}

tpu_status tpu_mem_reset_peak_stats(int chip) {
    tpu_status st = tpu_rt_enter_chip("tpu_mem_reset_peak_stats", chip);
    if (st != TPU_OK)
        return st;
    settle_marks(chip);
    tpu_mem_allocator *a = &tpu_mem_allocators[chip];
    pthread_mutex_lock(&a->lock);
    FOR_EACH_STAT_ARRAY(&a->stats, reset_peaks);
    pthread_mutex_unlock(&a->lock);
    return TPU_OK;
}

tpu_status tpu_mem_reset_accumulated_stats(int chip) {
    tpu_status st = tpu_rt_enter_chip("tpu_mem_reset_accumulated_stats", chip);
    if (st != TPU_OK)
        return st;
    tpu_mem_allocator *a = &tpu_mem_allocators[chip];
    pthread_mutex_lock(&a->lock);
    tpu_mem_stats *m = &a->stats;
    FOR_EACH_STAT_ARRAY(m, reset_totals);
    m->num_cache_hits = m->num_alloc_retries = m->num_ooms = 0;
    m->num_sync_all_streams = m->num_device_alloc = m->num_device_free = 0;
    pthread_mutex_unlock(&a->lock);
    return TPU_OK;
}

tpu_status tpu_mem_get_info(int chip, uint64_t *free_bytes, uint64_t *total_bytes) {
    tpu_status st = tpu_rt_enter_chip("tpu_mem_get_info", chip);
    if (st != TPU_OK)
        return st;
    if (!free_bytes || !total_bytes)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_mem_get_info: %s is NULL",
                             free_bytes ? "total_bytes" : "free_bytes");
    tpu_mem_allocator *a = &tpu_mem_allocators[chip];
    pthread_mutex_lock(&a->lock);
    *free_bytes = a->capacity - (uint64_t)a->stats.reserved_bytes[TPU_MEM_POOL_ALL].current;
    *total_bytes = a->capacity;
    pthread_mutex_unlock(&a->lock);
    return TPU_OK;
}

tpu_status tpu_mem_set_fraction(int chip, double fraction) {
    tpu_status st = tpu_rt_enter_chip("tpu_mem_set_fraction", chip);
    if (st != TPU_OK)
        return st;
    /* Written so that NaN fails too. */
    if (!(fraction >= 0.0 && fraction <= 1.0))
        return tpu_set_error(TPU_ERR_INVALID_ARG,
                             "tpu_mem_set_fraction: fraction %g is outside [0, 1]", fraction);
    tpu_mem_allocator *a = &tpu_mem_allocators[chip];
    pthread_mutex_lock(&a->lock);
    a->fraction = fraction;
    /* floor, in doubles: exact for capacities below 2^53 bytes. */
    a->limit = fraction >= 1.0 ? a->capacity : (uint64_t)floor(fraction * (double)a->capacity);
    pthread_mutex_unlock(&a->lock);
    return TPU_OK;
}

tpu_status tpu_mem_get_fraction(int chip, double *fraction) {
    tpu_status st = tpu_rt_enter_chip("tpu_mem_get_fraction", chip);
    if (st != TPU_OK)
        return st;
    if (!fraction)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_mem_get_fraction: fraction is NULL");
    tpu_mem_allocator *a = &tpu_mem_allocators[chip];
    pthread_mutex_lock(&a->lock);
    *fraction = a->fraction;
    pthread_mutex_unlock(&a->lock);
    return TPU_OK;
}
