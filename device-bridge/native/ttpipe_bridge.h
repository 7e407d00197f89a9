/*
 * ttpipe_bridge.h: the C ABI between ttpipe (Java, bound with JNA direct mapping) and a device
 * implementation. Two implementations exist:
 *
 *   reference/  plain C: fp32 math on emulated devices in host memory, with per-device capacity
 *               accounting, collectives and sockets in process. Built by Maven everywhere.
 *   ttnn/       C++ over TTNN (tt-metal), built with CMake where TT_METAL_HOME points at a build.
 *
 * Conventions
 *   - Every object is an opaque 64-bit handle; 0 is the null handle. Handles carry a kind and a
 *     generation: a freed (stale) handle, a handle of another kind, or one never issued is rejected
 *     with TTPIPE_E_INVALID_HANDLE, never dereferenced.
 *   - Every entry returns a status (TTPIPE_OK = 0, else a TTPIPE_E_* code) unless stated; on
 *     failure ttpipe_last_error() gives a one-line message starting with the function's name, for
 *     the calling thread (thread-local), and nothing was changed (no output written, nothing
 *     allocated). Results come back through out-parameters.
 *   - A tensor handle is a tensor on a submesh: one local piece per device of the submesh, all of
 *     the same local shape (the logical shape with sharded dimensions divided by the mesh axis
 *     size) and dtype, row-major. Layouts (how pieces relate to the logical tensor) belong to the
 *     caller; the few entries that need them take a placement per mesh axis (p0, p1):
 *     TTPIPE_REPLICATE, TTPIPE_PARTIAL, or a tensor dimension d >= 0 (sharded on that axis).
 *   - Devices of a submesh are numbered row-major within it; the device at (r, c) has position r
 *     along mesh axis 0 and c along axis 1. Device ids (ttpipe_device_memory) are row-major in the
 *     whole mesh.
 *   - Ops run SPMD on every device's pieces. Outputs are passed in, already allocated with the
 *     right local shape; inputs are never modified unless the entry says "in place". Compute is
 *     fp32; BF16 pieces are converted on read and rounded (to nearest even) on write.
 *   - Ownership: the caller owns every handle it receives and frees it once: tensors with
 *     ttpipe_tensor_free, sockets with ttpipe_socket_close, meshes with ttpipe_mesh_close (which
 *     also frees every submesh, tensor and socket of the mesh). Submeshes live as long as their
 *     mesh. A view (ttpipe_tensor_view) is a handle of its own sharing the pieces; the memory is
 *     released when the last handle to it is freed.
 *   - Thread-safety: entries may be called from any thread. Ops on one submesh are issued by one
 *     thread at a time; different submeshes may run concurrently. ttpipe_mesh_close waits for calls
 *     in progress on that mesh; calls racing with it fail with TTPIPE_E_CLOSED.
 */
#ifndef TTPIPE_BRIDGE_H
#define TTPIPE_BRIDGE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped on any incompatible change of this header; checked by ttpipe when it loads a library. */
#define TTPIPE_ABI_VERSION 1

#if defined(__GNUC__)
#define TTPIPE_API __attribute__((visibility("default")))
#else
#define TTPIPE_API
#endif

typedef uint64_t ttpipe_mesh;
typedef uint64_t ttpipe_submesh;
typedef uint64_t ttpipe_tensor;
typedef uint64_t ttpipe_socket;

/* ---- status codes ------------------------------------------------------------------------- */
#define TTPIPE_OK 0
#define TTPIPE_E_INVALID_ARGUMENT 1 /* shapes, dtypes, ranks or values that do not fit */
#define TTPIPE_E_INVALID_HANDLE 2   /* null, never issued, freed (stale) or of another kind */
#define TTPIPE_E_OUT_OF_MEMORY 3    /* a device's capacity would be exceeded: see ttpipe_last_oom */
#define TTPIPE_E_CLOSED 4           /* the mesh or socket is closed (or closing) */
#define TTPIPE_E_OUT_OF_RANGE 5     /* an index in the data (token id, target) or an argument out of range */
#define TTPIPE_E_HOST 6             /* the host failed (host memory) */
#define TTPIPE_E_UNSUPPORTED 7      /* this implementation lacks the op or combination */
#define TTPIPE_E_INTERNAL 8         /* a bug in the implementation, or an error from the runtime below */

