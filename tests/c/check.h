/* A tiny test helper for the C unit tests.
 *
 *   CHECK(cond)                  counts a pass, or prints the failing condition
 *   CHECK_OK(expr)               expr must return TPU_OK (prints the message if not)
 *   CHECK_STATUS(expr, status)   expr must return `status`
 *   CHECK_CONTAINS(str, part)    strstr(str, part) != NULL
 *   return check_report();       at the end of main: prints "N passed, N failed"
 *                                and returns the exit code
 *
 * The counters are atomic, so checks may run on several threads. */
#ifndef TPU_TESTS_CHECK_H
#define TPU_TESTS_CHECK_H

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "tpu/status.h"

static atomic_int check_passed_;
static atomic_int check_failed_;

static inline void check_record_(int ok, const char *file, int line, const char *what) {
    if (ok) {
        atomic_fetch_add(&check_passed_, 1);
    } else {
        atomic_fetch_add(&check_failed_, 1);
        fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
    }
}

#define CHECK(cond) check_record_((cond) ? 1 : 0, __FILE__, __LINE__, #cond)

#define CHECK_STATUS(expr, want)                                                               \
    do {                                                                                       \
        tpu_status check_st_ = (expr);                                                         \
        check_record_(check_st_ == (want), __FILE__, __LINE__, #expr " == " #want);            \
        if (check_st_ != (want))                                                               \
            fprintf(stderr, "    got %s: %s\n", tpu_status_str(check_st_),                     \
                    tpu_last_error_message());                                                 \
    } while (0)

#define CHECK_OK(expr) CHECK_STATUS(expr, TPU_OK)

#define CHECK_CONTAINS(str, part)                                                              \
    do {                                                                                       \
        const char *check_s_ = (str);                                                          \
        int check_ok_ = check_s_ && strstr(check_s_, (part)) != NULL;                          \
        check_record_(check_ok_, __FILE__, __LINE__, #str " contains " #part);           \
        if (!check_ok_)                                                                        \
            fprintf(stderr, "    the string is: \"%s\"\n", check_s_ ? check_s_ : "(null)");   \
    } while (0)

static inline int check_report(void) {
    printf("%d passed, %d failed\n", atomic_load(&check_passed_), atomic_load(&check_failed_));
    fflush(stdout);
    return atomic_load(&check_failed_) ? 1 : 0;
}

#endif
