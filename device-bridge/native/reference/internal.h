/*
 * The reference implementation's shared internals: the objects behind handles, the handle table,
 * the op context that resolves handles safely, fp32 staging of BF16 pieces, and error reporting.
 *
 * Locking: one process-wide mutex (g_lock) guards the handle table, every object's bookkeeping
 * (reference counts, accounting, socket queues) and mesh state. Kernels run outside it: an op
 * resolves its handles under the lock into snapshots (tv) that retain the tensors' storage and
 * marks its mesh busy (inflight); ttpipe_mesh_close waits until no call is busy on the mesh before
 * freeing anything. So a concurrent free or close never pulls memory from under a running kernel.
 */
#ifndef TTPIPE_REFERENCE_INTERNAL_H
#define TTPIPE_REFERENCE_INTERNAL_H

#include "../ttpipe_bridge.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MAX_MESH_DEVICES 4096
#define MAX_ELEMENTS (((int64_t) 1) << 40)

typedef enum { K_FREE = 0, K_MESH = 1, K_SUBMESH = 2, K_TENSOR = 3, K_SOCKET = 4 } kind;

typedef struct mesh mesh;
typedef struct submesh submesh;
typedef struct storage storage;
typedef struct tensor tensor;
typedef struct sock sock;

struct mesh {
    int32_t rows, cols, n;
    int64_t capacity;
    int64_t *in_use, *peak;
    int closing;           /* set by ttpipe_mesh_close: no new call may start */
    int inflight;          /* calls running on this mesh */
    pthread_cond_t idle;   /* signalled when inflight drops to 0 while closing */
    sock *sockets;         /* every socket struct of this mesh, closed ones still in use included */
    uint64_t handle;
};

struct submesh {
    mesh *m;
    int32_t row0, col0, rows, cols, n;
    int32_t *dev; /* mesh device id of each device, row-major in the submesh */
    uint64_t handle;
};

/* One piece per device of a submesh, shared by a tensor and its views (and ops in flight). */
struct storage {
    mesh *m;
    int32_t n;
    int32_t *dev;   /* the device ids charged */
    int64_t bytes;  /* per device */
    void **piece;
    int refs;
};

struct tensor {
    storage *st;
    submesh *sub;
    int32_t dtype, rank;
    int32_t dims[TTPIPE_MAX_RANK];
    int64_t numel;
    uint64_t handle; /* 0 while queued in a socket */
};

struct sock {
    mesh *m;
    submesh *from, *to;
    tensor **queue; /* ring buffer */
    int head, len, cap;
    pthread_cond_t arrived;
    int closed;
    int busy;       /* calls using this struct; a closed socket is freed when it drops to 0 */
    sock *next;     /* in m->sockets */
    uint64_t handle;
};

/* A tensor as an op sees it: a snapshot that holds a reference to the storage. */
typedef struct {
    storage *st;   /* null: an optional tensor that was not given */
    submesh *sub;
    int32_t dtype, rank;
    int32_t dims[TTPIPE_MAX_RANK];
    int64_t numel;
    const char *name;
} tv;

#define OP_MAX_TENSORS 6

typedef struct {
    mesh *m;
    tv t[OP_MAX_TENSORS];
    int nt;
} opctx;

/* op_begin flags */
#define SAME_SUBMESH 1  /* every given tensor lives on the first one's submesh */
#define GROUP_STAGING 2 /* one staging holds the pieces of every device of a group at once (collectives) */

