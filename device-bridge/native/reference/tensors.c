/*
 * Tensors of the reference implementation: allocation, views, host transfers through the mesh
 * mapper / composer (shards cut out of or pasted into the logical array row by row, replicas
 * written everywhere and read once, partial addends summed), fill, copy and permute.
 */
#include "internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

TTPIPE_API int32_t ttpipe_tensor_alloc(ttpipe_submesh handle, int32_t dtype, int32_t rank, const int32_t *dims,
                                       ttpipe_tensor *out) {
    enter_fn("ttpipe_tensor_alloc");
    if (!out) return err(TTPIPE_E_INVALID_ARGUMENT, "out is null");
    *out = 0;
    submesh *sub;
    tensor *t = NULL;
    lock();
    int s = handle_get(handle, K_SUBMESH, "submesh", (void **) &sub);
    if (!s && sub->m->closing) s = err(TTPIPE_E_CLOSED, "the mesh is closed");
    if (!s) s = tensor_new(sub, dtype, rank, dims, &t);
    if (!s) {
        t->handle = handle_new(K_TENSOR, t);
        if (!t->handle) {
            tensor_destroy(t);
            s = TTPIPE_E_HOST;
        } else {
            *out = t->handle;
        }
    }
    unlock();
    return s;
}

TTPIPE_API int32_t ttpipe_tensor_free(ttpipe_tensor handle) {
    enter_fn("ttpipe_tensor_free");
    tensor *t;
    lock();
    int s = handle_get(handle, K_TENSOR, "tensor", (void **) &t);
    if (!s) {
        handle_release(handle);
        tensor_destroy(t);
    }
    unlock();
    return s;
}

TTPIPE_API int32_t ttpipe_tensor_view(ttpipe_tensor handle, int32_t rank, const int32_t *dims, ttpipe_tensor *out) {
    enter_fn("ttpipe_tensor_view");
    if (!out) return err(TTPIPE_E_INVALID_ARGUMENT, "out is null");
    *out = 0;
    tensor *t;
    int64_t numel = 0;
    lock();
    int s = handle_get(handle, K_TENSOR, "tensor", (void **) &t);
    if (!s && t->sub->m->closing) s = err(TTPIPE_E_CLOSED, "the mesh is closed");
    if (!s) s = check_dims(rank, dims, &numel);
    if (!s && numel != t->numel) {
        char dv[128], dt[128];
        format_dims(dv, sizeof dv, rank, dims);
        format_dims(dt, sizeof dt, t->rank, t->dims);
        s = err(TTPIPE_E_INVALID_ARGUMENT, "cannot view %s (%" PRId64 " elements) as %s (%" PRId64 " elements)", dt,
                t->numel, dv, numel);
    }
    if (!s) {
        tensor *v = calloc(1, sizeof(tensor));
        if (!v) {
            s = err_host((int64_t) sizeof(tensor));
        } else {
            *v = *t;
            memset(v->dims, 0, sizeof v->dims);
            if (rank > 0) memcpy(v->dims, dims, sizeof(int32_t) * (size_t) rank);
            v->rank = rank;
            v->st->refs++;
            v->handle = handle_new(K_TENSOR, v);
            if (!v->handle) {
                tensor_destroy(v);
                s = TTPIPE_E_HOST;
            } else {
                *out = v->handle;
            }
        }
    }
    unlock();
    return s;
}

TTPIPE_API int32_t ttpipe_tensor_info(ttpipe_tensor handle, int32_t *out, int32_t capacity) {
    enter_fn("ttpipe_tensor_info");
    if (!out) return err(TTPIPE_E_INVALID_ARGUMENT, "out is null");
    tensor *t;
    lock();
    int s = handle_get(handle, K_TENSOR, "tensor", (void **) &t);
    if (!s && capacity < 2 + t->rank) {
        s = err(TTPIPE_E_INVALID_ARGUMENT, "out has room for %d values, a rank-%d tensor needs %d", capacity, t->rank,
                2 + t->rank);
    }
    if (!s) {
        out[0] = t->dtype;
        out[1] = t->rank;
        for (int32_t i = 0; i < t->rank; i++) out[2 + i] = t->dims[i];
    }
    unlock();
    return s;
}

/* ---- host transfers ----------------------------------------------------------------------------- */

