/* Errors: status names and messages, kernel errors kept on a stream and
 * reported exactly once (stream, event and chip synchronisation), debug
 * mode raising at the call, argument checks at submit, modes. */
#define _POSIX_C_SOURCE 200809L

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

static void test_status_names(void) {
    CHECK(strcmp(tpu_status_str(TPU_OK), "TPU_OK") == 0);
    CHECK(strcmp(tpu_status_str(TPU_ERR_DIV_BY_ZERO), "TPU_ERR_DIV_BY_ZERO") == 0);
    CHECK(strcmp(tpu_status_str(TPU_ERR_INTERNAL), "TPU_ERR_INTERNAL") == 0);
    CHECK(strcmp(tpu_status_str(TPU_STATUS_COUNT), "TPU_STATUS_UNKNOWN") == 0);
    CHECK(strcmp(tpu_status_str((tpu_status)-1), "TPU_STATUS_UNKNOWN") == 0);
    for (int s = 0; s < TPU_STATUS_COUNT; s++)
        CHECK(strncmp(tpu_status_str((tpu_status)s), "TPU_", 4) == 0);
}

static void test_messages(void) {
    tpu_clear_error();
    CHECK(strcmp(tpu_last_error_message(), "") == 0);
    CHECK(tpu_set_error(TPU_ERR_SHAPE, "sizes %d and %d", 2, 3) == TPU_ERR_SHAPE);
    CHECK(strcmp(tpu_last_error_message(), "sizes 2 and 3") == 0);
    /* A message may wrap the previous one. */
    tpu_set_error(TPU_ERR_SHAPE, "op: %s", tpu_last_error_message());
    CHECK(strcmp(tpu_last_error_message(), "op: sizes 2 and 3") == 0);
    /* Long messages are truncated to 1023 bytes. */
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    tpu_set_error(TPU_ERR_INVALID_ARG, "%s", big);
    CHECK(strlen(tpu_last_error_message()) == 1023);
    tpu_clear_error();
    CHECK(tpu_last_error_message()[0] == '\0');
}

static void test_modes(void) {
    CHECK(tpu_mode_get() == TPU_MODE_STRICT);
    CHECK_STATUS(tpu_mode_set(TPU_MODE_COUNT), TPU_ERR_INVALID_ARG);
    CHECK_STATUS(tpu_mode_set((tpu_mode)-1), TPU_ERR_INVALID_ARG);
    CHECK(tpu_mode_get() == TPU_MODE_STRICT);
    CHECK_OK(tpu_mode_set(TPU_MODE_FUSED));
    CHECK(tpu_mode_get() == TPU_MODE_FUSED);
    CHECK_OK(tpu_mode_set(TPU_MODE_STRICT));
    CHECK(strcmp(tpu_mode_name(TPU_MODE_STRICT), "strict") == 0);
    CHECK(strcmp(tpu_mode_name(TPU_MODE_DEBUG), "debug") == 0);
    CHECK(strcmp(tpu_mode_name(TPU_MODE_FUSED), "fused") == 0);
    CHECK(strcmp(tpu_mode_name(TPU_MODE_COUNT), "invalid") == 0);
}

/* Device buffers a / b (i32, N elements) with b[3] == 0, and out. */
enum { N = 8 };

typedef struct {
    int32_t *a, *b, *out;
    tpu_op div;
} div_case;

static div_case make_div(int chip, tpu_stream *s) {
    div_case c;
    CHECK_OK(tpu_mem_alloc(chip, N * sizeof(int32_t), s, (void **)&c.a));
    CHECK_OK(tpu_mem_alloc(chip, N * sizeof(int32_t), s, (void **)&c.b));
    CHECK_OK(tpu_mem_alloc(chip, N * sizeof(int32_t), s, (void **)&c.out));
    for (int i = 0; i < N; i++) { /* the virtual TPU's memory is host memory */
        c.a[i] = 10 * i;
        c.b[i] = i == 3 ? 0 : 2;
    }
    c.div = div_trunc_op(vec(c.out, N, TPU_DTYPE_I32), vec(c.a, N, TPU_DTYPE_I32),
                         vec(c.b, N, TPU_DTYPE_I32));
    c.div.name = "aten::div.Tensor_mode";
    return c;
}

static void free_div(div_case *c) {
    CHECK_OK(tpu_mem_free(c->a));
    CHECK_OK(tpu_mem_free(c->b));
    CHECK_OK(tpu_mem_free(c->out));
}