/* ---- dtypes, placements, reductions ---------------------------------------------------------- */
#define TTPIPE_FP32 0
#define TTPIPE_BF16 1
#define TTPIPE_INT32 2

#define TTPIPE_REPLICATE (-1)
#define TTPIPE_PARTIAL (-2)

#define TTPIPE_REDUCE_SUM 0
#define TTPIPE_REDUCE_MEAN 1

#define TTPIPE_MAX_RANK 8

/* ---- library ------------------------------------------------------------------------------ */

/* TTPIPE_ABI_VERSION of the header the library was built from. Never fails. */
TTPIPE_API int32_t ttpipe_abi_version(void);

/* What this library is, e.g. "reference (fp32 C, emulated devices)" or "ttnn (tt-metal v0.62.2)". Static string. */
TTPIPE_API const char *ttpipe_implementation(void);

/* The calling thread's last error message ("" if none). Valid until the thread's next failing call. */
TTPIPE_API const char *ttpipe_last_error(void);

/*
 * Details of the calling thread's last TTPIPE_E_OUT_OF_MEMORY: out[0] device id, out[1] bytes
 * requested, out[2] bytes in use, out[3] capacity; -1 for a figure the implementation cannot tell,
 * and all four -1 before any. TTPIPE_E_INVALID_ARGUMENT if out is null.
 */
TTPIPE_API int32_t ttpipe_last_oom(int64_t *out);

/* Does nothing and returns TTPIPE_OK: measures the cost of one call through the binding. */
TTPIPE_API int32_t ttpipe_noop(void);

/* Handles currently live (meshes, submeshes, tensors, sockets) over the process. Never fails. */
TTPIPE_API int64_t ttpipe_live_handles(void);

/* Host bytes this library holds for device memory (emulated pieces; 0 on hardware). Never fails. */
TTPIPE_API int64_t ttpipe_host_bytes(void);

/* ---- mesh, submeshes, devices ----------------------------------------------------------------- */

/*
 * Opens a rows x cols mesh (TTNN open_mesh_device). capacity_per_device: bytes each device may hold
 * (the reference enforces it; hardware has its own DRAM size and ignores it).
 */
TTPIPE_API int32_t ttpipe_mesh_open(int32_t rows, int32_t cols, int64_t capacity_per_device, ttpipe_mesh *out);

/* Closes the mesh: waits for calls in progress on it, then frees all its submeshes, tensors and sockets. */
TTPIPE_API int32_t ttpipe_mesh_close(ttpipe_mesh mesh);

/*
 * Tiles the mesh with submeshes of rows x cols, row-major (TTNN MeshDevice::create_submeshes); writes
 * the handles to out[0 .. count) and the count to *count. capacity is the length of out.
 */
TTPIPE_API int32_t ttpipe_mesh_create_submeshes(ttpipe_mesh mesh, int32_t rows, int32_t cols, ttpipe_submesh *out,
                                               int32_t capacity, int32_t *count);

/* out[0] first row, out[1] first column (in the mesh), out[2] rows, out[3] columns. */
TTPIPE_API int32_t ttpipe_submesh_info(ttpipe_submesh submesh, int32_t *out);

/* Waits until every op issued on the submesh has finished. */
TTPIPE_API int32_t ttpipe_submesh_synchronize(ttpipe_submesh submesh);

/* Device memory: out[0] bytes in use, out[1] high-water mark, out[2] capacity. */
TTPIPE_API int32_t ttpipe_device_memory(ttpipe_mesh mesh, int32_t device, int64_t *out);

/* Forgets the device's high-water mark (it becomes the bytes in use). */
TTPIPE_API int32_t ttpipe_device_reset_peak(ttpipe_mesh mesh, int32_t device);

/* ---- tensors ------------------------------------------------------------------------------ */