static int need_count(int64_t count, int64_t expected, const void *data) {
    if (!data && !(count == 0 && expected == 0)) return err(TTPIPE_E_INVALID_ARGUMENT, "data is null");
    if (count != expected) {
        return err(TTPIPE_E_INVALID_ARGUMENT, "%" PRId64 " elements given, the shape needs %" PRId64, count, expected);
    }
    return TTPIPE_OK;
}

static int64_t numel_of(int32_t rank, const int32_t *dims) {
    int64_t n = 1;
    for (int32_t i = 0; i < rank; i++) n *= dims[i];
    return n;
}

static int write_logical(ttpipe_tensor handle, int32_t rank, const int32_t *dims, int32_t p0, int32_t p1,
                         const void *data, int64_t count, int ints) {
    opctx c;
    uint64_t h[] = {handle};
    static const char *const names[] = {"tensor"};
    int s = op_begin(&c, 1, h, names, 0, 0);
    if (s) return s;
    tv *t = &c.t[0];
    s = ints ? need_int(t) : need_float(t);
    if (!s) s = check_logical(t, rank, dims, p0, p1, 0);
    if (!s) s = need_count(count, numel_of(rank, dims), data);
    for (int32_t d = 0; !s && d < t->sub->n; d++) {
        lpiece lp;
        lpiece_init(&lp, rank, dims, t->dims, p0, p1, t->sub, d);
        void *piece = t->st->piece[d];
        for (int64_t r = 0; r < lp.rows; r++) {
            int64_t g = lpiece_row(&lp, r), o = r * lp.row_length;
            if (ints) {
                memcpy((int32_t *) piece + o, (const int32_t *) data + g, sizeof(int32_t) * (size_t) lp.row_length);
            } else if (t->dtype == TTPIPE_FP32) {
                memcpy((float *) piece + o, (const float *) data + g, sizeof(float) * (size_t) lp.row_length);
            } else {
                for (int64_t j = 0; j < lp.row_length; j++) write_elem(piece, t->dtype, o + j, ((const float *) data)[g + j]);
            }
        }
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_tensor_write(ttpipe_tensor handle, int32_t rank, const int32_t *dims, int32_t p0, int32_t p1,
                                       const float *data, int64_t count) {
    enter_fn("ttpipe_tensor_write");
    return write_logical(handle, rank, dims, p0, p1, data, count, 0);
}

TTPIPE_API int32_t ttpipe_tensor_write_ints(ttpipe_tensor handle, int32_t rank, const int32_t *dims, int32_t p0,
                                            int32_t p1, const int32_t *data, int64_t count) {
    enter_fn("ttpipe_tensor_write_ints");
    return write_logical(handle, rank, dims, p0, p1, data, count, 1);
}

static int need_device(const tv *t, int32_t device) {
    if (device < 0 || device >= t->sub->n) {
        return err(TTPIPE_E_OUT_OF_RANGE, "device index %d out of range for a submesh of %d devices", device, t->sub->n);
    }
    return TTPIPE_OK;
}

TTPIPE_API int32_t ttpipe_tensor_write_local(ttpipe_tensor handle, int32_t device, const float *data, int64_t count) {
    enter_fn("ttpipe_tensor_write_local");
    opctx c;
    uint64_t h[] = {handle};
    static const char *const names[] = {"tensor"};
    int s = op_begin(&c, 1, h, names, 0, 0);
    if (s) return s;
    tv *t = &c.t[0];
    s = need_float(t);
    if (!s) s = need_device(t, device);
    if (!s) s = need_count(count, t->numel, data);
    if (!s) {
        void *piece = t->st->piece[device];
        if (t->dtype == TTPIPE_FP32 && count > 0) memcpy(piece, data, sizeof(float) * (size_t) count);
        else for (int64_t i = 0; i < count; i++) write_elem(piece, t->dtype, i, data[i]);
    }
    return op_end(&c, s);
}

static int read_logical(ttpipe_tensor handle, int32_t rank, const int32_t *dims, int32_t p0, int32_t p1, void *out,
                        int64_t count, int ints) {
    opctx c;
    uint64_t h[] = {handle};
    static const char *const names[] = {"tensor"};
    int s = op_begin(&c, 1, h, names, 0, 0);
    if (s) return s;
    tv *t = &c.t[0];
    if (ints) s = need_int(t);
    if (!s) s = check_logical(t, rank, dims, p0, p1, !ints);
    if (!s) s = need_count(count, numel_of(rank, dims), out);
    if (s) return op_end(&c, s);
    int partial = p0 == TTPIPE_PARTIAL || p1 == TTPIPE_PARTIAL;
    if (partial && count > 0) memset(out, 0, sizeof(float) * (size_t) count);
    for (int32_t d = 0; d < t->sub->n; d++) {
        if (!distinct_piece(t->sub, p0, p1, d)) continue;
        lpiece lp;
        lpiece_init(&lp, rank, dims, t->dims, p0, p1, t->sub, d);
        const void *piece = t->st->piece[d];
        for (int64_t r = 0; r < lp.rows; r++) {
            int64_t g = lpiece_row(&lp, r), o = r * lp.row_length;
            if (ints || (!partial && t->dtype == TTPIPE_FP32)) {
                memcpy((char *) out + 4 * g, (const char *) piece + 4 * o, 4 * (size_t) lp.row_length);
            } else if (partial) {
                for (int64_t j = 0; j < lp.row_length; j++) ((float *) out)[g + j] += read_elem(piece, t->dtype, o + j);
            } else {
                for (int64_t j = 0; j < lp.row_length; j++) ((float *) out)[g + j] = read_elem(piece, t->dtype, o + j);
            }
        }
    }
    return op_end(&c, TTPIPE_OK);
}

TTPIPE_API int32_t ttpipe_tensor_read(ttpipe_tensor handle, int32_t rank, const int32_t *dims, int32_t p0, int32_t p1,
                                      float *out, int64_t count) {
    enter_fn("ttpipe_tensor_read");
    return read_logical(handle, rank, dims, p0, p1, out, count, 0);
}

TTPIPE_API int32_t ttpipe_tensor_read_ints(ttpipe_tensor handle, int32_t rank, const int32_t *dims, int32_t p0,
                                           int32_t p1, int32_t *out, int64_t count) {
    enter_fn("ttpipe_tensor_read_ints");
    return read_logical(handle, rank, dims, p0, p1, out, count, 1);
}

TTPIPE_API int32_t ttpipe_tensor_read_local(ttpipe_tensor handle, int32_t device, float *out, int64_t count) {
    enter_fn("ttpipe_tensor_read_local");
    opctx c;
    uint64_t h[] = {handle};
    static const char *const names[] = {"tensor"};
    int s = op_begin(&c, 1, h, names, 0, 0);
    if (s) return s;
    tv *t = &c.t[0];
    s = need_device(t, device);
    if (!s) s = need_count(count, t->numel, out);
    if (!s) {
        const void *piece = t->st->piece[device];
        if (t->dtype == TTPIPE_FP32 && count > 0) memcpy(out, piece, sizeof(float) * (size_t) count);
        else for (int64_t i = 0; i < count; i++) out[i] = read_elem(piece, t->dtype, i);
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_tensor_fill(ttpipe_tensor handle, float value) {
    enter_fn("ttpipe_tensor_fill");
    opctx c;
    uint64_t h[] = {handle};
    static const char *const names[] = {"tensor"};
    int s = op_begin(&c, 1, h, names, 0, 0);
    if (s) return s;
    tv *t = &c.t[0];
    for (int32_t d = 0; d < t->sub->n; d++) {
        void *piece = t->st->piece[d];
        if (t->dtype == TTPIPE_FP32) {
            for (int64_t i = 0; i < t->numel; i++) ((float *) piece)[i] = value;
        } else if (t->numel > 0) {
            write_elem(piece, t->dtype, 0, value);
            for (int64_t i = 1; i < t->numel; i++) memcpy((char *) piece + i * esize(t->dtype), piece, (size_t) esize(t->dtype));
        }
    }
    return op_end(&c, TTPIPE_OK);
}

TTPIPE_API int32_t ttpipe_tensor_copy(ttpipe_tensor dst, ttpipe_tensor src) {
    enter_fn("ttpipe_tensor_copy");
    opctx c;
    uint64_t h[] = {dst, src};
    static const char *const names[] = {"dst", "src"};
    int s = op_begin(&c, 2, h, names, 0, 0);
    if (s) return s;
    tv *o = &c.t[0], *x = &c.t[1];
    if (o->sub != x->sub && (o->sub->rows != x->sub->rows || o->sub->cols != x->sub->cols)) {
        s = err(TTPIPE_E_INVALID_ARGUMENT, "dst's submesh [%d, %d] and src's [%d, %d] differ in shape", o->sub->rows,
                o->sub->cols, x->sub->rows, x->sub->cols);
    }
    if (!s && o->numel != x->numel) {
        s = err(TTPIPE_E_INVALID_ARGUMENT, "dst has %" PRId64 " elements per device, src %" PRId64, o->numel, x->numel);
    }
    if (!s && o->st == x->st && o->dtype != x->dtype) {
        s = err(TTPIPE_E_INVALID_ARGUMENT, "dst and src share memory with different dtypes");
    }
    for (int32_t d = 0; !s && d < o->sub->n; d++) {
        void *to = o->st->piece[d];
        const void *from = x->st->piece[d];
        if (to == from) continue;
        if (o->dtype == x->dtype) {
            memcpy(to, from, (size_t) (o->numel * esize(o->dtype)));
        } else {
            for (int64_t i = 0; i < o->numel; i++) write_elem(to, o->dtype, i, read_elem(from, x->dtype, i));
        }
    }
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_permute(ttpipe_tensor out, ttpipe_tensor x, int32_t rank, const int32_t *perm) {
    enter_fn("ttpipe_permute");
    opctx c;
    uint64_t h[] = {out, x};
    static const char *const names[] = {"out", "x"};
    int s = op_begin(&c, 2, h, names, 0, SAME_SUBMESH);
    if (s) return s;
    tv *o = &c.t[0], *t = &c.t[1];
    s = same_dtype(o, t);
    if (!s && (rank != t->rank || (rank > 0 && !perm))) {
        s = err(TTPIPE_E_INVALID_ARGUMENT, "perm has %d entries, x has rank %d", rank, t->rank);
    }
    int seen[TTPIPE_MAX_RANK] = {0};
    for (int32_t i = 0; !s && i < rank; i++) {
        if (perm[i] < 0 || perm[i] >= rank || seen[perm[i]]) {
            s = err(TTPIPE_E_INVALID_ARGUMENT, "perm is not a permutation of %d dims (entry %d is %d)", rank, i, perm[i]);
        } else {
            seen[perm[i]] = 1;
        }
    }
    int ok = !s && o->rank == rank;
    for (int32_t i = 0; ok && i < rank; i++) ok = o->dims[i] == t->dims[perm[i]];
    if (!s && !ok) {
        char dout[128], dx[128];
        format_dims(dout, sizeof dout, o->rank, o->dims);
        format_dims(dx, sizeof dx, t->rank, t->dims);
        s = err(TTPIPE_E_INVALID_ARGUMENT, "out %s is not x %s permuted", dout, dx);
    }
    if (!s && o->st == t->st) s = err(TTPIPE_E_INVALID_ARGUMENT, "out shares memory with x");
    if (s || t->numel == 0) return op_end(&c, s);
    int64_t in_stride[TTPIPE_MAX_RANK], out_in_stride[TTPIPE_MAX_RANK];
    int64_t st = 1;
    for (int32_t d = rank - 1; d >= 0; d--) {
        in_stride[d] = st;
        st *= t->dims[d];
    }
    for (int32_t i = 0; i < rank; i++) out_in_stride[i] = in_stride[perm[i]];
    int64_t len = rank == 0 ? 1 : o->dims[rank - 1];
    int64_t step = rank == 0 ? 1 : out_in_stride[rank - 1];
    int64_t rows = t->numel / len;
    int es = esize(t->dtype);
    for (int32_t d = 0; d < o->sub->n; d++) {
        const char *xp = t->st->piece[d];
        char *op = o->st->piece[d];
        for (int64_t r = 0; r < rows; r++) {
            int64_t ib = 0, rem = r;
            for (int32_t i = rank - 2; i >= 0; i--) {
                ib += (rem % o->dims[i]) * out_in_stride[i];
                rem /= o->dims[i];
            }
            if (es == 4) {
                const uint32_t *xs = (const uint32_t *) xp;
                uint32_t *os = (uint32_t *) op + r * len;
                for (int64_t j = 0; j < len; j++) os[j] = xs[ib + j * step];
            } else {
                const uint16_t *xs = (const uint16_t *) xp;
                uint16_t *os = (uint16_t *) op + r * len;
                for (int64_t j = 0; j < len; j++) os[j] = xs[ib + j * step];
            }
        }
    }
    return op_end(&c, TTPIPE_OK);
}
