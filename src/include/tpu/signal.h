/* Host signals: completions that a host thread sets and streams wait for.
 *
 * Work that runs outside every stream (a collective library's transfer on
 * its own threads, behind tpu_dist) finishes at a time no stream knows. To
 * make later stream work wait for it without blocking the host thread that
 * issued it (as CUDA streams wait for NCCL's kernels), the issuer creates a
 * signal, queues a wait for it on each stream that needs the result, and
 * sets it from the library's completion callback. A wait carries a
 * deadline, so a signal that is never set ends in an error kept on the
 * stream instead of a stream that never drains. */
#ifndef TPU_SIGNAL_H
#define TPU_SIGNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "tpu/runtime.h"
#include "tpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_signal tpu_signal;

/* Creates an unset signal. `name` (copied, at most 255 bytes kept) names
 * the awaited work in the error of a wait that fails or times out, e.g.
 * "tpu_dist all_reduce (collective #3 of group '0')". */
TPU_API tpu_status tpu_signal_create(const char *name, tpu_signal **out);

/* Drops the caller's reference. Queued waits hold their own, so a signal
 * may be freed while streams still wait for it; it must still be set (or
 * their deadline passes). NULL does nothing. */
TPU_API void tpu_signal_free(tpu_signal *signal);

/* Sets the outcome, once, and wakes every waiter: TPU_OK, or an error
 * status and a message (NULL: none) that each failing wait reports after
 * the signal's name. TPU_ERR_INVALID_ARG if the signal was already set or
 * `outcome` is not a status. */
TPU_API tpu_status tpu_signal_set(tpu_signal *signal, tpu_status outcome, const char *message);

/* Whether the signal has been set, and its outcome (TPU_OK while unset). */
TPU_API tpu_status tpu_signal_query(tpu_signal *signal, bool *done, tpu_status *outcome);

/* Queues on `stream` a wait for `signal`: records queued after it run once
 * the signal is set. A signal set with an error, or not set `timeout_ms`
 * milliseconds after this call (negative: no deadline), makes the wait
 * fail with TPU_ERR_EXTERNAL (or the error's status): the error is kept on
 * the stream, as a kernel error is, for its next synchronising call, and
 * the records after it still run. In debug mode the wait happens before
 * return and its error is returned. The stream's worker does the waiting;
 * the host thread is not blocked (in strict and fused modes). A timeout
 * too large for the clock (past about 290 years) is no deadline. */
TPU_API tpu_status tpu_stream_wait_signal(tpu_stream *stream, tpu_signal *signal, int64_t timeout_ms);

/* Starts a deadline on the signal itself: every wait for it, queued or to
 * come, fails (as above) once `timeout_ms` milliseconds (negative: none;
 * the call then clears an earlier one) have passed since this call
 * without the signal being set; a wait's own deadline still applies if it
 * is earlier. For work that starts later than the waits are queued (a
 * collective queued behind others on a communication thread): queue the
 * waits with no deadline, arm the signal when the work begins, so that
 * time spent queued does not count. TPU_ERR_INVALID_ARG for NULL. */
TPU_API tpu_status tpu_signal_arm(tpu_signal *signal, int64_t timeout_ms);

#ifdef __cplusplus
}
#endif

#endif
