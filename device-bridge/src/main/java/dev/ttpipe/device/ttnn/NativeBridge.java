package dev.ttpipe.device.ttnn;

/**
 * The C ABI of {@code device-bridge/native/ttpipe_bridge.h}, bound with JNA direct mapping
 * ({@code Native.register} by {@link BridgeLibrary}): one static native method per entry, handles
 * as {@code long}, flags as {@code int}, out-parameters as one-element arrays. Every method but the
 * few documented otherwise returns a status (0 = ok); {@link Bridge#check} turns a failing one into
 * an exception naming the function. Nothing here may be called before {@link BridgeLibrary#ensureLoaded}.
 *
 * <p>Ownership follows the header: whoever receives a handle frees it once (tensors with
 * {@link #ttpipe_tensor_free}, sockets with {@link #ttpipe_socket_close}, meshes with
 * {@link #ttpipe_mesh_close}, which frees all the rest of the mesh).
 */
final class NativeBridge {
    private NativeBridge() {
    }

    // ---- library -------------------------------------------------------------------------------
    static native int ttpipe_abi_version();

    static native String ttpipe_implementation();

    static native String ttpipe_last_error();

    static native int ttpipe_last_oom(long[] out);

    static native int ttpipe_noop();

    static native long ttpipe_live_handles();

    static native long ttpipe_host_bytes();

    // ---- mesh, submeshes, devices ----------------------------------------------------------------
    static native int ttpipe_mesh_open(int rows, int cols, long capacityPerDevice, long[] out);

    static native int ttpipe_mesh_close(long mesh);

    static native int ttpipe_mesh_create_submeshes(long mesh, int rows, int cols, long[] out, int capacity, int[] count);

    static native int ttpipe_submesh_info(long submesh, int[] out);

    static native int ttpipe_submesh_synchronize(long submesh);

    static native int ttpipe_device_memory(long mesh, int device, long[] out);

    static native int ttpipe_device_reset_peak(long mesh, int device);

    // ---- tensors -----------------------------------------------------------------------------------
    static native int ttpipe_tensor_alloc(long submesh, int dtype, int rank, int[] dims, long[] out);

    static native int ttpipe_tensor_free(long tensor);

    static native int ttpipe_tensor_view(long tensor, int rank, int[] dims, long[] out);

    static native int ttpipe_tensor_info(long tensor, int[] out, int capacity);

    static native int ttpipe_tensor_write(long tensor, int rank, int[] dims, int p0, int p1, float[] data, long count);

    static native int ttpipe_tensor_write_ints(long tensor, int rank, int[] dims, int p0, int p1, int[] data, long count);

    static native int ttpipe_tensor_write_local(long tensor, int device, float[] data, long count);

    static native int ttpipe_tensor_read(long tensor, int rank, int[] dims, int p0, int p1, float[] out, long count);

    static native int ttpipe_tensor_read_ints(long tensor, int rank, int[] dims, int p0, int p1, int[] out, long count);

    static native int ttpipe_tensor_read_local(long tensor, int device, float[] out, long count);

    static native int ttpipe_tensor_fill(long tensor, float value);

    static native int ttpipe_tensor_copy(long dst, long src);

    static native int ttpipe_permute(long out, long x, int rank, int[] perm);

    // ---- ops -----------------------------------------------------------------------------------------
    static native int ttpipe_matmul(long out, long a, long b, int transposeA, int transposeB, float alpha, float beta);

    static native int ttpipe_embedding(long out, long ids, long table, int p0, int p1);

    static native int ttpipe_embedding_backward(long ids, long dOut, long dTable, int p0, int p1, int accumulate);

    static native int ttpipe_layernorm(long y, long mean, long rstd, long x, long gamma, long beta, float eps);

    static native int ttpipe_layernorm_backward_input(long dx, long dy, long x, long gamma, long mean, long rstd);

    static native int ttpipe_layernorm_backward_weight(long dy, long x, long mean, long rstd, long dGamma, long dBeta,
                                                       int accumulate);

    static native int ttpipe_rmsnorm(long y, long rstd, long x, long gamma, float eps);

    static native int ttpipe_rmsnorm_backward_input(long dx, long dy, long x, long gamma, long rstd);

    static native int ttpipe_rmsnorm_backward_weight(long dy, long x, long rstd, long dGamma, int accumulate);

    static native int ttpipe_softmax(long y, long x, float scale, int causal, int p0, int p1);

    static native int ttpipe_softmax_backward(long dx, long y, long dy, float scale);

    static native int ttpipe_gelu(long out, long x);

    static native int ttpipe_gelu_backward(long dx, long dy, long x);

    static native int ttpipe_silu(long out, long x);

    static native int ttpipe_silu_backward(long dx, long dy, long x);

    static native int ttpipe_rope(long out, long x, float theta, int inverse, int p0, int p1);

    static native int ttpipe_add(long out, long a, long b);

    static native int ttpipe_mul(long out, long a, long b);

    static native int ttpipe_scale(long out, long a, float s);

    static native int ttpipe_add_scaled(long a, long b, float alpha);

    static native int ttpipe_sum_rows(long x, long out, int accumulate);

    static native int ttpipe_sum(long out, long x, int dim);

    static native int ttpipe_sum_squares(long x, int p0, int p1, double[] out);

    static native int ttpipe_repeat_interleave(long out, long x, int dim, int repeats);

    static native int ttpipe_sum_groups(long out, long x, int dim, int groupSize);

    static native int ttpipe_cross_entropy(long logits, long targets, int ignoreIndex, int p0, int p1, double[] sum,
                                           long[] count);

    static native int ttpipe_cross_entropy_backward(long dLogits, long logits, long targets, int ignoreIndex,
                                                    float scale);

    static native int ttpipe_dropout(long out, long x, float p, long seed, long elementOffset, int rank, int[] dims,
                                     int p0, int p1);

    static native int ttpipe_adamw(long param, long grad, long expAvg, long expAvgSq, float lr, float beta1,
                                   float beta2, float eps, float weightDecay, int step, float gradScale);

    static native int ttpipe_sgd(long param, long grad, long momentumBuffer, float lr, float momentum, float dampening,
                                 float weightDecay, int nesterov, int step, float gradScale);

    // ---- collectives and sockets -----------------------------------------------------------------------
    static native int ttpipe_all_gather(long out, long x, int dim, int axis);

    static native int ttpipe_reduce_scatter(long out, long x, int dim, int axis);

    static native int ttpipe_all_reduce(long out, long x, int axis, int op);

    static native int ttpipe_socket_open(long from, long to, long[] out);

    static native int ttpipe_socket_send(long socket, long tensor);

    static native int ttpipe_socket_recv(long socket, long timeoutMillis, long[] out);

    static native int ttpipe_socket_close(long socket);
}
