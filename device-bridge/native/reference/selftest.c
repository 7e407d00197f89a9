/*
 * A self-test of the reference library under AddressSanitizer and UndefinedBehaviorSanitizer: bad
 * input of every kind must come back as a status code, never as a crash or a sanitizer report.
 * Not part of the Maven build (the Java tests cover the behaviour); run it after changing the C:
 *
 *   cd device-bridge/native/reference
 *   gcc -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -pthread \
 *       -Wall -Wextra -Werror selftest.c core.c tensors.c kernels.c collectives.c -lm -o /tmp/ttpipe_selftest \
 *     && /tmp/ttpipe_selftest
 *
 * and the same with -fsanitize=thread instead of address,undefined for data races.
 */
#include "../ttpipe_bridge.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define EXPECT(cond)                                                                   \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: expected %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
                    ttpipe_last_error());                                              \
            failures++;                                                                \
        }                                                                              \
    } while (0)

#define OK(call) EXPECT((call) == TTPIPE_OK)
#define FAILS(call, status) EXPECT((call) == (status))

static ttpipe_tensor alloc(ttpipe_submesh sub, int32_t dtype, int32_t rank, const int32_t *dims) {
    ttpipe_tensor t = 0;
    OK(ttpipe_tensor_alloc(sub, dtype, rank, dims, &t));
    return t;
}