/* A tensor of local shape dims[0 .. rank) on every device of the submesh, contents undefined. */
TTPIPE_API int32_t ttpipe_tensor_alloc(ttpipe_submesh submesh, int32_t dtype, int32_t rank, const int32_t *dims,
                                       ttpipe_tensor *out);

/* Frees the handle (its pieces when no other view holds them). A second free is TTPIPE_E_INVALID_HANDLE. */
TTPIPE_API int32_t ttpipe_tensor_free(ttpipe_tensor tensor);

/* A new handle on the same pieces with another local shape of the same element count. */
TTPIPE_API int32_t ttpipe_tensor_view(ttpipe_tensor tensor, int32_t rank, const int32_t *dims, ttpipe_tensor *out);

/* out[0] dtype, out[1] rank, out[2 .. 2 + rank) local dims; capacity is out's length (>= 2 + rank). */
TTPIPE_API int32_t ttpipe_tensor_info(ttpipe_tensor tensor, int32_t *out, int32_t capacity);

/*
 * Host to device through a mesh mapper (TTNN distribute_tensor): data is the logical tensor of shape
 * dims[0 .. rank), count elements, row-major; placements p0, p1 (no TTPIPE_PARTIAL) say which slice
 * each device gets. The tensor's local shape must be the logical shape cut by the placements.
 * FP32/BF16 tensors take float data (ttpipe_tensor_write), INT32 tensors int data (_write_ints).
 */
TTPIPE_API int32_t ttpipe_tensor_write(ttpipe_tensor tensor, int32_t rank, const int32_t *dims, int32_t p0, int32_t p1,
                                       const float *data, int64_t count);
TTPIPE_API int32_t ttpipe_tensor_write_ints(ttpipe_tensor tensor, int32_t rank, const int32_t *dims, int32_t p0,
                                            int32_t p1, const int32_t *data, int64_t count);

/* Writes device `device`'s piece (count = the local element count), any layout (Partial addends too). */
TTPIPE_API int32_t ttpipe_tensor_write_local(ttpipe_tensor tensor, int32_t device, const float *data, int64_t count);

/*
 * Device to host through a mesh composer (TTNN aggregate_tensor): the logical tensor as fp32 (ints
 * converted by value), shards concatenated, replicas read once, TTPIPE_PARTIAL addends summed.
 * ttpipe_tensor_read_ints: INT32 tensors only, no TTPIPE_PARTIAL.
 */
TTPIPE_API int32_t ttpipe_tensor_read(ttpipe_tensor tensor, int32_t rank, const int32_t *dims, int32_t p0, int32_t p1,
                                      float *out, int64_t count);
TTPIPE_API int32_t ttpipe_tensor_read_ints(ttpipe_tensor tensor, int32_t rank, const int32_t *dims, int32_t p0,
                                           int32_t p1, int32_t *out, int64_t count);

/* Device `device`'s piece as fp32 (count = the local element count). */
TTPIPE_API int32_t ttpipe_tensor_read_local(ttpipe_tensor tensor, int32_t device, float *out, int64_t count);

/* Every element of every piece = value (converted to the dtype; ints truncate). */
TTPIPE_API int32_t ttpipe_tensor_fill(ttpipe_tensor tensor, float value);

/*
 * dst = src piece by piece (same local element count; converts dtypes: to BF16 rounds, floats to
 * ints truncate). dst may live on another submesh of the same mesh with the same shape: device i
 * of src's submesh copies to device i of dst's (a device-to-device copy).
 */
TTPIPE_API int32_t ttpipe_tensor_copy(ttpipe_tensor dst, ttpipe_tensor src);

/* out = x with dims reordered: out dim i is x dim perm[i] (any dtype). */
TTPIPE_API int32_t ttpipe_permute(ttpipe_tensor out, ttpipe_tensor x, int32_t rank, const int32_t *perm);

/* ---- matmul ------------------------------------------------------------------------------- */

