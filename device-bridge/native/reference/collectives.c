/*
 * Collectives over one mesh axis of a submesh and point-to-point sockets between submeshes, in
 * process: data moves between the emulated devices' pieces for real. Sums run in a fixed order
 * (position 0 first) and are computed once, then copied, so every replica is bit-identical (as on
 * the cpu backend).
 */
#include "internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int cond_wait_until(pthread_cond_t *cond, const struct timespec *deadline);

static int need_axis(int32_t axis) {
    if (axis != 0 && axis != 1) return err(TTPIPE_E_OUT_OF_RANGE, "mesh axis %d out of range, expected 0 or 1", axis);
    return TTPIPE_OK;
}

/* out has x's dims but dim d = x's dim d * mul / div. */
static int need_resized(const tv *o, const tv *x, int32_t d, int32_t mul, int32_t div) {
    int32_t expect[TTPIPE_MAX_RANK];
    memcpy(expect, x->dims, sizeof expect);
    if (div > 1 && x->dims[d] % div != 0) {
        return err(TTPIPE_E_INVALID_ARGUMENT, "local dim %d of x (size %d) is not divisible by the axis size %d", d,
                   x->dims[d], div);
    }
    int64_t resized = (int64_t) x->dims[d] * mul / div;
    if (resized > INT32_MAX) return err(TTPIPE_E_INVALID_ARGUMENT, "local dim %d of x is too large to gather", d);
    expect[d] = (int32_t) resized;
    int ok = o->rank == x->rank;
    for (int32_t i = 0; ok && i < x->rank; i++) ok = o->dims[i] == expect[i];
    if (!ok) {
        char dout[128], de[128];
        format_dims(dout, sizeof dout, o->rank, o->dims);
        format_dims(de, sizeof de, x->rank, expect);
        return err(TTPIPE_E_INVALID_ARGUMENT, "out has local shape %s, expected %s", dout, de);
    }
    return TTPIPE_OK;
}

TTPIPE_API int32_t ttpipe_all_gather(ttpipe_tensor out, ttpipe_tensor x, int32_t dim, int32_t axis) {
    enter_fn("ttpipe_all_gather");
    opctx c;
    uint64_t h[] = {out, x};
    static const char *const names[] = {"out", "x"};
    int s = op_begin(&c, 2, h, names, 0, SAME_SUBMESH);
    if (s) return s;
    tv *to = &c.t[0], *tx = &c.t[1];
    int32_t d0 = 0;
    s = need_axis(axis);
    if (!s) s = same_dtype(to, tx);
    if (!s) s = dim_index(tx, dim, &d0);
    int32_t n = s ? 1 : axis_size(tx->sub, axis);
    if (!s) s = need_resized(to, tx, d0, n, 1);
    if (!s && to->st == tx->st) s = err(TTPIPE_E_INVALID_ARGUMENT, "out shares memory with x");
    if (s) return op_end(&c, s);
    int64_t outer, k, inner;
    around_dim(tx->dims, tx->rank, d0, &outer, &k, &inner);
    int64_t inner_bytes = k * inner * esize(tx->dtype);
    for (int32_t dev = 0; dev < tx->sub->n; dev++) {
        char *o = to->st->piece[dev];
        for (int32_t j = 0; j < n; j++) {
            const char *src = tx->st->piece[peer(tx->sub, dev, axis, j)];
            for (int64_t r = 0; r < outer; r++) {
                memcpy(o + (r * n + j) * inner_bytes, src + r * inner_bytes, (size_t) inner_bytes);
            }
        }
    }
    return op_end(&c, TTPIPE_OK);
}

/* The devices of each group along axis: groups[g * size + j] is group g's device at position j. */
static int32_t *axis_groups(const submesh *sub, int32_t axis, int32_t *count) {
    int32_t size = axis_size(sub, axis), n = sub->n / size;
    int32_t *g = malloc(sizeof(int32_t) * (size_t) sub->n);
    if (!g) return NULL;
    int32_t gi = 0;
    for (int32_t d = 0; d < sub->n; d++) {
        if (coord_along(sub, d, axis) != 0) continue;
        for (int32_t j = 0; j < size; j++) g[gi * size + j] = peer(sub, d, axis, j);
        gi++;
    }
    *count = n;
    return g;
}

