/* The compact form a record takes in a stream's ring.
 *
 * A tpu_op has room for every operand a family may use, each with
 * TPU_MAX_DIMS dims: about 2 KiB, most of it unused by any one op (an add
 * of two matrices uses 3 descriptors of 2 dims). Queued records take only
 * what they use: the header fields, the parameters, then for out, the
 * n_in inputs and the n_aux further outputs, in that order, a fixed
 * descriptor part and its ndim sizes and strides. A binary op on 2-d
 * tensors packs into about 350 bytes. The worker unpacks the record into
 * a full tpu_op before it runs, so kernels see the one layout of op.h.
 *
 * Every part is a multiple of 8 bytes and the whole a multiple of 16, so
 * records packed back to back in a 16-aligned ring stay aligned. */
#include <assert.h>
#include <stddef.h>
#include <string.h>

#include "runtime_internal.h"

/* The fields of tpu_op other than its tensors and parameters. */
typedef struct {
    int32_t code, fn, n_in, n_aux;
    void *scratch;
    int64_t scratch_nbytes;
    const char *name;
    int64_t reserved; /* keeps the parameters 16-aligned */
} packed_head;

/* A tensor descriptor without its dims, which follow it: sizes[ndim],
 * then strides[ndim]. */
typedef struct {
    void *data;
    void *storage;
    int64_t storage_nbytes;
    int32_t ndim;
    int32_t dtype;
} packed_tensor;

#define PARAMS_NBYTES ((sizeof(((tpu_op *)0)->p) + 7) & ~(size_t)7)

static size_t round16(size_t n) {
    return (n + 15) & ~(size_t)15;
}

/* The record's tensors in packing order: out, in[0..n_in), aux[0..n_aux). */
static int tensor_count(const tpu_op *op) {
    return 1 + op->n_in + op->n_aux;
}

static tpu_tensor *tensor_at(tpu_op *op, int k) {
    return k == 0 ? &op->out : k <= op->n_in ? &op->in[k - 1] : &op->aux[k - 1 - op->n_in];
}

static size_t tensor_nbytes(const tpu_tensor *t) {
    return sizeof(packed_tensor) + 2 * (size_t)t->ndim * sizeof(int64_t);
}

size_t tpu_record_packed_size(const tpu_op *op) {
    assert(op->n_in >= 0 && op->n_in <= TPU_OP_MAX_IN && op->n_aux >= 0 &&
           op->n_aux <= TPU_OP_MAX_AUX);
    size_t n = sizeof(packed_head) + PARAMS_NBYTES;
    for (int k = 0; k < tensor_count(op); k++)
        n += tensor_nbytes(tensor_at((tpu_op *)op, k));
    return round16(n);
}

/* Stores value as field `f` of a TYPE (packed_head, packed_tensor) at p,
 * value being of the field's size. */
#define PUT(p, TYPE, f, value)                                                                     \
    do {                                                                                           \
        _Static_assert(sizeof(value) == sizeof(((TYPE *)0)->f), "the field's size");               \
        memcpy((unsigned char *)(p) + offsetof(TYPE, f), &(value), sizeof(value));                 \
    } while (0)

void tpu_record_pack(const tpu_op *op, void *dst) {
    /* Field by field, straight into the ring: building a packed_head or
     * packed_tensor on the stack and copying it makes the compiler load
     * it back as a vector from two smaller stores, which cannot forward
     * and so waits until every earlier store has reached the cache,
     * among them the ring's lines, still on their way from the worker's
     * core (about 250 ns a record). */
    unsigned char *p = dst;
    const int32_t code = op->code, fn = op->fn;
    const int64_t reserved = 0;
    PUT(p, packed_head, code, code);
    PUT(p, packed_head, fn, fn);
    PUT(p, packed_head, n_in, op->n_in);
    PUT(p, packed_head, n_aux, op->n_aux);
    PUT(p, packed_head, scratch, op->scratch);
    PUT(p, packed_head, scratch_nbytes, op->scratch_nbytes);
    PUT(p, packed_head, name, op->name);
    PUT(p, packed_head, reserved, reserved);
    p += sizeof(packed_head);
    memcpy(p, &op->p, sizeof op->p);
    p += PARAMS_NBYTES;
    for (int k = 0; k < tensor_count(op); k++) {
        const tpu_tensor *t = tensor_at((tpu_op *)op, k);
        assert(t->ndim >= 0 && t->ndim <= TPU_MAX_DIMS);
        const int32_t dtype = (int32_t)t->dtype;
        PUT(p, packed_tensor, data, t->data);
        PUT(p, packed_tensor, storage, t->storage);
        PUT(p, packed_tensor, storage_nbytes, t->storage_nbytes);
        PUT(p, packed_tensor, ndim, t->ndim);
        PUT(p, packed_tensor, dtype, dtype);
        p += sizeof(packed_tensor);
        size_t dims = (size_t)t->ndim * sizeof(int64_t);
        memcpy(p, t->sizes, dims);
        p += dims;
        memcpy(p, t->strides, dims);
        p += dims;
    }
}

void tpu_record_unpack(const void *src, tpu_op *op) {
    const unsigned char *p = src;
    /* Unused slots and dims read as zero: an absent operand, as op.h
     * defines it. */
    memset(op, 0, sizeof *op);
    packed_head head;
    memcpy(&head, p, sizeof head);
    p += sizeof head;
    op->code = (tpu_op_code)head.code;
    op->fn = head.fn;
    op->n_in = head.n_in;
    op->n_aux = head.n_aux;
    op->scratch = head.scratch;
    op->scratch_nbytes = head.scratch_nbytes;
    op->name = head.name;
    memcpy(&op->p, p, sizeof op->p);
    p += PARAMS_NBYTES;
    for (int k = 0; k < tensor_count(op); k++) {
        tpu_tensor *t = tensor_at(op, k);
        packed_tensor pt;
        memcpy(&pt, p, sizeof pt);
        p += sizeof pt;
        t->data = pt.data;
        t->storage = pt.storage;
        t->storage_nbytes = pt.storage_nbytes;
        t->ndim = pt.ndim;
        t->dtype = (tpu_dtype)pt.dtype;
        size_t dims = (size_t)t->ndim * sizeof(int64_t);
        memcpy(t->sizes, p, dims);
        p += dims;
        memcpy(t->strides, p, dims);
        p += dims;
    }
}