/*
 * out = alpha * op(a) @ op(b) + beta * out (TTNN matmul); op transposes the last two dims when
 * transpose_a / transpose_b is 1. a: [..., M, K] (before the transpose), b: [K, N] or [..., K, N]
 * with a's leading dims, out: [..., M, N]. beta = 0 ignores out's contents. With a BF16 operand the
 * product is a bf16 one: an FP32 operand is rounded to bf16, products are summed in fp32, and the
 * result is stored in out's dtype.
 */
TTPIPE_API int32_t ttpipe_matmul(ttpipe_tensor out, ttpipe_tensor a, ttpipe_tensor b, int32_t transpose_a,
                                 int32_t transpose_b, float alpha, float beta);

/* ---- embedding ------------------------------------------------------------------------------ */

/*
 * out[..., :] = table[ids[...], :] (TTNN embedding). The table's placements (p0, p1) say whether its
 * rows are sharded (vocab-parallel: a device's piece holds rows [offset, offset + local rows), other
 * ids give zero rows). Every id must lie in [0, V) (V: all rows over the mesh axis), checked on
 * every device before anything is written (TTPIPE_E_OUT_OF_RANGE).
 */
TTPIPE_API int32_t ttpipe_embedding(ttpipe_tensor out, ttpipe_tensor ids, ttpipe_tensor table, int32_t p0, int32_t p1);

/* d_table[ids[...], :] (+)= d_out[..., :] (TTNN embedding_bw); accumulate = 0 overwrites d_table first. */
TTPIPE_API int32_t ttpipe_embedding_backward(ttpipe_tensor ids, ttpipe_tensor d_out, ttpipe_tensor d_table, int32_t p0,
                                             int32_t p1, int32_t accumulate);

/* ---- normalisation (over the last dim) ------------------------------------------------------- */

/* y = (x - mean) * rstd * gamma + beta; writes mean and rstd ([rows], FP32). beta may be 0. */
TTPIPE_API int32_t ttpipe_layernorm(ttpipe_tensor y, ttpipe_tensor mean, ttpipe_tensor rstd, ttpipe_tensor x,
                                    ttpipe_tensor gamma, ttpipe_tensor beta, float eps);

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = gamma * dy. */
TTPIPE_API int32_t ttpipe_layernorm_backward_input(ttpipe_tensor dx, ttpipe_tensor dy, ttpipe_tensor x,
                                                   ttpipe_tensor gamma, ttpipe_tensor mean, ttpipe_tensor rstd);

/* d_gamma (+)= sum over rows of dy * xhat, d_beta (+)= sum of dy; either may be 0 (not both). */
TTPIPE_API int32_t ttpipe_layernorm_backward_weight(ttpipe_tensor dy, ttpipe_tensor x, ttpipe_tensor mean,
                                                    ttpipe_tensor rstd, ttpipe_tensor d_gamma, ttpipe_tensor d_beta,
                                                    int32_t accumulate);

/* y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps). */
TTPIPE_API int32_t ttpipe_rmsnorm(ttpipe_tensor y, ttpipe_tensor rstd, ttpipe_tensor x, ttpipe_tensor gamma, float eps);

/* dx = rstd * (g - xhat * mean(g * xhat)), g = gamma * dy, xhat = x * rstd. */
TTPIPE_API int32_t ttpipe_rmsnorm_backward_input(ttpipe_tensor dx, ttpipe_tensor dy, ttpipe_tensor x,
                                                 ttpipe_tensor gamma, ttpipe_tensor rstd);

/* d_gamma (+)= sum over rows of dy * x * rstd. */
TTPIPE_API int32_t ttpipe_rmsnorm_backward_weight(ttpipe_tensor dy, ttpipe_tensor x, ttpipe_tensor rstd,
                                                  ttpipe_tensor d_gamma, int32_t accumulate);

/* ---- softmax, activations, rotary ------------------------------------------------------------- */

/*
 * y = softmax(scale * x) over the last dim. causal = 1: x is [..., Tq, Tk] and query q sees keys
 * k <= q + Tk - Tq (masked entries are 0); (p0, p1) are x's placements, so a device whose queries
 * are a shard knows their global positions. The last dim must not be sharded.
 */