static void bad_input(void) {
    ttpipe_mesh mesh;
    OK(ttpipe_mesh_open(1, 2, 1 << 20, &mesh));
    ttpipe_submesh subs[2];
    int32_t count = 0;
    FAILS(ttpipe_mesh_create_submeshes(mesh, 1, 3, subs, 2, &count), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_mesh_create_submeshes(mesh, 1, 1, subs, 1, &count), TTPIPE_E_INVALID_ARGUMENT);
    OK(ttpipe_mesh_create_submeshes(mesh, 1, 1, subs, 2, &count));
    ttpipe_submesh whole;
    OK(ttpipe_mesh_create_submeshes(mesh, 1, 2, &whole, 1, &count));

    int32_t d23[] = {2, 3}, d45[] = {4, 5}, d25[] = {2, 5}, d6[] = {6};
    ttpipe_tensor a = alloc(whole, TTPIPE_FP32, 2, d23), b = alloc(whole, TTPIPE_FP32, 2, d45),
                  out = alloc(whole, TTPIPE_FP32, 2, d25);
    FAILS(ttpipe_matmul(out, a, b, 0, 0, 1, 0), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_matmul(out, a, a, 0, 1, 1, 0), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_add(out, a, b), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_layernorm(a, b, out, a, a, 0, 1e-5f), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_softmax(out, a, 1, 1, 5, -1), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_rope(a, a, 1e4f, 0, -1, -1), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_all_gather(out, a, 0, 1), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_all_gather(out, a, 9, 1), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_reduce_scatter(out, a, 0, 3), TTPIPE_E_OUT_OF_RANGE);
    FAILS(ttpipe_sum(out, a, -7), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_permute(out, a, 2, (int32_t[]){0, 0}), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_permute(out, a, 2, NULL), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_dropout(a, a, 0.5f, 1, 0, 2, d45, -1, -1), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_dropout(a, a, 1.5f, 1, 0, 2, d23, -1, -1), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_adamw(a, a, a, a, 1, 0.9f, 0.99f, 1e-8f, 0, 1, 1), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_sgd(a, b, 0, 1, 0.9f, 0, 0, 0, 1, 1), TTPIPE_E_INVALID_ARGUMENT);
    float data[6] = {1, 2, 3, 4, 5, 6};
    FAILS(ttpipe_tensor_write(a, 2, d23, -1, -1, data, 5), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_tensor_write(a, 2, d23, -1, -1, NULL, 6), TTPIPE_E_INVALID_ARGUMENT);
    OK(ttpipe_tensor_write(a, 2, d23, 0, -1, data, 6));                                 /* rows over a 1-row axis */
    FAILS(ttpipe_tensor_write(a, 2, d23, -1, 0, data, 6), TTPIPE_E_INVALID_ARGUMENT);   /* shard rows over 2: local 1 != 2 */
    FAILS(ttpipe_tensor_write(a, 2, d23, -2, -1, data, 6), TTPIPE_E_INVALID_ARGUMENT);  /* partial from host */
    FAILS(ttpipe_tensor_write(a, 1, d6, -1, -1, data, 6), TTPIPE_E_INVALID_ARGUMENT);   /* rank differs */
    OK(ttpipe_tensor_write(a, 2, d23, -1, -1, data, 6));
    FAILS(ttpipe_tensor_read_local(a, 5, data, 6), TTPIPE_E_OUT_OF_RANGE);
    FAILS(ttpipe_tensor_read_ints(a, 2, d23, -1, -1, (int32_t *) data, 6), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_tensor_alloc(whole, 7, 2, d23, &out), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_tensor_alloc(whole, 0, 99, d23, &out), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_tensor_alloc(whole, 0, 2, NULL, &out), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_tensor_alloc(whole, 0, 2, (int32_t[]){1 << 30, 1 << 30}, &out), TTPIPE_E_INVALID_ARGUMENT);
    FAILS(ttpipe_tensor_alloc(whole, 0, 2, (int32_t[]){1 << 20, 1 << 5}, &out), TTPIPE_E_OUT_OF_MEMORY);
    int64_t oom[4];
    OK(ttpipe_last_oom(oom));
    EXPECT(oom[1] == (int64_t) 4 << 25 && oom[3] == 1 << 20);

    /* ids out of range are found before anything is written */
    int32_t d2[] = {2}, d42[] = {4, 2}, d22[] = {2, 2};
    ttpipe_tensor ids = alloc(whole, TTPIPE_INT32, 1, d2), table = alloc(whole, TTPIPE_FP32, 2, d42),
                  emb = alloc(whole, TTPIPE_FP32, 2, d22);
    OK(ttpipe_tensor_write_ints(ids, 1, d2, -1, -1, (int32_t[]){1, 9}, 2));
    OK(ttpipe_tensor_fill(table, 0));
    FAILS(ttpipe_embedding(emb, ids, table, -1, -1), TTPIPE_E_OUT_OF_RANGE);
    FAILS(ttpipe_embedding_backward(ids, emb, table, -1, -1, 1), TTPIPE_E_OUT_OF_RANGE);
    FAILS(ttpipe_embedding(emb, ids, table, 0, -1), TTPIPE_E_OUT_OF_RANGE); /* vocab-parallel on a 1-row axis */
    FAILS(ttpipe_embedding(emb, ids, table, -1, 0), TTPIPE_E_OUT_OF_RANGE); /* rows over 2 devices: V = 8 */
    OK(ttpipe_tensor_write_ints(ids, 1, d2, -1, -1, (int32_t[]){1, 7}, 2));
    OK(ttpipe_embedding(emb, ids, table, -1, 0));

    /* handles: null, stale, double free, kinds, forged */
    FAILS(ttpipe_gelu(0, 0), TTPIPE_E_INVALID_HANDLE);
    ttpipe_tensor t = alloc(whole, TTPIPE_BF16, 1, d2);
    OK(ttpipe_tensor_free(t));
    FAILS(ttpipe_tensor_free(t), TTPIPE_E_INVALID_HANDLE);
    FAILS(ttpipe_tensor_fill(t, 1), TTPIPE_E_INVALID_HANDLE);
    FAILS(ttpipe_tensor_fill(mesh, 1), TTPIPE_E_INVALID_HANDLE);
    FAILS(ttpipe_tensor_fill(whole, 1), TTPIPE_E_INVALID_HANDLE);
    FAILS(ttpipe_tensor_fill(~(uint64_t) 0, 1), TTPIPE_E_INVALID_HANDLE);
    FAILS(ttpipe_tensor_fill(((uint64_t) 3 << 56) | 0xFFFFFF, 1), TTPIPE_E_INVALID_HANDLE);
    FAILS(ttpipe_socket_send(a, a), TTPIPE_E_INVALID_HANDLE);
    FAILS(ttpipe_mesh_close(whole), TTPIPE_E_INVALID_HANDLE);

    /* tensors of two submeshes in one op */
    ttpipe_tensor left = alloc(subs[0], TTPIPE_FP32, 1, d2), right = alloc(subs[1], TTPIPE_FP32, 1, d2);
    FAILS(ttpipe_add(left, left, right), TTPIPE_E_INVALID_ARGUMENT);
    OK(ttpipe_tensor_copy(right, left)); /* device to device between submeshes of one shape */
    FAILS(ttpipe_tensor_copy(a, left), TTPIPE_E_INVALID_ARGUMENT);

    int64_t live = ttpipe_live_handles();
    EXPECT(live > 0);
    OK(ttpipe_mesh_close(mesh)); /* frees every tensor left */
    EXPECT(ttpipe_live_handles() == 0);
    EXPECT(ttpipe_host_bytes() == 0);
    FAILS(ttpipe_tensor_free(a), TTPIPE_E_INVALID_HANDLE);
    FAILS(ttpipe_mesh_close(mesh), TTPIPE_E_INVALID_HANDLE);
}

