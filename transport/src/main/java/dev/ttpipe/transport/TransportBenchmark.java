package dev.ttpipe.transport;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Submesh;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.cpu.CpuMeshDevice;
import org.agrona.BufferUtil;

import java.io.IOException;
import java.net.DatagramSocket;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;

/**
 * Tensor throughput of each transport on the real path, next to memcpy of the same size: a cpu
 * backend tensor on rank 0's submesh is sent to rank 1, bound with its submesh as a HostGuardian
 * binds it, whose "stage thread" materializes it there as a StageActor would. One iteration sends a
 * batch of tensors back to back and waits for the last to be materialized; the figure is the median
 * over the timed iterations, after warmup. Tensors are prepared outside the timed region. Prints
 * nothing; {@code ttpipe bench transport} formats the results.
 */
public final class TransportBenchmark {
    public static final List<String> CHANNELS = List.of("local", "aeron-ipc", "aeron-udp");
    private static final long JOB = 0x7470;
    private static final long BATCH_BYTES = 256L << 20;
    /** Warmup runs at least this many iterations and this long, so that the JIT has compiled the path. */
    private static final int WARMUP = 2;
    private static final long WARMUP_NS = 1_000_000_000L;
    public static final long MAX_SIZE = 1L << 30;

    private TransportBenchmark() {
    }

    /**
     * One channel at one size.
     *
     * @param copies      copies of the payload on the way (local: 0, the tensor object is handed over;
     *                    aeron-ipc: into the term, then out of it straight into the receiving submesh's
     *                    memory; aeron-udp: two more, through the kernel's socket buffers)
     * @param frames      tensors per timed iteration
     */
    public record Result(String channel, long bytes, double gbps, double memcpyGbps, int copies, int frames,
                         int iterations, double medianSeconds) {
        public double ratio() {
            return gbps / memcpyGbps;
        }
    }

    /**
     * Runs every channel in {@code channels} at every size (bytes, multiples of 4), aeron-udp with
     * datagrams of {@code udpMtu} bytes; {@code progress} gets one line per step.
     */
    public static List<Result> run(List<String> channels, List<Long> sizes, int iterations, int udpMtu,
                                   Consumer<String> progress) {
        for (String c : channels) {
            if (!CHANNELS.contains(c)) throw new IllegalArgumentException("channel " + c + ": expected one of " + CHANNELS);
        }
        double[] memcpy = new double[sizes.size()];
        for (int i = 0; i < sizes.size(); i++) {
            progress.accept("memcpy " + human(sizes.get(i)));
            memcpy[i] = memcpyGbps(sizes.get(i), iterations);
        }
        List<Result> out = new ArrayList<>();
        try (MeshDevice mesh = CpuMeshDevice.open(new MeshShape(1, 2), MeshOptions.defaults().withThreads(1))) {
            List<Submesh> subs = mesh.createSubmeshes(new MeshShape(1, 1));
            for (String c : channels) {
                try (Transport t = open(c, udpMtu)) {
                    for (int i = 0; i < sizes.size(); i++) {
                        progress.accept(c + " " + human(sizes.get(i)));
                        out.add(measure(c, t, subs.get(0), subs.get(1), sizes.get(i), iterations, memcpy[i]));
                    }
                }
            }
        }
        return out;
    }

    private static Transport open(String channel, int udpMtu) {
        return switch (channel) {
            case "local" -> new LocalTransport();
            case "aeron-ipc" -> AeronTransport.start(AeronTransport.Config.ipc(JOB, 0, 1));
            case "aeron-udp" -> AeronTransport.start(AeronTransport.Config.of(JOB,
                    Map.of(0, AeronTransport.Endpoint.udp("127.0.0.1", freePort()),
                            1, AeronTransport.Endpoint.udp("127.0.0.1", freePort())), Set.of(0, 1)).withUdpMtu(udpMtu));
            default -> throw new IllegalArgumentException(channel);
        };
    }

    private static Result measure(String channel, Transport t, Submesh from, Submesh to, long bytes, int iterations,
                                  double memcpyGbps) {
        int frames = framesPerIteration(bytes);
        ExecutorService stage = Executors.newSingleThreadExecutor(r -> new Thread(r, "bench-stage-1"));
        AtomicReference<CountDownLatch> arrived = new AtomicReference<>();
        AtomicReference<String> failure = new AtomicReference<>();
        t.bind(1, to, new TensorReceiver() {
            @Override
            public void onTensor(TensorPayload payload) {
                stage.execute(() -> {
                    try (Tensor x = payload.materialize(to)) {
                        arrived.get().countDown();
                    } catch (RuntimeException e) {
                        failure.set(e.toString());
                        arrived.get().countDown();
                    }
                });
            }

            @Override
            public void onError(String ch, String problem) {
                failure.set(ch + ": " + problem);
            }
        });
        TensorChannel ch = t.channel(0, 1);
        Shape shape = Shape.of((int) (bytes / 4));
        double[] seconds = new double[iterations];
        try (Tensor base = from.ops().full(shape, Layout.REPLICATED, DType.FP32, 1.5f)) {
            FrameHeader h = new FrameHeader(JOB, 0, 0, 1, 0, TensorKind.ACTIVATION, DType.FP32, shape, Layout.REPLICATED,
                    0, 0);
            long warmupUntil = System.nanoTime() + WARMUP_NS;
            for (int it = -WARMUP; it < iterations; it++) {
                if (it == 0 && System.nanoTime() < warmupUntil) it = -1; // keep warming up
                Tensor[] batch = new Tensor[frames];
                for (int i = 0; i < frames; i++) batch[i] = from.ops().copy(base);
                CountDownLatch done = new CountDownLatch(frames);
                arrived.set(done);
                long t0 = System.nanoTime();
                for (Tensor x : batch) ch.send(h, x);
                await(done, channel);
                long t1 = System.nanoTime();
                if (failure.get() != null) throw new TransportException(channel + ": " + failure.get());
                if (it >= 0) seconds[it] = (t1 - t0) / 1e9;
            }
        } finally {
            stage.shutdown();
        }
        double median = median(seconds);
        return new Result(channel, bytes, frames * bytes / median / 1e9, memcpyGbps, copies(channel), frames, iterations,
                median);
    }