TTPIPE_API int32_t ttpipe_reduce_scatter(ttpipe_tensor out, ttpipe_tensor x, int32_t dim, int32_t axis) {
    enter_fn("ttpipe_reduce_scatter");
    opctx c;
    uint64_t h[] = {out, x};
    static const char *const names[] = {"out", "x"};
    int s = op_begin(&c, 2, h, names, 0, SAME_SUBMESH | GROUP_STAGING);
    if (s) return s;
    tv *to = &c.t[0], *tx = &c.t[1];
    int32_t d0 = 0;
    s = need_axis(axis);
    if (!s) s = need_float(to);
    if (!s) s = need_float(tx);
    if (!s) s = dim_index(tx, dim, &d0);
    int32_t n = s ? 1 : axis_size(tx->sub, axis);
    if (!s) s = need_resized(to, tx, d0, 1, n);
    if (!s && to->st == tx->st) s = err(TTPIPE_E_INVALID_ARGUMENT, "out shares memory with x");
    int32_t groups = 0;
    int32_t *g = s ? NULL : axis_groups(tx->sub, axis, &groups);
    if (!s && !g) s = err_host(4 * tx->sub->n);
    int64_t outer = 0, k = 0, inner = 0;
    if (!s) around_dim(to->dims, to->rank, d0, &outer, &k, &inner);
    inner *= k;
    const float **xs = s ? NULL : malloc(sizeof(float *) * (size_t) n);
    float **os = s ? NULL : malloc(sizeof(float *) * (size_t) n);
    if (!s && (!xs || !os)) s = err_host(16 * n);
    for (int32_t gi = 0; !s && gi < groups; gi++) {
        staging st;
        staging_init(&st);
        for (int32_t j = 0; j < n; j++) {
            xs[j] = stage_read(&st, tx, g[gi * n + j]);
            os[j] = stage_write(&st, to, g[gi * n + j]);
            if (!xs[j] || !os[j]) s = TTPIPE_E_HOST;
        }
        for (int32_t cdev = 0; !s && cdev < n; cdev++) {
            int64_t block = cdev * inner;
            for (int64_t e = 0; e < outer * inner; e++) {
                int64_t o = e / inner, i = e - o * inner;
                int64_t src = o * n * inner + block + i;
                float sum = xs[0][src];
                for (int32_t j = 1; j < n; j++) sum += xs[j][src];
                os[cdev][e] = sum;
            }
        }
        staging_end(&st, !s);
    }
    free(g);
    free((void *) xs);
    free(os);
    return op_end(&c, s);
}