/*
 * BF16 ops compute through scratch that op_begin reserves for the whole op before any piece is written:
 * a row op (one device's tensors at a time) and the collectives (a whole group's at once) on four
 * devices, in place too, with the sanitizer watching the reserve's bounds.
 */
static void bf16_staging(void) {
    ttpipe_mesh mesh;
    OK(ttpipe_mesh_open(1, 4, 1 << 20, &mesh));
    ttpipe_submesh sub;
    int32_t count;
    OK(ttpipe_mesh_create_submeshes(mesh, 1, 4, &sub, 1, &count));
    int32_t d2[] = {3, 8}, d1[] = {3}, dg[] = {8}, dq[] = {3, 2};
    ttpipe_tensor x = alloc(sub, TTPIPE_BF16, 2, d2), y = alloc(sub, TTPIPE_BF16, 2, d2);
    ttpipe_tensor mean = alloc(sub, TTPIPE_FP32, 1, d1), rstd = alloc(sub, TTPIPE_BF16, 1, d1);
    ttpipe_tensor gamma = alloc(sub, TTPIPE_BF16, 1, dg), quarter = alloc(sub, TTPIPE_BF16, 2, dq);
    float xs[24];
    for (int i = 0; i < 24; i++) xs[i] = (float) (i % 8); /* each row 0..7 */
    OK(ttpipe_tensor_write(x, 2, d2, TTPIPE_REPLICATE, TTPIPE_REPLICATE, xs, 24));
    OK(ttpipe_tensor_fill(gamma, 1.0f));
    OK(ttpipe_layernorm(y, mean, rstd, x, gamma, 0, 1e-5f));
    float m[3];
    OK(ttpipe_tensor_read_local(mean, 3, m, 3));
    EXPECT(m[0] == 3.5f && m[2] == 3.5f);
    OK(ttpipe_all_reduce(x, x, 1, TTPIPE_REDUCE_SUM)); /* in place: every device's row becomes 4 * (0..7) */
    OK(ttpipe_reduce_scatter(quarter, x, 1, 1));        /* device j: 4 * 4 * (2j, 2j + 1) */
    float q[6];
    OK(ttpipe_tensor_read_local(quarter, 3, q, 6));
    EXPECT(q[0] == 96.0f && q[1] == 112.0f && q[4] == 96.0f);
    OK(ttpipe_mesh_close(mesh));
    EXPECT(ttpipe_live_handles() == 0);
}

typedef struct {
    ttpipe_socket sock;
    int status;
} waiter_arg;

static void *recv_waiting(void *p) {
    waiter_arg *w = p;
    ttpipe_tensor r = 0;
    w->status = ttpipe_socket_recv(w->sock, 60 * 1000, &r);
    return NULL;
}