TTPIPE_API int32_t ttpipe_softmax(ttpipe_tensor y, ttpipe_tensor x, float scale, int32_t causal, int32_t p0, int32_t p1);

/* dx = scale * y * (dy - sum(dy * y)). */
TTPIPE_API int32_t ttpipe_softmax_backward(ttpipe_tensor dx, ttpipe_tensor y, ttpipe_tensor dy, float scale);

/* GELU, tanh approximation (TTNN gelu with fast_and_approximate_mode), and its backward. */
TTPIPE_API int32_t ttpipe_gelu(ttpipe_tensor out, ttpipe_tensor x);
TTPIPE_API int32_t ttpipe_gelu_backward(ttpipe_tensor dx, ttpipe_tensor dy, ttpipe_tensor x);

/* silu(x) = x * sigmoid(x), and its backward. */
TTPIPE_API int32_t ttpipe_silu(ttpipe_tensor out, ttpipe_tensor x);
TTPIPE_API int32_t ttpipe_silu_backward(ttpipe_tensor dx, ttpipe_tensor dy, ttpipe_tensor x);

/*
 * Rotary embedding on x [B, H, T, hd]: pair (2i, 2i + 1) at position t turns by t * theta^(-2i / hd);
 * inverse = 1 turns back. (p0, p1) are x's placements (T may be sharded: global positions).
 */
TTPIPE_API int32_t ttpipe_rope(ttpipe_tensor out, ttpipe_tensor x, float theta, int32_t inverse, int32_t p0, int32_t p1);

/* ---- elementwise and reductions -------------------------------------------------------------- */

/* out = a + b and out = a * b; b has a's local shape or a's trailing dims (broadcast). out may be a. */
TTPIPE_API int32_t ttpipe_add(ttpipe_tensor out, ttpipe_tensor a, ttpipe_tensor b);
TTPIPE_API int32_t ttpipe_mul(ttpipe_tensor out, ttpipe_tensor a, ttpipe_tensor b);

/* out = s * a; out may be a. */
TTPIPE_API int32_t ttpipe_scale(ttpipe_tensor out, ttpipe_tensor a, float s);

/* a += alpha * b, in place (same local shape). */
TTPIPE_API int32_t ttpipe_add_scaled(ttpipe_tensor a, ttpipe_tensor b, float alpha);

/* out[j] (+)= sum over every dim but the last of x[..., j]. */
TTPIPE_API int32_t ttpipe_sum_rows(ttpipe_tensor x, ttpipe_tensor out, int32_t accumulate);

/* out = sum of x over local dim `dim` (out: x's local shape without it, or with it as 1). */
TTPIPE_API int32_t ttpipe_sum(ttpipe_tensor out, ttpipe_tensor x, int32_t dim);

/* *out = sum of squares of the logical tensor (x's placements (p0, p1): shards added, replicas once). */
TTPIPE_API int32_t ttpipe_sum_squares(ttpipe_tensor x, int32_t p0, int32_t p1, double *out);

/* out repeats each slice of dim `dim` `repeats` times in place order (k -> k, k, ...). */
TTPIPE_API int32_t ttpipe_repeat_interleave(ttpipe_tensor out, ttpipe_tensor x, int32_t dim, int32_t repeats);

/* out sums each run of group_size slices of dim `dim` (the backward of repeat_interleave). */
TTPIPE_API int32_t ttpipe_sum_groups(ttpipe_tensor out, ttpipe_tensor x, int32_t dim, int32_t group_size);

/* ---- loss ---------------------------------------------------------------------------------- */

/*
 * Cross-entropy of logits [..., V] against INT32 targets [...]: *sum = sum over tokens whose target is
 * not ignore_index of logsumexp(row) - row[target], *count = those tokens; (p0, p1) are the logits'
 * placements (each token counted once). Targets outside [0, V) other than ignore_index:
 * TTPIPE_E_OUT_OF_RANGE.
 */
TTPIPE_API int32_t ttpipe_cross_entropy(ttpipe_tensor logits, ttpipe_tensor targets, int32_t ignore_index, int32_t p0,
                                        int32_t p1, double *sum, int64_t *count);