static void test_kept_error_stream(void) {
    tpu_stream *s = stream(0, 1);
    div_case c = make_div(0, s);
    atomic_int later = 0;
    CHECK_OK(tpu_stream_submit(s, &c.div)); /* strict: queued, no error yet */
    CHECK_OK(tpu_stream_submit_host_fn(s, set_flag, &later));

    tpu_clear_error();
    CHECK_STATUS(tpu_stream_synchronize(s), TPU_ERR_DIV_BY_ZERO);
    const char *msg = tpu_last_error_message();
    CHECK_CONTAINS(msg, "aten::div.Tensor_mode (op #1 on tpu:0 stream 1): ");
    CHECK_CONTAINS(msg, "Run with TPU_LAUNCH_BLOCKING=1 to raise it at the call.");
    CHECK(atomic_load(&later) == 1); /* later records still ran */
    CHECK_OK(tpu_stream_synchronize(s)); /* reported once */

    /* The stream is usable again; a second failure is kept again. */
    c.b[3] = 5;
    CHECK_OK(tpu_stream_submit(s, &c.div));
    CHECK_OK(tpu_stream_synchronize(s));
    CHECK(c.out[3] == 6 && c.out[5] == 25);
    c.b[3] = 0;
    c.div.name = NULL; /* the opcode's name is used */
    CHECK_OK(tpu_stream_submit(s, &c.div));
    CHECK_OK(tpu_stream_submit(s, &c.div)); /* only the first error is kept */
    CHECK_STATUS(tpu_stream_synchronize(s), TPU_ERR_DIV_BY_ZERO);
    CHECK_CONTAINS(tpu_last_error_message(), "div (op #4 on tpu:0 stream 1): ");
    CHECK_OK(tpu_stream_synchronize(s));
    free_div(&c);
}

static void test_kept_error_event_and_chip(void) {
    tpu_stream *s = stream(1, 2), *other = stream(1, 3);
    div_case c = make_div(1, s);
    tpu_event *before = NULL, *after = NULL;
    CHECK_OK(tpu_event_create(&before));
    CHECK_OK(tpu_event_create(&after));

    CHECK_OK(tpu_event_record(before, s));
    CHECK_OK(tpu_stream_submit(s, &c.div));
    CHECK_OK(tpu_event_record(after, s));
    CHECK_OK(tpu_event_synchronize(before)); /* the error comes after this point */
    CHECK_STATUS(tpu_event_synchronize(after), TPU_ERR_DIV_BY_ZERO);
    CHECK_CONTAINS(tpu_last_error_message(), "tpu:1 stream 2");
    CHECK_OK(tpu_event_synchronize(after));
    CHECK_OK(tpu_stream_synchronize(s));

    /* chip synchronisation reports it once, and not on another stream. */
    CHECK_OK(tpu_stream_submit(s, &c.div));
    CHECK_OK(tpu_stream_synchronize(other));
    CHECK_STATUS(tpu_chip_synchronize(1), TPU_ERR_DIV_BY_ZERO);
    CHECK_OK(tpu_chip_synchronize(1));
    CHECK_OK(tpu_stream_synchronize(s));

    /* Internal waits (empty_cache) leave the error for the user. */
    CHECK_OK(tpu_stream_submit(s, &c.div));
    CHECK_OK(tpu_mem_empty_cache(1));
    CHECK_STATUS(tpu_stream_synchronize(s), TPU_ERR_DIV_BY_ZERO);

    tpu_event_free(before);
    tpu_event_free(after);
    free_div(&c);
}

static void test_debug_mode(void) {
    tpu_stream *s = stream(0, 4);
    div_case c = make_div(0, s);
    CHECK_OK(tpu_mode_set(TPU_MODE_DEBUG));
    tpu_clear_error();
    CHECK_STATUS(tpu_stream_submit(s, &c.div), TPU_ERR_DIV_BY_ZERO);
    const char *msg = tpu_last_error_message();
    CHECK_CONTAINS(msg, "aten::div.Tensor_mode (op #1 on tpu:0 stream 4): ");
    CHECK(strstr(msg, "TPU_LAUNCH_BLOCKING") == NULL);
    CHECK_OK(tpu_stream_synchronize(s)); /* nothing kept */
    CHECK_OK(tpu_mode_set(TPU_MODE_STRICT));

    /* An error kept in strict mode survives a debug-mode drain. */
    CHECK_OK(tpu_stream_submit(s, &c.div));
    CHECK_OK(tpu_mode_set(TPU_MODE_DEBUG));
    atomic_int ran = 0;
    CHECK_OK(tpu_stream_submit_host_fn(s, set_flag, &ran)); /* drains, then runs */
    CHECK(atomic_load(&ran) == 1);
    CHECK_OK(tpu_mode_set(TPU_MODE_STRICT));
    CHECK_STATUS(tpu_stream_synchronize(s), TPU_ERR_DIV_BY_ZERO);
    CHECK_CONTAINS(tpu_last_error_message(), "op #2 on tpu:0 stream 4");
    free_div(&c);
}

static void test_check_at_submit(void) {
    tpu_stream *s = stream(0, 5);
    int32_t *dev = NULL;
    CHECK_OK(tpu_mem_alloc(0, 4 * sizeof(int32_t), s, (void **)&dev));
    /* Mismatched sizes: refused on the calling thread, nothing queued. */
    tpu_op bad = copy_op(vec(dev, 4, TPU_DTYPE_I32), vec(dev, 3, TPU_DTYPE_I32));
    tpu_clear_error();
    CHECK(tpu_stream_submit(s, &bad) != TPU_OK);
    CHECK(tpu_last_error_message()[0] != '\0');
    CHECK_OK(tpu_stream_synchronize(s));
    CHECK_OK(tpu_mem_free(dev));
}

int main(void) {
    setenv("TORCH_TPU_CHIPS", "2", 0);
    unsetenv("TPU_LAUNCH_BLOCKING");
    unsetenv("TORCH_TPU_DEFER_AND_FUSE");
    test_status_names();
    test_messages();
    test_modes();
    test_kept_error_stream();
    test_kept_error_event_and_chip();
    test_debug_mode();
    test_check_at_submit();
    return check_report();
}
