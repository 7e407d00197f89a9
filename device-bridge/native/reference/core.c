/*
 * The reference implementation's core: errors, the handle table, the lock, device memory
 * accounting, meshes and submeshes, the op context, shape helpers, bf16 and exp.
 */
#include "internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- errors ------------------------------------------------------------------------------------ */

static __thread char t_error[1024];
static __thread const char *t_fn = "ttpipe";
static __thread int64_t t_oom[4] = {-1, -1, -1, -1}; /* none yet */

void enter_fn(const char *fn) {
    t_fn = fn;
}

const char *current_fn(void) {
    return t_fn;
}

int err(int status, const char *fmt, ...) {
    int k = snprintf(t_error, sizeof t_error, "%s: ", t_fn);
    if (k < 0 || (size_t) k >= sizeof t_error) k = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_error + k, sizeof t_error - (size_t) k, fmt, ap);
    va_end(ap);
    return status;
}

int err_oom(const mesh *m, int32_t device, int64_t requested) {
    t_oom[0] = device;
    t_oom[1] = requested;
    t_oom[2] = m->in_use[device];
    t_oom[3] = m->capacity;
    return err(TTPIPE_E_OUT_OF_MEMORY,
               "device %d: out of memory: cannot allocate %" PRId64 " bytes with %" PRId64 " bytes in use of %" PRId64
               " (%" PRId64 " free)",
               device, requested, m->in_use[device], m->capacity, m->capacity - m->in_use[device]);
}

int err_host(int64_t bytes) {
    return err(TTPIPE_E_HOST, "host out of memory allocating %" PRId64 " bytes", bytes);
}