/* Closing a socket while a receiver waits on it: the receiver returns TTPIPE_E_CLOSED (the socket is freed under it). */
static void close_socket_under_recv(void) {
    ttpipe_mesh mesh;
    OK(ttpipe_mesh_open(1, 2, 1 << 20, &mesh));
    ttpipe_submesh subs[2];
    int32_t count;
    OK(ttpipe_mesh_create_submeshes(mesh, 1, 1, subs, 2, &count));
    waiter_arg w = {0, -1};
    OK(ttpipe_socket_open(subs[0], subs[1], &w.sock));
    pthread_t thread;
    pthread_create(&thread, NULL, recv_waiting, &w);
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    OK(ttpipe_socket_close(w.sock));
    pthread_join(thread, NULL);
    EXPECT(w.status == TTPIPE_E_CLOSED);
    OK(ttpipe_mesh_close(mesh));
    EXPECT(ttpipe_live_handles() == 0);
}

typedef struct {
    ttpipe_submesh sub;
    ttpipe_socket sock;
    int role; /* 0 compute, 1 send, 2 receive */
    int stopped_cleanly;
} worker_arg;

static void *worker(void *p) {
    worker_arg *w = p;
    int32_t dims[] = {32, 32};
    for (int i = 0;; i++) {
        ttpipe_tensor x = 0, y = 0;
        int s = ttpipe_tensor_alloc(w->sub, i % 2 ? TTPIPE_BF16 : TTPIPE_FP32, 2, dims, &x);
        if (!s) s = ttpipe_tensor_fill(x, 0.5f);
        if (!s && w->role == 0) s = ttpipe_tensor_alloc(w->sub, TTPIPE_FP32, 2, dims, &y);
        if (!s && w->role == 0) s = ttpipe_matmul(y, x, x, 0, 1, 1, 0);
        if (!s && w->role == 0) s = ttpipe_all_reduce(y, y, 1, TTPIPE_REDUCE_MEAN);
        if (!s && w->role == 1) s = ttpipe_socket_send(w->sock, x);
        if (!s && w->role == 2) {
            ttpipe_tensor r = 0;
            s = ttpipe_socket_recv(w->sock, 5, &r);
            if (!s && r) s = ttpipe_tensor_free(r);
        }
        if (x) ttpipe_tensor_free(x);
        if (y) ttpipe_tensor_free(y);
        if (s) {
            w->stopped_cleanly = s == TTPIPE_E_CLOSED || s == TTPIPE_E_INVALID_HANDLE;
            return NULL;
        }
    }
}

/* Closing a mesh while other threads run ops and sockets on it: they stop with a status, nothing leaks. */
static void close_under_load(void) {
    ttpipe_mesh mesh;
    OK(ttpipe_mesh_open(2, 2, 1 << 30, &mesh));
    ttpipe_submesh subs[2];
    int32_t count;
    OK(ttpipe_mesh_create_submeshes(mesh, 1, 2, subs, 2, &count));
    ttpipe_socket sock;
    OK(ttpipe_socket_open(subs[0], subs[1], &sock));
    worker_arg args[3] = {{subs[0], sock, 0, 0}, {subs[0], sock, 1, 0}, {subs[1], sock, 2, 0}};
    pthread_t threads[3];
    for (int i = 0; i < 3; i++) pthread_create(&threads[i], NULL, worker, &args[i]);
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    OK(ttpipe_mesh_close(mesh));
    for (int i = 0; i < 3; i++) {
        pthread_join(threads[i], NULL);
        EXPECT(args[i].stopped_cleanly);
    }
    FAILS(ttpipe_socket_close(sock), TTPIPE_E_INVALID_HANDLE);
    EXPECT(ttpipe_live_handles() == 0);
    EXPECT(ttpipe_host_bytes() == 0);
}

int main(void) {
    EXPECT(ttpipe_abi_version() == TTPIPE_ABI_VERSION);
    EXPECT(ttpipe_noop() == TTPIPE_OK);
    bad_input();
    bf16_staging();
    close_socket_under_recv();
    for (int i = 0; i < 5; i++) close_under_load();
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("ttpipe reference library self-test passed\n");
    return 0;
}