TTPIPE_API int32_t ttpipe_all_reduce(ttpipe_tensor out, ttpipe_tensor x, int32_t axis, int32_t op) {
    enter_fn("ttpipe_all_reduce");
    opctx c;
    uint64_t h[] = {out, x};
    static const char *const names[] = {"out", "x"};
    int s = op_begin(&c, 2, h, names, 0, SAME_SUBMESH | GROUP_STAGING);
    if (s) return s;
    tv *to = &c.t[0], *tx = &c.t[1];
    s = need_axis(axis);
    if (!s) s = need_float(to);
    if (!s) s = need_float(tx);
    if (!s) s = same_dims(to, tx);
    if (!s && op != TTPIPE_REDUCE_SUM && op != TTPIPE_REDUCE_MEAN) {
        s = err(TTPIPE_E_INVALID_ARGUMENT, "reduce op %d is not TTPIPE_REDUCE_SUM (0) or TTPIPE_REDUCE_MEAN (1)", op);
    }
    if (!s && to->st == tx->st && to->dtype != tx->dtype) {
        s = err(TTPIPE_E_INVALID_ARGUMENT, "out shares memory with x with another dtype");
    }
    int32_t n = s ? 1 : axis_size(tx->sub, axis), groups = 0;
    int32_t *g = s ? NULL : axis_groups(tx->sub, axis, &groups);
    if (!s && !g) s = err_host(4 * tx->sub->n);
    float post = op == TTPIPE_REDUCE_MEAN ? 1.0f / (float) n : 1.0f;
    const float **xs = s ? NULL : malloc(sizeof(float *) * (size_t) n);
    float **os = s ? NULL : malloc(sizeof(float *) * (size_t) n);
    if (!s && (!xs || !os)) s = err_host(16 * n);
    int64_t len = tx->numel;
    for (int32_t gi = 0; !s && gi < groups; gi++) {
        staging st;
        staging_init(&st);
        for (int32_t j = 0; j < n; j++) xs[j] = stage_read(&st, tx, g[gi * n + j]);
        for (int32_t j = 0; j < n; j++) {
            os[j] = stage_write(&st, to, g[gi * n + j]);
            if (!xs[j] || !os[j]) s = TTPIPE_E_HOST;
        }
        if (!s) {
            float *first = os[0];
            for (int64_t i = 0; i < len; i++) {
                float sum = xs[0][i];
                for (int32_t j = 1; j < n; j++) sum += xs[j][i];
                first[i] = post == 1.0f ? sum : sum * post;
            }
            for (int32_t j = 1; j < n; j++) {
                if (os[j] != first) memcpy(os[j], first, sizeof(float) * (size_t) len);
            }
        }
        staging_end(&st, !s);
    }
    free(g);
    free((void *) xs);
    free(os);
    return op_end(&c, s);
}

/* ---- sockets ------------------------------------------------------------------------------------------ */

TTPIPE_API int32_t ttpipe_socket_open(ttpipe_submesh from, ttpipe_submesh to, ttpipe_socket *out) {
    enter_fn("ttpipe_socket_open");
    if (!out) return err(TTPIPE_E_INVALID_ARGUMENT, "out is null");
    *out = 0;
    submesh *f, *t;
    lock();
    int s = handle_get(from, K_SUBMESH, "from", (void **) &f);
    if (!s) s = handle_get(to, K_SUBMESH, "to", (void **) &t);
    if (!s && f->m != t->m) s = err(TTPIPE_E_INVALID_ARGUMENT, "from and to belong to different meshes");
    if (!s && f->m->closing) s = err(TTPIPE_E_CLOSED, "the mesh is closed");
    if (!s && (f->rows != t->rows || f->cols != t->cols)) {
        s = err(TTPIPE_E_INVALID_ARGUMENT, "submesh shapes [%d, %d] and [%d, %d] differ", f->rows, f->cols, t->rows,
                t->cols);
    }
    sock *k = NULL;
    if (!s) {
        k = calloc(1, sizeof(sock));
        if (!k) s = err_host((int64_t) sizeof(sock));
    }
    if (!s) {
        pthread_condattr_t attr;
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&k->arrived, &attr);
        pthread_condattr_destroy(&attr);
        k->m = f->m;
        k->from = f;
        k->to = t;
        k->handle = handle_new(K_SOCKET, k);
        if (!k->handle) {
            pthread_cond_destroy(&k->arrived);
            free(k);
            s = TTPIPE_E_HOST;
        } else {
            k->next = f->m->sockets;
            f->m->sockets = k;
            *out = k->handle;
        }
    }
    unlock();
    return s;
}

static int queue_push(sock *k, tensor *t) {
    if (k->len == k->cap) {
        int cap = k->cap ? 2 * k->cap : 8;
        tensor **q = malloc(sizeof(tensor *) * (size_t) cap);
        if (!q) return err_host((int64_t) sizeof(tensor *) * cap);
        for (int i = 0; i < k->len; i++) q[i] = k->queue[(k->head + i) % k->cap];
        free(k->queue);
        k->queue = q;
        k->head = 0;
        k->cap = cap;
    }
    k->queue[(k->head + k->len) % k->cap] = t;
    k->len++;
    return TTPIPE_OK;
}