    private static int copies(String channel) {
        return switch (channel) {
            case "local" -> 0;
            case "aeron-ipc" -> 2;
            default -> 4;
        };
    }

    /** Enough tensors per iteration to time (about 256 MiB, 2 to 32 tensors). */
    static int framesPerIteration(long bytes) {
        return (int) Math.max(2, Math.min(32, BATCH_BYTES / Math.max(1, bytes)));
    }

    /**
     * Copies between direct buffers of {@code bytes}, in the same batches as the transports: each of
     * the batch's tensors from its own source to its own destination, so that, as for the transports,
     * the data does not sit in cache between iterations unless it fits there.
     */
    static double memcpyGbps(long bytes, int iterations) {
        int n = (int) bytes;
        int frames = framesPerIteration(bytes);
        ByteBuffer[] src = new ByteBuffer[frames];
        ByteBuffer[] dst = new ByteBuffer[frames];
        for (int f = 0; f < frames; f++) {
            src[f] = ByteBuffer.allocateDirect(n);
            dst[f] = ByteBuffer.allocateDirect(n);
            for (int i = 0; i < n; i += 4096) src[f].put(i, (byte) i);
        }
        double[] seconds = new double[iterations];
        for (int it = -WARMUP; it < iterations; it++) {
            long t0 = System.nanoTime();
            for (int f = 0; f < frames; f++) dst[f].put(0, src[f], 0, n);
            long t1 = System.nanoTime();
            if (it >= 0) seconds[it] = (t1 - t0) / 1e9;
        }
        for (int f = 0; f < frames; f++) {
            BufferUtil.free(src[f]);
            BufferUtil.free(dst[f]);
        }
        return frames * bytes / median(seconds) / 1e9;
    }

    private static void await(CountDownLatch done, String channel) {
        try {
            if (!done.await(120, TimeUnit.SECONDS)) {
                throw new TransportException(channel + ": tensors did not arrive within 120 s");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new TransportException(channel + ": interrupted");
        }
    }

    static double median(double[] xs) {
        double[] s = xs.clone();
        Arrays.sort(s);
        int n = s.length;
        return n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    }

    static int freePort() {
        try (DatagramSocket s = new DatagramSocket(0)) {
            return s.getLocalPort();
        } catch (IOException e) {
            throw new TransportException("no free UDP port on 127.0.0.1: " + e.getMessage(), e);
        }
    }

    /**
     * A size as the bench command takes it: a whole number with an optional binary unit, {@code 4096},
     * {@code 512KiB}, {@code 4MiB}, {@code 1GiB} (units case-insensitive, {@code B} for bytes), a
     * multiple of 4 bytes (the tensor is fp32) from 4 B to 1 GiB.
     *
     * @throws IllegalArgumentException saying what is wrong and what was expected
     */
    public static long parseSize(String text) {
        String s = text.trim();
        int i = 0;
        while (i < s.length() && Character.isDigit(s.charAt(i))) i++;
        if (i == 0) {
            throw new IllegalArgumentException("not a size, expected a whole number with an optional unit B, KiB, MiB "
                    + "or GiB (e.g. 4MiB)");
        }
        String unit = s.substring(i).trim();
        int shift = switch (unit.toLowerCase(Locale.ROOT)) {
            case "", "b" -> 0;
            case "kib" -> 10;
            case "mib" -> 20;
            case "gib" -> 30;
            default -> throw new IllegalArgumentException("unknown unit '" + unit
                    + "', expected B, KiB, MiB or GiB (e.g. 4MiB)");
        };
        long n;
        try {
            n = Long.parseLong(s.substring(0, i));
        } catch (NumberFormatException e) {
            n = Long.MAX_VALUE;
        }
        long bytes = n > (MAX_SIZE >> shift) ? MAX_SIZE + 1 : n << shift;
        if (bytes < 4 || bytes > MAX_SIZE || bytes % 4 != 0) {
            throw new IllegalArgumentException("expected a multiple of 4 bytes (an fp32 tensor) from 4 B to 1 GiB");
        }
        return bytes;
    }

    /** 4 MiB, 512 KiB, 100 B. */
    public static String human(long bytes) {
        if (bytes >= 1L << 30 && bytes % (1L << 30) == 0) return bytes / (1L << 30) + " GiB";
        if (bytes >= 1L << 20 && bytes % (1L << 20) == 0) return bytes / (1L << 20) + " MiB";
        if (bytes >= 1L << 10 && bytes % (1L << 10) == 0) return bytes / (1L << 10) + " KiB";
        return bytes + " B";
    }
}
