package dev.ttpipe.device.cpu;

import dev.ttpipe.device.Device;
import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.MeshCoord;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.MeshSocket;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.spi.MeshDeviceBase;
import dev.ttpipe.device.spi.SubmeshBase;
import org.slf4j.LoggerFactory;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;
import java.util.function.UnaryOperator;

/**
 * The cpu backend: a mesh of emulated devices in this JVM. Each device has its own memory
 * accounting (capacity {@link MeshOptions#memoryPerDevice()}) and its own caching allocator of
 * native memory; a tensor holds one buffer per device of its submesh (a replicated weight on two
 * devices is two copies), collectives and sockets copy between those buffers. Matmul runs on
 * OpenBLAS (or the pure-JVM fallback, see {@link GemmChoice}); the other kernels are Java over
 * the native buffers, multi-threaded on a pool of {@link MeshOptions#threads()} threads.
 *
 * <p>Thread-safe as {@link MeshDevice} requires: different submeshes may be driven concurrently.
 * Closing frees every tensor and all native memory.
 */
public final class CpuMeshDevice extends MeshDeviceBase {
    private final List<CpuDevice> devices;
    private final Parallel parallel;
    private final Gemm gemm;
    private final UnaryOperator<String> getenv;
    /** Chosen on the first bf16 matmul (or question about it): an fp32 job never loads oneDNN. */
    private volatile Bf16Gemm bf16Gemm;
    private final Rope rope = new Rope();
    private final AtomicInteger inFlight = new AtomicInteger();

    private CpuMeshDevice(MeshShape shape, MeshOptions options, String kernel) {
        super("cpu", shape);
        if (options.memoryPerDevice() <= 0) {
            throw new DeviceException("cpu mesh: memoryPerDevice " + options.memoryPerDevice() + " must be > 0");
        }
        if (options.threads() < 0) throw new DeviceException("cpu mesh: threads " + options.threads() + " must be >= 0");
        List<CpuDevice> devs = new ArrayList<>();
        for (int i = 0; i < shape.size(); i++) {
            devs.add(new CpuDevice(i, new MeshCoord(i / shape.cols(), i % shape.cols()), options.memoryPerDevice()));
        }
        this.devices = List.copyOf(devs);
        int threads = options.threads() == 0 ? Runtime.getRuntime().availableProcessors() : options.threads();
        this.parallel = new Parallel(threads);
        this.gemm = GemmChoice.choose(kernel, threads, parallel, options::getenv);
        this.getenv = options::getenv;
    }

    /** Opens a mesh of emulated devices ({@code options} null: defaults). */
    public static CpuMeshDevice open(MeshShape shape, MeshOptions options) {
        return open(shape, options, "auto");
    }

    /** As {@link #open(MeshShape, MeshOptions)} with the matmul kernel chosen: auto, blas or java. */
    public static CpuMeshDevice open(MeshShape shape, MeshOptions options, String matmulKernel) {
        if (shape == null) throw new DeviceException("cpu mesh: shape is null");
        return new CpuMeshDevice(shape, options == null ? MeshOptions.defaults() : options, matmulKernel);
    }

    @Override
    public List<Device> devices() {
        return List.copyOf(devices);
    }

    @Override
    protected List<Submesh> newSubmeshes(MeshShape submeshShape) {
        List<List<CpuDevice>> tiles = SubmeshBase.tile(shape(), devices, submeshShape);
        List<Submesh> out = new ArrayList<>();
        for (int i = 0; i < tiles.size(); i++) out.add(new CpuSubmesh(this, i, submeshShape, tiles.get(i)));
        return out;
    }

    @Override
    public MeshSocket openSocket(Submesh from, Submesh to) {
        requireOpen();
        return new CpuMeshSocket(this, from, to);
    }

    /** The kernel matmuls run on: {@code blas} or {@code java}. */
    public String matmulKernel() {
        return gemm.kind();
    }

    /** Native mallocs over all devices so far (a steady-state training step adds none). */
    public long nativeAllocations() {
        long n = 0;
        for (CpuDevice d : devices) n += d.allocator().mallocCount();
        return n;
    }

    /** Native bytes held over all devices, by live tensors and caches. */
    public long nativeBytesReserved() {
        long n = 0;
        for (CpuDevice d : devices) n += d.allocator().reservedBytes();
        return n;
    }

    Parallel parallel() {
        return parallel;
    }

    Gemm gemm() {
        return gemm;
    }

    /** The kernel of matmuls with a BF16 operand. */
    Bf16Gemm bf16Gemm() {
        Bf16Gemm g = bf16Gemm;
        if (g == null) {
            synchronized (this) {
                if (bf16Gemm == null) bf16Gemm = Bf16Gemm.choose(gemm, parallel, getenv);
                g = bf16Gemm;
            }
        }
        return g;
    }

    /**
     * How matmuls with a BF16 operand run, in words: oneDNN's bf16 GEMM on a CPU with avx512_bf16, else
     * the fp32 sgemm on operands widened to fp32, and why not the faster engines.
     */
    public String bf16MatmulKernel() {
        return bf16Gemm().describe();
    }

    Rope rope() {
        return rope;
    }

    /**
     * Marks device work in progress (kernels, host copies): {@link #close} frees native memory only
     * once none is. Throws if the mesh is closed. Pair with {@link #exit}.
     */
    void enter() {
        inFlight.incrementAndGet(); // increment first, then check: close() sets closed, then waits
        if (isClosed()) {
            inFlight.decrementAndGet();
            requireOpen();
        }
    }

    void exit() {
        inFlight.decrementAndGet();
    }

    /**
     * Frees native memory once work that other threads have in progress finishes (waiting up to
     * 30 s; past that it is left allocated rather than freed under a running kernel), then the pool.
     */
    @Override
    protected void freeResources() {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (inFlight.get() > 0 && System.nanoTime() < deadline) LockSupport.parkNanos(100_000);
        if (inFlight.get() > 0) {
            LoggerFactory.getLogger(CpuMeshDevice.class).warn("{}: closing with device work still running after 30 s; "
                    + "its native memory is left allocated", this);
        } else {
            for (CpuDevice d : devices) d.allocator().close();
        }
        parallel.close();
    }

    @Override
    public String toString() {
        return "cpu mesh " + shape() + " (" + gemm.kind() + " matmul, " + parallel.threadsInWords() + ")";
    }
}