/* Drops a use of a socket; frees a closed one nobody uses any more. Under the lock. */
static void sock_done(sock *k) {
    if (--k->busy == 0 && k->closed) sock_unlink_and_destroy(k);
}

TTPIPE_API int32_t ttpipe_socket_send(ttpipe_socket socket, ttpipe_tensor handle) {
    enter_fn("ttpipe_socket_send");
    sock *k;
    tensor *t, *copy = NULL;
    lock();
    int s = handle_get(socket, K_SOCKET, "socket", (void **) &k);
    if (!s) s = handle_get(handle, K_TENSOR, "tensor", (void **) &t);
    if (!s && t->sub != k->from) {
        s = err(TTPIPE_E_INVALID_ARGUMENT, "the tensor lives on the submesh at (%d, %d), the socket sends from (%d, %d)",
                t->sub->row0, t->sub->col0, k->from->row0, k->from->col0);
    }
    if (!s) s = mesh_enter(k->m);
    if (s) {
        unlock();
        return s;
    }
    s = tensor_new(k->to, t->dtype, t->rank, t->dims, &copy);
    storage *src = t->st;
    src->refs++;
    k->busy++;
    unlock();
    if (!s) {
        for (int32_t d = 0; d < src->n; d++) memcpy(copy->st->piece[d], src->piece[d], (size_t) src->bytes);
    }
    lock();
    storage_release(src);
    if (!s && k->closed) s = err(TTPIPE_E_CLOSED, "the socket was closed during the send");
    if (!s) s = queue_push(k, copy);
    if (s && copy) tensor_destroy(copy);
    if (!s) pthread_cond_signal(&k->arrived);
    mesh *m = k->m;
    sock_done(k); /* may free k: a closed socket nobody uses any more */
    mesh_leave(m);
    unlock();
    return s;
}

TTPIPE_API int32_t ttpipe_socket_recv(ttpipe_socket socket, int64_t timeout_ms, ttpipe_tensor *out) {
    enter_fn("ttpipe_socket_recv");
    if (!out) return err(TTPIPE_E_INVALID_ARGUMENT, "out is null");
    *out = 0;
    sock *k;
    lock();
    int s = handle_get(socket, K_SOCKET, "socket", (void **) &k);
    if (!s) s = mesh_enter(k->m);
    if (s) {
        unlock();
        return s;
    }
    k->busy++;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    int64_t ms = timeout_ms < 0 ? 0 : timeout_ms;
    deadline.tv_sec += (time_t) (ms / 1000);
    deadline.tv_nsec += (long) (ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    while (k->len == 0 && !k->closed && !k->m->closing && ms > 0) {
        if (cond_wait_until(&k->arrived, &deadline) == ETIMEDOUT) break;
    }
    if (k->len > 0) {
        tensor *t = k->queue[k->head];
        t->handle = handle_new(K_TENSOR, t);
        if (!t->handle) {
            s = TTPIPE_E_HOST;
        } else {
            k->head = (k->head + 1) % k->cap;
            k->len--;
            *out = t->handle;
        }
    } else if (k->closed || k->m->closing) {
        s = err(TTPIPE_E_CLOSED, "the socket was closed while waiting");
    }
    mesh *m = k->m;
    sock_done(k); /* may free k: a closed socket nobody uses any more */
    mesh_leave(m);
    unlock();
    return s;
}

TTPIPE_API int32_t ttpipe_socket_close(ttpipe_socket socket) {
    enter_fn("ttpipe_socket_close");
    sock *k;
    lock();
    int s = handle_get(socket, K_SOCKET, "socket", (void **) &k);
    if (!s) {
        handle_release(socket);
        k->handle = 0;
        k->closed = 1;
        pthread_cond_broadcast(&k->arrived);
        if (k->busy == 0) sock_unlink_and_destroy(k);
    }
    unlock();
    return s;
}