/* d_logits = scale * (softmax(logits) - onehot(target)); rows with ignore_index are 0. */
TTPIPE_API int32_t ttpipe_cross_entropy_backward(ttpipe_tensor d_logits, ttpipe_tensor logits, ttpipe_tensor targets,
                                                 int32_t ignore_index, float scale);

/* ---- dropout ------------------------------------------------------------------------------- */

/*
 * Inverted dropout with probability p: logical element i (row-major in the logical shape dims[0 ..
 * rank), placements p0, p1) is kept when uniform(seed, element_offset + i) >= p and then scaled by
 * 1 / (1 - p); uniform is SplitMix64's finaliser over seed + (index + 1) * 0x9E3779B97F4A7C15, top
 * 24 bits. The same function applies the same mask to a gradient (the backward).
 */
TTPIPE_API int32_t ttpipe_dropout(ttpipe_tensor out, ttpipe_tensor x, float p, int64_t seed, int64_t element_offset,
                                  int32_t rank, const int32_t *dims, int32_t p0, int32_t p1);

/* ---- optimizers (in place on every device's copy) ------------------------------------------- */

/*
 * torch.optim.AdamW: g = grad * grad_scale; param *= 1 - lr * weight_decay; m = b1 m + (1 - b1) g;
 * v = b2 v + (1 - b2) g^2; param -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps).
 */
TTPIPE_API int32_t ttpipe_adamw(ttpipe_tensor param, ttpipe_tensor grad, ttpipe_tensor exp_avg,
                                ttpipe_tensor exp_avg_sq, float lr, float beta1, float beta2, float eps,
                                float weight_decay, int32_t step, float grad_scale);

/* torch.optim.SGD with momentum, dampening and Nesterov; momentum_buffer may be 0 when momentum is 0. */
TTPIPE_API int32_t ttpipe_sgd(ttpipe_tensor param, ttpipe_tensor grad, ttpipe_tensor momentum_buffer, float lr,
                              float momentum, float dampening, float weight_decay, int32_t nesterov, int32_t step,
                              float grad_scale);

/* ---- collectives over one mesh axis of the submesh (TTNN CCL with cluster_axis) --------------- */

/* out (local dim `dim` = axis size x x's) = the concatenation of the pieces along the axis. */
TTPIPE_API int32_t ttpipe_all_gather(ttpipe_tensor out, ttpipe_tensor x, int32_t dim, int32_t axis);

/* Sums the addends along the axis and leaves slice i of dim `dim` on device i (out: x's dim / axis size). */
TTPIPE_API int32_t ttpipe_reduce_scatter(ttpipe_tensor out, ttpipe_tensor x, int32_t dim, int32_t axis);

/* Every device along the axis gets the sum (or mean) of the pieces; out may be x (in place). */
TTPIPE_API int32_t ttpipe_all_reduce(ttpipe_tensor out, ttpipe_tensor x, int32_t axis, int32_t op);

/* ---- point-to-point between submeshes (TTNN MeshSocket, send_async / recv_async) ------------- */

/* A one-way FIFO socket from one submesh to another of the same mesh and shape (device i to device i). */
TTPIPE_API int32_t ttpipe_socket_open(ttpipe_submesh from, ttpipe_submesh to, ttpipe_socket *out);

/* Copies the tensor (on the sender) to the receiver's devices and queues it; the tensor stays the caller's. */
TTPIPE_API int32_t ttpipe_socket_send(ttpipe_socket socket, ttpipe_tensor tensor);

/*
 * The oldest tensor sent, now on the receiver (the caller owns the handle); waits up to timeout_ms
 * (0: does not wait). *out = 0 with TTPIPE_OK when none arrived in time.
 */
TTPIPE_API int32_t ttpipe_socket_recv(ttpipe_socket socket, int64_t timeout_ms, ttpipe_tensor *out);

/* Closes the socket and frees the tensors still queued in it. */
TTPIPE_API int32_t ttpipe_socket_close(ttpipe_socket socket);

#ifdef __cplusplus
}
#endif

#endif /* TTPIPE_BRIDGE_H */