/* ---- errors (thread-local, prefixed with the entry's name) ------------------------------------ */
void enter_fn(const char *fn);
const char *current_fn(void);
int err(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int err_oom(const mesh *m, int32_t device, int64_t requested);
int err_host(int64_t bytes);
void format_dims(char *buf, size_t cap, int32_t rank, const int32_t *dims);

/* ---- lock and handles ------------------------------------------------------------------------- */
void lock(void);
void unlock(void);
uint64_t handle_new(kind k, void *obj);           /* 0 when the table is full (error set) */
int handle_get(uint64_t h, kind k, const char *what, void **obj);
void handle_release(uint64_t h);
void for_each_object(kind k, void (*f)(void *obj, void *arg), void *arg);
extern int64_t g_host_bytes;

/* ---- accounting and storage (under the lock) ---------------------------------------------------- */
int charge(mesh *m, const int32_t *dev, int32_t n, int64_t bytes);
void refund(mesh *m, const int32_t *dev, int32_t n, int64_t bytes);
int storage_new(submesh *sub, int64_t bytes, storage **out);
void storage_release(storage *st);
void tensor_destroy(tensor *t); /* releases the storage, frees the struct (not the handle) */
void sock_unlink_and_destroy(sock *s); /* under the lock, when a closed socket is no longer busy */
int tensor_new(submesh *sub, int32_t dtype, int32_t rank, const int32_t *dims, tensor **out);

/* ---- op context --------------------------------------------------------------------------------- */
int op_begin(opctx *c, int n, const uint64_t *handles, const char *const *names, unsigned optional_mask,
             unsigned flags);
int op_end(opctx *c, int status);
int mesh_enter(mesh *m);  /* under the lock */
void mesh_leave(mesh *m); /* under the lock */

/* ---- shapes and dtypes ------------------------------------------------------------------------- */
int esize(int32_t dtype);
int check_dtype(int32_t dtype);
int check_dims(int32_t rank, const int32_t *dims, int64_t *numel);
int need_float(const tv *t);
int need_int(const tv *t);
int same_dims(const tv *a, const tv *b);
int same_dtype(const tv *a, const tv *b);
int64_t rows_of(const tv *t);  /* numel / last dim (1 for rank 0) */
int32_t last_of(const tv *t);  /* last dim (1 for rank 0) */
int need_rank(const tv *t, int min);
int dim_index(const tv *t, int32_t dim, int32_t *out);
void around_dim(const int32_t *dims, int32_t rank, int32_t dim, int64_t *outer, int64_t *k, int64_t *inner);
int check_placements(const submesh *sub, int32_t rank, int32_t p0, int32_t p1, int allow_partial);
int check_logical(const tv *t, int32_t rank, const int32_t *dims, int32_t p0, int32_t p1, int allow_partial);
int32_t coord_along(const submesh *sub, int32_t device, int32_t axis);
int32_t axis_size(const submesh *sub, int32_t axis);
int32_t axis_of_dim(int32_t p0, int32_t p1, int32_t dim); /* the mesh axis sharding dim, or -1 */
int distinct_piece(const submesh *sub, int32_t p0, int32_t p1, int32_t device);
int32_t peer(const submesh *sub, int32_t device, int32_t axis, int32_t j);

/* Where a device's piece sits in the logical tensor, row by row (rows of the last dim). */
typedef struct {
    int32_t outer;
    int32_t local[TTPIPE_MAX_RANK];
    int64_t stride[TTPIPE_MAX_RANK];
    int64_t base;
    int64_t rows;
    int64_t row_length;
} lpiece;
void lpiece_init(lpiece *lp, int32_t rank, const int32_t *dims, const int32_t *local, int32_t p0, int32_t p1,
                 const submesh *sub, int32_t device);
int64_t lpiece_row(const lpiece *lp, int64_t r);

/* ---- bf16 and fast exp --------------------------------------------------------------------------- */
static inline uint16_t bf16_from_float(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) return (uint16_t) ((bits >> 16) | 0x0040u);
    uint32_t lsb = (bits >> 16) & 1u;
    return (uint16_t) ((bits + 0x7fffu + lsb) >> 16);
}

static inline float bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t) h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* fexp: exp in float precision as the cpu backend computes it (Cody-Waite reduction, Cephes polynomial). */
#include "../fast_exp.h"

static inline float fsigmoid(float x) {
    return 1.0f / (1.0f + fexp(-x));
}

float read_elem(const void *piece, int32_t dtype, int64_t i);
void write_elem(void *piece, int32_t dtype, int64_t i, float v);

/*
 * fp32 access to pieces whatever their dtype: FP32 pieces directly, BF16 through scratch that
 * staging_end converts back (for written pieces) and gives back. The scratch comes from a per-thread
 * arena that op_begin reserved for the whole op before any piece was written (staging_reserve), so an
 * access does not fail once an op has started writing. One staging at a time per thread; it must end
 * (staging_end) before the next begins.
 */
typedef struct {
    float *scratch;
    void *target;  /* BF16 piece to write back, or null */
    int64_t n;
    int owned;     /* scratch malloc'd past the reserve (freed by staging_end) */
} stage_entry;
typedef struct {
    stage_entry *e;
    int n, cap;
    int64_t mark;  /* arena floats in use when the staging began */
} staging;
int staging_reserve(int64_t floats, int entries); /* by op_begin: error set when host memory runs out */
void staging_release(void);                        /* by op_end: gives a large arena back */
void staging_init(staging *s);
float *stage_read(staging *s, const tv *t, int32_t device);
/* As stage_read, but at bf16 precision: an FP32 piece is rounded (to nearest even) into scratch. */
float *stage_read_bf16(staging *s, const tv *t, int32_t device);
float *stage_write(staging *s, const tv *t, int32_t device);
float *stage_update(staging *s, const tv *t, int32_t device);
void staging_end(staging *s, int write_back);
int32_t *int_piece(const tv *t, int32_t device);

#endif