void format_dims(char *buf, size_t cap, int32_t rank, const int32_t *dims) {
    size_t k = 0;
    k += (size_t) snprintf(buf + k, cap - k, "[");
    for (int32_t i = 0; i < rank && k < cap; i++) {
        k += (size_t) snprintf(buf + k, cap - k, i == 0 ? "%d" : ", %d", dims[i]);
    }
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

TTPIPE_API const char *ttpipe_last_error(void) {
    return t_error;
}

TTPIPE_API int32_t ttpipe_last_oom(int64_t *out) {
    enter_fn("ttpipe_last_oom");
    if (!out) return err(TTPIPE_E_INVALID_ARGUMENT, "out is null");
    memcpy(out, t_oom, sizeof t_oom);
    return TTPIPE_OK;
}

TTPIPE_API int32_t ttpipe_abi_version(void) {
    return TTPIPE_ABI_VERSION;
}

TTPIPE_API const char *ttpipe_implementation(void) {
    return "reference (fp32 C, emulated devices in host memory)";
}

TTPIPE_API int32_t ttpipe_noop(void) {
    return TTPIPE_OK;
}

/* ---- lock and handle table --------------------------------------------------------------------- */

/*
 * A handle is kind (8 bits) | generation (32 bits) | slot index + 1 (24 bits). A slot's generation
 * grows on every release, so a stale handle no longer matches it. Slots live in fixed chunks that
 * never move; freed slots are reused last-in first-out.
 */
#define CHUNK_BITS 12
#define CHUNK (1 << CHUNK_BITS)
#define MAX_CHUNKS 4096 /* 16M slots */

typedef struct {
    uint32_t gen;
    uint8_t kind;
    void *obj;
    uint32_t next_free; /* index + 1 of the next free slot, 0 for none */
} slot;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static slot *g_chunks[MAX_CHUNKS];
static uint32_t g_slots;
static uint32_t g_free;
static int64_t g_live;
int64_t g_host_bytes;

void lock(void) {
    pthread_mutex_lock(&g_lock);
}

void unlock(void) {
    pthread_mutex_unlock(&g_lock);
}

static slot *slot_at(uint32_t index) {
    return &g_chunks[index >> CHUNK_BITS][index & (CHUNK - 1)];
}

static uint64_t make_handle(kind k, uint32_t gen, uint32_t index) {
    return ((uint64_t) k << 56) | ((uint64_t) gen << 24) | (uint64_t) (index + 1);
}

static const char *kind_name(int k) {
    switch (k) {
        case K_MESH: return "mesh";
        case K_SUBMESH: return "submesh";
        case K_TENSOR: return "tensor";
        case K_SOCKET: return "socket";
        default: return "unknown";
    }
}

uint64_t handle_new(kind k, void *obj) {
    uint32_t index;
    if (g_free) {
        index = g_free - 1;
        g_free = slot_at(index)->next_free;
    } else {
        if (g_slots == (uint32_t) MAX_CHUNKS * CHUNK) {
            err(TTPIPE_E_HOST, "handle table full (%u live handles)", g_slots);
            return 0;
        }
        if (!g_chunks[g_slots >> CHUNK_BITS]) {
            slot *c = calloc(CHUNK, sizeof(slot));
            if (!c) {
                err_host((int64_t) CHUNK * (int64_t) sizeof(slot));
                return 0;
            }
            for (int i = 0; i < CHUNK; i++) c[i].gen = 1;
            g_chunks[g_slots >> CHUNK_BITS] = c;
        }
        index = g_slots++;
    }
    slot *s = slot_at(index);
    s->kind = (uint8_t) k;
    s->obj = obj;
    s->next_free = 0;
    g_live++;
    return make_handle(k, s->gen, index);
}

int handle_get(uint64_t h, kind k, const char *what, void **obj) {
    if (h == 0) return err(TTPIPE_E_INVALID_HANDLE, "%s is the null handle", what);
    int hk = (int) (h >> 56);
    uint32_t gen = (uint32_t) (h >> 24);
    uint64_t idx1 = h & 0xFFFFFF;
    if (hk != (int) k) {
        return err(TTPIPE_E_INVALID_HANDLE, "%s 0x%016" PRIx64 " is a %s handle, expected a %s handle", what, h,
                   kind_name(hk), kind_name(k));
    }
    if (idx1 == 0 || idx1 > g_slots) {
        return err(TTPIPE_E_INVALID_HANDLE, "%s 0x%016" PRIx64 " was never issued by this library", what, h);
    }
    slot *s = slot_at((uint32_t) idx1 - 1);
    if (s->kind != (uint8_t) k || s->gen != gen) {
        return err(TTPIPE_E_INVALID_HANDLE,
                   "%s 0x%016" PRIx64 " is stale: already freed (or its mesh was closed)", what, h);
    }
    *obj = s->obj;
    return TTPIPE_OK;
}

void handle_release(uint64_t h) {
    uint32_t index = (uint32_t) (h & 0xFFFFFF) - 1;
    slot *s = slot_at(index);
    s->kind = K_FREE;
    s->obj = NULL;
    s->gen = s->gen == UINT32_MAX ? 1 : s->gen + 1;
    s->next_free = g_free;
    g_free = index + 1;
    g_live--;
}

void for_each_object(kind k, void (*f)(void *obj, void *arg), void *arg) {
    for (uint32_t i = 0; i < g_slots; i++) {
        slot *s = slot_at(i);
        if (s->kind == (uint8_t) k) f(s->obj, arg);
    }
}

TTPIPE_API int64_t ttpipe_live_handles(void) {
    lock();
    int64_t n = g_live;
    unlock();
    return n;
}

TTPIPE_API int64_t ttpipe_host_bytes(void) {
    lock();
    int64_t n = g_host_bytes;
    unlock();
    return n;
}

/* ---- accounting and storage ---------------------------------------------------------------------- */

int charge(mesh *m, const int32_t *dev, int32_t n, int64_t bytes) {
    for (int32_t i = 0; i < n; i++) {
        if (bytes > m->capacity - m->in_use[dev[i]]) return err_oom(m, dev[i], bytes);
    }
    for (int32_t i = 0; i < n; i++) {
        m->in_use[dev[i]] += bytes;
        if (m->in_use[dev[i]] > m->peak[dev[i]]) m->peak[dev[i]] = m->in_use[dev[i]];
    }
    return TTPIPE_OK;
}

void refund(mesh *m, const int32_t *dev, int32_t n, int64_t bytes) {
    for (int32_t i = 0; i < n; i++) m->in_use[dev[i]] -= bytes;
}

int storage_new(submesh *sub, int64_t bytes, storage **out) {
    int s = charge(sub->m, sub->dev, sub->n, bytes);
    if (s) return s;
    storage *st = calloc(1, sizeof(storage));
    int32_t *dev = st ? malloc(sizeof(int32_t) * (size_t) sub->n) : NULL;
    void **piece = dev ? calloc((size_t) sub->n, sizeof(void *)) : NULL;
    int ok = piece != NULL;
    for (int32_t i = 0; ok && i < sub->n; i++) {
        piece[i] = malloc(bytes > 0 ? (size_t) bytes : 1);
        ok = piece[i] != NULL;
    }
    if (!ok) {
        if (piece) for (int32_t i = 0; i < sub->n; i++) free(piece[i]);
        free(piece);
        free(dev);
        free(st);
        refund(sub->m, sub->dev, sub->n, bytes);
        return err_host(bytes * sub->n);
    }
    memcpy(dev, sub->dev, sizeof(int32_t) * (size_t) sub->n);
    st->m = sub->m;
    st->n = sub->n;
    st->dev = dev;
    st->bytes = bytes;
    st->piece = piece;
    st->refs = 1;
    g_host_bytes += bytes * sub->n;
    *out = st;
    return TTPIPE_OK;
}

void storage_release(storage *st) {
    if (--st->refs > 0) return;
    refund(st->m, st->dev, st->n, st->bytes);
    g_host_bytes -= st->bytes * st->n;
    for (int32_t i = 0; i < st->n; i++) free(st->piece[i]);
    free(st->piece);
    free(st->dev);
    free(st);
}

int tensor_new(submesh *sub, int32_t dtype, int32_t rank, const int32_t *dims, tensor **out) {
    int64_t numel;
    int s = check_dtype(dtype);
    if (!s) s = check_dims(rank, dims, &numel);
    if (s) return s;
    tensor *t = calloc(1, sizeof(tensor));
    if (!t) return err_host((int64_t) sizeof(tensor));
    s = storage_new(sub, numel * esize(dtype), &t->st);
    if (s) {
        free(t);
        return s;
    }
    t->sub = sub;
    t->dtype = dtype;
    t->rank = rank;
    if (rank > 0) memcpy(t->dims, dims, sizeof(int32_t) * (size_t) rank);
    t->numel = numel;
    *out = t;
    return TTPIPE_OK;
}

void tensor_destroy(tensor *t) {
    storage_release(t->st);
    free(t);
}

/* ---- meshes, submeshes, devices ------------------------------------------------------------------- */

static void mesh_free(mesh *m) {
    pthread_cond_destroy(&m->idle);
    free(m->in_use);
    free(m->peak);
    free(m);
}

TTPIPE_API int32_t ttpipe_mesh_open(int32_t rows, int32_t cols, int64_t capacity_per_device, ttpipe_mesh *out) {
    enter_fn("ttpipe_mesh_open");
    if (!out) return err(TTPIPE_E_INVALID_ARGUMENT, "out is null");
    *out = 0;
    if (rows < 1 || cols < 1 || (int64_t) rows * cols > MAX_MESH_DEVICES) {
        return err(TTPIPE_E_INVALID_ARGUMENT, "mesh shape [%d, %d]: sizes must be >= 1 and at most %d devices in all",
                   rows, cols, MAX_MESH_DEVICES);
    }
    if (capacity_per_device <= 0) {
        return err(TTPIPE_E_INVALID_ARGUMENT, "capacity per device %" PRId64 " must be > 0", capacity_per_device);
    }
    mesh *m = calloc(1, sizeof(mesh));
    if (!m) return err_host((int64_t) sizeof(mesh));
    m->rows = rows;
    m->cols = cols;
    m->n = rows * cols;
    m->capacity = capacity_per_device;
    m->in_use = calloc((size_t) m->n, sizeof(int64_t));
    m->peak = calloc((size_t) m->n, sizeof(int64_t));
    if (!m->in_use || !m->peak) {
        int64_t bytes = (int64_t) m->n * 16;
        free(m->in_use);
        free(m->peak);
        free(m);
        return err_host(bytes);
    }
    pthread_cond_init(&m->idle, NULL);
    lock();
    m->handle = handle_new(K_MESH, m);
    unlock();
    if (!m->handle) {
        mesh_free(m);
        return TTPIPE_E_HOST;
    }
    *out = m->handle;
    return TTPIPE_OK;
}

static void sock_destroy(sock *s);

typedef struct {
    mesh *m;
} close_arg;

static void close_tensor(void *obj, void *arg) {
    tensor *t = obj;
    if (t->sub->m != ((close_arg *) arg)->m) return;
    handle_release(t->handle);
    tensor_destroy(t);
}

static void close_socket(void *obj, void *arg) {
    sock *s = obj;
    if (s->m != ((close_arg *) arg)->m) return;
    handle_release(s->handle);
    s->handle = 0;
}

static void close_submesh(void *obj, void *arg) {
    submesh *s = obj;
    if (s->m != ((close_arg *) arg)->m) return;
    handle_release(s->handle);
    free(s->dev);
    free(s);
}

TTPIPE_API int32_t ttpipe_mesh_close(ttpipe_mesh handle) {
    enter_fn("ttpipe_mesh_close");
    mesh *m;
    lock();
    int s = handle_get(handle, K_MESH, "mesh", (void **) &m);
    if (!s && m->closing) s = err(TTPIPE_E_CLOSED, "mesh 0x%016" PRIx64 " is already closing", handle);
    if (s) {
        unlock();
        return s;
    }
    m->closing = 1;
    for (sock *k = m->sockets; k; k = k->next) pthread_cond_broadcast(&k->arrived);
    while (m->inflight > 0) pthread_cond_wait(&m->idle, &g_lock);
    close_arg arg = {m};
    for_each_object(K_SOCKET, close_socket, &arg);
    while (m->sockets) {
        sock *k = m->sockets;
        m->sockets = k->next;
        sock_destroy(k);
    }
    for_each_object(K_TENSOR, close_tensor, &arg);
    for_each_object(K_SUBMESH, close_submesh, &arg);
    handle_release(m->handle);
    unlock();
    mesh_free(m);
    return TTPIPE_OK;
}

/* Frees a socket struct and the tensors queued in it (under the lock; not in m->sockets any more). */
static void sock_destroy(sock *s) {
    for (int i = 0; i < s->len; i++) tensor_destroy(s->queue[(s->head + i) % s->cap]);
    free(s->queue);
    pthread_cond_destroy(&s->arrived);
    free(s);
}

void sock_unlink_and_destroy(sock *s) {
    for (sock **p = &s->m->sockets; *p; p = &(*p)->next) {
        if (*p == s) {
            *p = s->next;
            break;
        }
    }
    sock_destroy(s);
}

TTPIPE_API int32_t ttpipe_mesh_create_submeshes(ttpipe_mesh handle, int32_t rows, int32_t cols, ttpipe_submesh *out,
                                               int32_t capacity, int32_t *count) {
    enter_fn("ttpipe_mesh_create_submeshes");
    if (!out || !count) return err(TTPIPE_E_INVALID_ARGUMENT, "out or count is null");
    mesh *m;
    lock();
    int s = handle_get(handle, K_MESH, "mesh", (void **) &m);
    if (!s && m->closing) s = err(TTPIPE_E_CLOSED, "the mesh is closed");
    if (!s && (rows < 1 || cols < 1 || m->rows % rows != 0 || m->cols % cols != 0)) {
        s = err(TTPIPE_E_INVALID_ARGUMENT, "submesh shape [%d, %d] does not tile the mesh [%d, %d]", rows, cols,
                m->rows, m->cols);
    }
    int32_t total = 0;
    if (!s) {
        total = (m->rows / rows) * (m->cols / cols);
        if (capacity < total) {
            s = err(TTPIPE_E_INVALID_ARGUMENT, "out has room for %d handles, the mesh holds %d submeshes", capacity,
                    total);
        }
    }
    int32_t made = 0;
    for (int32_t r0 = 0; !s && r0 < m->rows; r0 += rows) {
        for (int32_t c0 = 0; !s && c0 < m->cols; c0 += cols) {
            submesh *sub = calloc(1, sizeof(submesh));
            int32_t *dev = sub ? malloc(sizeof(int32_t) * (size_t) (rows * cols)) : NULL;
            if (!dev) {
                free(sub);
                s = err_host((int64_t) sizeof(submesh));
                break;
            }
            for (int32_t r = 0; r < rows; r++) {
                for (int32_t c = 0; c < cols; c++) dev[r * cols + c] = (r0 + r) * m->cols + c0 + c;
            }
            *sub = (submesh) {m, r0, c0, rows, cols, rows * cols, dev, 0};
            sub->handle = handle_new(K_SUBMESH, sub);
            if (!sub->handle) {
                free(dev);
                free(sub);
                s = TTPIPE_E_HOST;
                break;
            }
            out[made++] = sub->handle;
        }
    }
    if (s) {
        for (int32_t i = 0; i < made; i++) {
            submesh *sub;
            if (handle_get(out[i], K_SUBMESH, "submesh", (void **) &sub) == TTPIPE_OK) {
                handle_release(out[i]);
                free(sub->dev);
                free(sub);
            }
            out[i] = 0;
        }
    } else {
        *count = total;
    }
    unlock();
    return s;
}

TTPIPE_API int32_t ttpipe_submesh_info(ttpipe_submesh handle, int32_t *out) {
    enter_fn("ttpipe_submesh_info");
    if (!out) return err(TTPIPE_E_INVALID_ARGUMENT, "out is null");
    submesh *sub;
    lock();
    int s = handle_get(handle, K_SUBMESH, "submesh", (void **) &sub);
    if (!s) {
        out[0] = sub->row0;
        out[1] = sub->col0;
        out[2] = sub->rows;
        out[3] = sub->cols;
    }
    unlock();
    return s;
}

TTPIPE_API int32_t ttpipe_submesh_synchronize(ttpipe_submesh handle) {
    enter_fn("ttpipe_submesh_synchronize");
    submesh *sub;
    lock();
    int s = handle_get(handle, K_SUBMESH, "submesh", (void **) &sub);
    if (!s && sub->m->closing) s = err(TTPIPE_E_CLOSED, "the mesh is closed");
    unlock();
    return s; /* every op has finished when it returns */
}

static int device_of(ttpipe_mesh handle, int32_t device, mesh **m) {
    int s = handle_get(handle, K_MESH, "mesh", (void **) m);
    if (!s && (device < 0 || device >= (*m)->n)) {
        s = err(TTPIPE_E_OUT_OF_RANGE, "device %d out of range for a mesh of %d devices", device, (*m)->n);
    }
    return s;
}

TTPIPE_API int32_t ttpipe_device_memory(ttpipe_mesh handle, int32_t device, int64_t *out) {
    enter_fn("ttpipe_device_memory");
    if (!out) return err(TTPIPE_E_INVALID_ARGUMENT, "out is null");
    mesh *m;
    lock();
    int s = device_of(handle, device, &m);
    if (!s) {
        out[0] = m->in_use[device];
        out[1] = m->peak[device];
        out[2] = m->capacity;
    }
    unlock();
    return s;
}

TTPIPE_API int32_t ttpipe_device_reset_peak(ttpipe_mesh handle, int32_t device) {
    enter_fn("ttpipe_device_reset_peak");
    mesh *m;
    lock();
    int s = device_of(handle, device, &m);
    if (!s) m->peak[device] = m->in_use[device];
    unlock();
    return s;
}

/* ---- op context ------------------------------------------------------------------------------------ */

int mesh_enter(mesh *m) {
    if (m->closing) return err(TTPIPE_E_CLOSED, "the mesh is closed");
    m->inflight++;
    return TTPIPE_OK;
}

void mesh_leave(mesh *m) {
    if (--m->inflight == 0 && m->closing) pthread_cond_broadcast(&m->idle);
}

/*
 * The staging scratch an op can need (see staging_reserve): with a BF16 tensor among its operands, every float
 * operand may be staged at once on one device (a group's devices with GROUP_STAGING); without one, nothing is.
 */
static int reserve_for(tensor *const *ts, int n, unsigned flags) {
    int64_t floats = 0;
    int any_bf16 = 0, group = 1;
    for (int i = 0; i < n; i++) {
        if (!ts[i] || ts[i]->dtype == TTPIPE_INT32) continue;
        any_bf16 |= ts[i]->dtype == TTPIPE_BF16;
        floats += ts[i]->numel > 0 ? ts[i]->numel : 1;
        if (flags & GROUP_STAGING) group = ts[i]->sub->n;
    }
    return staging_reserve(any_bf16 ? floats * group : 0, n * group);
}

int op_begin(opctx *c, int n, const uint64_t *handles, const char *const *names, unsigned optional_mask,
             unsigned flags) {
    memset(c, 0, sizeof *c);
    lock();
    tensor *ts[OP_MAX_TENSORS] = {0};
    int s = TTPIPE_OK;
    for (int i = 0; i < n && !s; i++) {
        if (handles[i] == 0 && (optional_mask & (1u << i))) continue;
        s = handle_get(handles[i], K_TENSOR, names[i], (void **) &ts[i]);
    }
    tensor *first = NULL;
    for (int i = 0; i < n && !s; i++) {
        if (!ts[i]) continue;
        if (!first) {
            first = ts[i];
        } else if (ts[i]->sub->m != first->sub->m) {
            s = err(TTPIPE_E_INVALID_ARGUMENT, "%s and %s live on different meshes", names[0], names[i]);
        } else if ((flags & SAME_SUBMESH) && ts[i]->sub != first->sub) {
            s = err(TTPIPE_E_INVALID_ARGUMENT,
                    "%s lives on the submesh at (%d, %d) of shape [%d, %d], %s on the one at (%d, %d) of shape [%d, %d]",
                    names[i], ts[i]->sub->row0, ts[i]->sub->col0, ts[i]->sub->rows, ts[i]->sub->cols,
                    first == ts[0] ? names[0] : "the first tensor", first->sub->row0, first->sub->col0,
                    first->sub->rows, first->sub->cols);
        }
    }
    if (!s) s = reserve_for(ts, n, flags);
    if (!s && first) s = mesh_enter(first->sub->m);
    if (!s) {
        c->m = first ? first->sub->m : NULL;
        c->nt = n;
        for (int i = 0; i < n; i++) {
            tv *v = &c->t[i];
            v->name = names[i];
            if (!ts[i]) continue;
            v->st = ts[i]->st;
            v->st->refs++;
            v->sub = ts[i]->sub;
            v->dtype = ts[i]->dtype;
            v->rank = ts[i]->rank;
            memcpy(v->dims, ts[i]->dims, sizeof v->dims);
            v->numel = ts[i]->numel;
        }
    }
    unlock();
    return s;
}

int op_end(opctx *c, int status) {
    lock();
    for (int i = 0; i < c->nt; i++) {
        if (c->t[i].st) storage_release(c->t[i].st);
        c->t[i].st = NULL;
    }
    if (c->m) mesh_leave(c->m);
    unlock();
    staging_release();
    return status;
}

/* ---- shapes -------------------------------------------------------------------------------------------- */

int esize(int32_t dtype) {
    return dtype == TTPIPE_BF16 ? 2 : 4;
}

int check_dtype(int32_t dtype) {
    if (dtype != TTPIPE_FP32 && dtype != TTPIPE_BF16 && dtype != TTPIPE_INT32) {
        return err(TTPIPE_E_INVALID_ARGUMENT, "dtype %d is not TTPIPE_FP32 (0), TTPIPE_BF16 (1) or TTPIPE_INT32 (2)",
                   dtype);
    }
    return TTPIPE_OK;
}

int check_dims(int32_t rank, const int32_t *dims, int64_t *numel) {
    if (rank < 0 || rank > TTPIPE_MAX_RANK) {
        return err(TTPIPE_E_INVALID_ARGUMENT, "rank %d out of range [0, %d]", rank, TTPIPE_MAX_RANK);
    }
    if (rank > 0 && !dims) return err(TTPIPE_E_INVALID_ARGUMENT, "dims is null for rank %d", rank);
    int64_t n = 1;
    for (int32_t i = 0; i < rank; i++) {
        if (dims[i] < 0) return err(TTPIPE_E_INVALID_ARGUMENT, "dimension %d is negative (%d)", i, dims[i]);
        n *= dims[i];
        if (n > MAX_ELEMENTS) return err(TTPIPE_E_INVALID_ARGUMENT, "more than 2^40 elements");
    }
    *numel = n;
    return TTPIPE_OK;
}

static const char *dtype_name(int32_t d) {
    return d == TTPIPE_FP32 ? "FP32" : d == TTPIPE_BF16 ? "BF16" : "INT32";
}

int need_float(const tv *t) {
    if (t->dtype == TTPIPE_INT32) return err(TTPIPE_E_INVALID_ARGUMENT, "%s is INT32, expected FP32 or BF16", t->name);
    return TTPIPE_OK;
}

int need_int(const tv *t) {
    if (t->dtype != TTPIPE_INT32) {
        return err(TTPIPE_E_INVALID_ARGUMENT, "%s is %s, expected INT32", t->name, dtype_name(t->dtype));
    }
    return TTPIPE_OK;
}

int same_dims(const tv *a, const tv *b) {
    int eq = a->rank == b->rank;
    for (int32_t i = 0; eq && i < a->rank; i++) eq = a->dims[i] == b->dims[i];
    if (!eq) {
        char da[128], db[128];
        format_dims(da, sizeof da, a->rank, a->dims);
        format_dims(db, sizeof db, b->rank, b->dims);
        return err(TTPIPE_E_INVALID_ARGUMENT, "%s %s and %s %s differ", a->name, da, b->name, db);
    }
    return TTPIPE_OK;
}

int same_dtype(const tv *a, const tv *b) {
    if (a->dtype != b->dtype) {
        return err(TTPIPE_E_INVALID_ARGUMENT, "%s is %s and %s is %s", a->name, dtype_name(a->dtype), b->name,
                   dtype_name(b->dtype));
    }
    return TTPIPE_OK;
}

int32_t last_of(const tv *t) {
    return t->rank == 0 ? 1 : t->dims[t->rank - 1];
}

int64_t rows_of(const tv *t) {
    int32_t last = last_of(t);
    return last == 0 ? 0 : t->numel / last;
}

int need_rank(const tv *t, int min) {
    if (t->rank < min) return err(TTPIPE_E_INVALID_ARGUMENT, "%s has rank %d, needs at least %d", t->name, t->rank, min);
    return TTPIPE_OK;
}

int dim_index(const tv *t, int32_t dim, int32_t *out) {
    int32_t d = dim < 0 ? dim + t->rank : dim;
    if (d < 0 || d >= t->rank) return err(TTPIPE_E_INVALID_ARGUMENT, "dim %d out of range for rank %d", dim, t->rank);
    *out = d;
    return TTPIPE_OK;
}

void around_dim(const int32_t *dims, int32_t rank, int32_t dim, int64_t *outer, int64_t *k, int64_t *inner) {
    int64_t o = 1, in = 1;
    for (int32_t i = 0; i < dim; i++) o *= dims[i];
    for (int32_t i = dim + 1; i < rank; i++) in *= dims[i];
    *outer = o;
    *k = dims[dim];
    *inner = in;
}

int32_t axis_size(const submesh *sub, int32_t axis) {
    return axis == 0 ? sub->rows : sub->cols;
}

int32_t coord_along(const submesh *sub, int32_t device, int32_t axis) {
    return axis == 0 ? device / sub->cols : device % sub->cols;
}

int32_t axis_of_dim(int32_t p0, int32_t p1, int32_t dim) {
    if (p0 == dim) return 0;
    if (p1 == dim) return 1;
    return -1;
}

int32_t peer(const submesh *sub, int32_t device, int32_t axis, int32_t j) {
    return axis == 0 ? j * sub->cols + device % sub->cols : (device / sub->cols) * sub->cols + j;
}

int distinct_piece(const submesh *sub, int32_t p0, int32_t p1, int32_t device) {
    if (p0 == TTPIPE_REPLICATE && coord_along(sub, device, 0) != 0) return 0;
    if (p1 == TTPIPE_REPLICATE && coord_along(sub, device, 1) != 0) return 0;
    return 1;
}

int check_placements(const submesh *sub, int32_t rank, int32_t p0, int32_t p1, int allow_partial) {
    (void) sub;
    int32_t p[2] = {p0, p1};
    for (int axis = 0; axis < 2; axis++) {
        if (p[axis] == TTPIPE_REPLICATE) continue;
        if (p[axis] == TTPIPE_PARTIAL) {
            if (!allow_partial) {
                return err(TTPIPE_E_INVALID_ARGUMENT, "placement TTPIPE_PARTIAL on mesh axis %d is not allowed here",
                           axis);
            }
            continue;
        }
        if (p[axis] < 0 || p[axis] >= rank) {
            return err(TTPIPE_E_INVALID_ARGUMENT, "placement %d on mesh axis %d is neither a placement code nor a "
                       "dim of a rank-%d tensor", p[axis], axis, rank);
        }
    }
    if (p0 >= 0 && p0 == p1) return err(TTPIPE_E_INVALID_ARGUMENT, "both mesh axes shard dim %d", p0);
    return TTPIPE_OK;
}

int check_logical(const tv *t, int32_t rank, const int32_t *dims, int32_t p0, int32_t p1, int allow_partial) {
    int64_t numel;
    int s = check_dims(rank, dims, &numel);
    if (!s) s = check_placements(t->sub, rank, p0, p1, allow_partial);
    if (s) return s;
    int ok = rank == t->rank;
    for (int32_t d = 0; ok && d < rank; d++) {
        int32_t axis = axis_of_dim(p0, p1, d);
        int32_t parts = axis < 0 ? 1 : axis_size(t->sub, axis);
        ok = dims[d] % parts == 0 && dims[d] / parts == t->dims[d];
    }
    if (!ok) {
        char dl[128], dt[128];
        format_dims(dl, sizeof dl, rank, dims);
        format_dims(dt, sizeof dt, t->rank, t->dims);
        return err(TTPIPE_E_INVALID_ARGUMENT,
                   "logical shape %s with placements (%d, %d) on a [%d, %d] submesh does not give %s's local shape %s",
                   dl, p0, p1, t->sub->rows, t->sub->cols, t->name, dt);
    }
    return TTPIPE_OK;
}

void lpiece_init(lpiece *lp, int32_t rank, const int32_t *dims, const int32_t *local, int32_t p0, int32_t p1,
                 const submesh *sub, int32_t device) {
    memset(lp, 0, sizeof *lp);
    int32_t outer = rank > 0 ? rank - 1 : 0;
    lp->outer = outer;
    int64_t off[TTPIPE_MAX_RANK] = {0};
    for (int32_t d = 0; d < rank; d++) {
        int32_t axis = axis_of_dim(p0, p1, d);
        off[d] = axis < 0 ? 0 : (int64_t) coord_along(sub, device, axis) * local[d];
    }
    int64_t stride = rank == 0 ? 1 : dims[rank - 1];
    int64_t b = rank == 0 ? 0 : off[rank - 1];
    for (int32_t d = outer - 1; d >= 0; d--) {
        lp->local[d] = local[d];
        lp->stride[d] = stride;
        b += off[d] * stride;
        stride *= dims[d];
    }
    lp->base = b;
    lp->row_length = rank == 0 ? 1 : local[rank - 1];
    int64_t n = 1;
    for (int32_t d = 0; d < rank; d++) n *= local[d];
    lp->rows = lp->row_length == 0 ? 0 : n / lp->row_length;
}

int64_t lpiece_row(const lpiece *lp, int64_t r) {
    int64_t g = lp->base;
    for (int32_t d = lp->outer - 1; d >= 0; d--) {
        int64_t n = lp->local[d];
        g += (r % n) * lp->stride[d];
        r /= n;
    }
    return g;
}

/* ---- bf16, exp, element access -------------------------------------------------------------------------- */

float read_elem(const void *piece, int32_t dtype, int64_t i) {
    switch (dtype) {
        case TTPIPE_FP32: return ((const float *) piece)[i];
        case TTPIPE_BF16: return bf16_to_float(((const uint16_t *) piece)[i]);
        default: return (float) ((const int32_t *) piece)[i];
    }
}

void write_elem(void *piece, int32_t dtype, int64_t i, float v) {
    switch (dtype) {
        case TTPIPE_FP32: ((float *) piece)[i] = v; break;
        case TTPIPE_BF16: ((uint16_t *) piece)[i] = bf16_from_float(v); break;
        default: {
            /* truncation toward zero, saturating like Java's (int) cast; NaN gives 0 */
            int32_t iv = v != v ? 0 : v >= 2147483647.0f ? INT32_MAX : v <= -2147483648.0f ? INT32_MIN : (int32_t) v;
            ((int32_t *) piece)[i] = iv;
        }
    }
}

/* ---- staging --------------------------------------------------------------------------------------------- */

/*
 * BF16 pieces (and FP32 operands rounded for a bf16 matmul) are computed on through fp32 scratch. Ops run
 * device by device, so scratch that ran out on device 1 after device 0's pieces were written would leave the
 * outputs half written, against the ABI's "a failing call changes nothing". op_begin therefore reserves, before
 * any piece is touched, all the scratch one staging of the op can ask for (one device's tensors, or a whole
 * group's for the collectives: GROUP_STAGING): a per-thread arena, kept between calls, so steady state
 * allocates nothing per op. stage() takes from it and staging_end gives it back; a staging that would go past
 * the reserve (a bug in the bound) mallocs as before and says so in its entry.
 */
static __thread float *t_scratch;
static __thread int64_t t_scratch_cap, t_scratch_used;
static __thread stage_entry *t_entries;
static __thread int t_entries_cap, t_entries_used;
static __thread int t_arena_registered;
#define SCRATCH_KEPT (((int64_t) 16) << 20) /* floats the arena keeps between calls (64 MiB) */

/* A thread's arena goes with the thread: a key whose destructor runs at thread exit (TLS still readable). */
static pthread_key_t g_arena_key;
static pthread_once_t g_arena_once = PTHREAD_ONCE_INIT;

static void arena_free(void *unused) {
    (void) unused;
    free(t_scratch);
    free(t_entries);
    t_scratch = NULL;
    t_entries = NULL;
    t_scratch_cap = 0;
    t_entries_cap = 0;
}

static void arena_key_create(void) {
    pthread_key_create(&g_arena_key, arena_free);
}

int staging_reserve(int64_t floats, int entries) {
    if (!t_arena_registered) {
        pthread_once(&g_arena_once, arena_key_create);
        pthread_setspecific(g_arena_key, &g_arena_once); /* any non-null value: the destructor then runs */
        t_arena_registered = 1;
    }
    if (floats > t_scratch_cap) {
        free(t_scratch);
        t_scratch_cap = 0;
        t_scratch = malloc(sizeof(float) * (size_t) floats);
        if (!t_scratch) return err_host(4 * floats);
        t_scratch_cap = floats;
    }
    if (entries > t_entries_cap) {
        free(t_entries);
        t_entries_cap = 0;
        t_entries = malloc(sizeof(stage_entry) * (size_t) entries);
        if (!t_entries) return err_host((int64_t) sizeof(stage_entry) * entries);
        t_entries_cap = entries;
    }
    t_scratch_used = 0;
    t_entries_used = 0;
    return TTPIPE_OK;
}

void staging_release(void) {
    if (t_scratch_cap <= SCRATCH_KEPT) return;
    free(t_scratch);
    t_scratch = NULL;
    t_scratch_cap = 0;
}

void staging_init(staging *s) {
    s->e = t_entries + t_entries_used;
    s->n = 0;
    s->cap = t_entries_cap - t_entries_used;
    s->mark = t_scratch_used;
}

/* round: an FP32 piece is read into scratch rounded to bf16 (a bf16 matmul operand), never written. */
static float *stage(staging *s, const tv *t, int32_t device, int read, int write, int round) {
    void *piece = t->st->piece[device];
    if (t->dtype == TTPIPE_FP32 && !round) return piece;
    if (t->dtype != TTPIPE_BF16 && t->dtype != TTPIPE_FP32) {
        err(TTPIPE_E_INTERNAL, "%s: an INT32 piece staged as fp32", t->name);
        return NULL;
    }
    if (s->n == s->cap) {
        err(TTPIPE_E_INTERNAL, "%s: more pieces staged at once than op_begin reserved (%d)", t->name, s->cap);
        return NULL;
    }
    int64_t n = t->numel > 0 ? t->numel : 1;
    float *scratch;
    int owned = t_scratch_used + n > t_scratch_cap;
    if (owned) {
        scratch = malloc(sizeof(float) * (size_t) n);
        if (!scratch) {
            err_host(4 * n);
            return NULL;
        }
    } else {
        scratch = t_scratch + t_scratch_used;
        t_scratch_used += n;
    }
    if (read && t->dtype == TTPIPE_FP32) {
        const float *f = piece;
        for (int64_t i = 0; i < t->numel; i++) scratch[i] = bf16_to_float(bf16_from_float(f[i]));
    } else if (read) {
        const uint16_t *h = piece;
        for (int64_t i = 0; i < t->numel; i++) scratch[i] = bf16_to_float(h[i]);
    }
    s->e[s->n++] = (stage_entry) {scratch, write && t->dtype == TTPIPE_BF16 ? piece : NULL, t->numel, owned};
    t_entries_used++;
    return scratch;
}

float *stage_read(staging *s, const tv *t, int32_t device) {
    return stage(s, t, device, 1, 0, 0);
}

float *stage_read_bf16(staging *s, const tv *t, int32_t device) {
    return stage(s, t, device, 1, 0, 1);
}

float *stage_write(staging *s, const tv *t, int32_t device) {
    return stage(s, t, device, 0, 1, 0);
}

float *stage_update(staging *s, const tv *t, int32_t device) {
    return stage(s, t, device, 1, 1, 0);
}

void staging_end(staging *s, int write_back) {
    for (int i = 0; i < s->n; i++) {
        stage_entry *e = &s->e[i];
        if (write_back && e->target) {
            uint16_t *h = e->target;
            for (int64_t j = 0; j < e->n; j++) h[j] = bf16_from_float(e->scratch[j]);
        }
        if (e->owned) free(e->scratch);
    }
    t_entries_used -= s->n;
    t_scratch_used = s->mark;
    s->n = 0;
}

int32_t *int_piece(const tv *t, int32_t device) {
    return t->st->piece[device];
}

int cond_wait_until(pthread_cond_t *cond, const struct timespec *deadline) {
    return pthread_cond_timedwait(cond, &g_lock, deadline);
}
