/* The modeled TPU generations and the chip table of this process. */
#include <assert.h>
#include <ctype.h>
#include <string.h>

#include "runtime_internal.h"
#include "target.h"

#define GIB (1024ull * 1024ull * 1024ull)

/* Public figures of each generation, per chip. */
static const tpu_generation_model k_models[] = {
    [TPU_GEN_V5E] = {"v5e", 16 * GIB, 819e9, 197e12, 128},
    [TPU_GEN_V5P] = {"v5p", 95 * GIB, 2765e9, 459e12, 128},
    [TPU_GEN_V6E] = {"v6e", 32 * GIB, 1640e9, 918e12, 256},
    [TPU_GEN_V7X] = {"v7x", 192 * GIB, 7370e9, 2307e12, 256},
};
_Static_assert(sizeof k_models / sizeof k_models[0] == TPU_GEN_COUNT,
               "every tpu_generation needs a model");

/* Written once by tpu_chip_setup under the init lock, before init
 * publishes the runtime as ready (a release store that readers acquire),
 * and read-only afterwards. */
static tpu_chip_props g_props[TPU_CHIPS_MAX];

const tpu_generation_model *tpu_generation_model_of(tpu_generation gen) {
    assert((unsigned)gen < (unsigned)TPU_GEN_COUNT);
    return &k_models[gen];
}

/* ASCII case-insensitive equality; strcasecmp would depend on the locale. */
static bool equal_nocase(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return false;
    return *a == *b;
}

tpu_status tpu_generation_from_name(const char *name, tpu_generation *out) {
    if (!name || !out)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_generation_from_name: %s is NULL",
                             name ? "out" : "name");
    for (int g = 0; g < TPU_GEN_COUNT; g++) {
        if (equal_nocase(name, k_models[g].short_name)) {
            *out = (tpu_generation)g;
            return TPU_OK;
        }
    }
    return tpu_set_error(TPU_ERR_INVALID_ARG,
                         "unknown TPU generation '%s': expected one of v5e, v5p, v6e, v7x", name);
}

tpu_status tpu_chip_setup(const tpu_config *cfg, int chips) {
    const tpu_target *target = tpu_target_get();
    for (int c = 0; c < chips; c++) {
        tpu_status st = target->chip_props(cfg, c, &g_props[c]);
        if (st != TPU_OK)
            return st;
    }
    return TPU_OK;
}

const tpu_chip_props *tpu_chip_props_of(int chip) {
    assert(chip >= 0 && chip < tpu_rt_chip_count());
    return &g_props[chip];
}

int tpu_chip_count(void) {
    if (tpu_rt_enter() != TPU_OK)
        return 0;
    return tpu_rt_chip_count();
}

tpu_status tpu_chip_get_props(int chip, tpu_chip_props *out) {
    tpu_status st = tpu_rt_enter_chip("tpu_chip_get_props", chip);
    if (st != TPU_OK)
        return st;
    if (!out)
        return tpu_set_error(TPU_ERR_INVALID_ARG, "tpu_chip_get_props: out is NULL");
    *out = g_props[chip];
    return TPU_OK;
}
