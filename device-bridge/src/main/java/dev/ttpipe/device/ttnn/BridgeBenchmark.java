package dev.ttpipe.device.ttnn;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Ops;
import dev.ttpipe.device.Shape;
import dev.ttpipe.device.Tensor;
import dev.ttpipe.device.cpu.CpuMeshDevice;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Random;

/**
 * Measures what the bridge costs: one JNA call into the library (the no-op entry), and the time of
 * small ops on the ttnn backend over the bridge against the same ops on the cpu backend, both on a
 * one-device mesh with one thread, so the difference is the per-op overhead of going through JNA
 * (allocation, the call, the free) rather than compute. Each figure is the median over samples of
 * batches timed with {@link System#nanoTime}, after warmup. A program that prints figures, never a
 * pass/fail test: see {@code ttpipe bench bridge}.
 */
public final class BridgeBenchmark {
    /** The shapes measured: small enough that the op's own work is a few hundred nanoseconds. */
    static final int ROWS = 4, COLS = 32, MATMUL = 8;

    private BridgeBenchmark() {
    }

    /**
     * One op on both backends.
     *
     * @param op        the op, e.g. {@code matmul}
     * @param shape     what it ran on, e.g. {@code [8, 8] x [8, 8]}
     * @param cpuNanos  median ns per op on the cpu backend
     * @param ttnnNanos median ns per op on the ttnn backend over the bridge library
     */
    public record OpCost(String op, String shape, double cpuNanos, double ttnnNanos) {
        /** ttnn minus cpu: what the bridge adds to the op (negative when the library's kernel is faster). */
        public double overheadNanos() {
            return ttnnNanos - cpuNanos;
        }
    }

    /**
     * A measurement.
     *
     * @param library        the bridge library measured
     * @param implementation the library's description
     * @param jnaCallNanos   median ns of one call to {@code ttpipe_noop} through the binding
     * @param jnaCallBest    the fastest sample's ns per call
     * @param jnaCalls       calls timed
     * @param ops            per-op costs, cpu against ttnn
     */
    public record Result(Path library, String implementation, double jnaCallNanos, double jnaCallBest, long jnaCalls,
                         List<OpCost> ops) {
    }

    /** Median and best ns per call of a timed body, and how many calls were timed. */
    record Timing(double medianNanos, double bestNanos, long calls) {
    }

    /** A body run {@code n} times per sample; returns something so that the JIT cannot drop the work. */
    interface Body {
        long run(int n);
    }

    /**
     * Measures.
     *
     * @param bridgeLibrary the library to measure (null: the default search of {@link BridgeLibrary})
     * @param seconds       time spent on each figure and backend (warmup included), e.g. 0.3
     */
    public static Result run(String bridgeLibrary, double seconds) {
        if (!(seconds > 0)) throw new IllegalArgumentException("seconds " + seconds + " must be > 0");
        MeshOptions options = MeshOptions.defaults().withThreads(1).withBridgeLibrary(bridgeLibrary);
        try (MeshDevice cpu = CpuMeshDevice.open(new MeshShape(1, 1), options);
             TtnnMeshDevice ttnn = TtnnMeshDevice.open(new MeshShape(1, 1), options)) {
            Timing jna = time(n -> {
                long acc = 0;
                for (int i = 0; i < n; i++) acc += NativeBridge.ttpipe_noop();
                return acc;
            }, seconds);
            List<OpCost> ops = new ArrayList<>();
            Workload c = new Workload(cpu.asSubmesh().ops());
            Workload t = new Workload(ttnn.asSubmesh().ops());
            try (c; t) {
                for (int k = 0; k < Workload.NAMES.length; k++) {
                    int op = k;
                    Timing[] both = time(new Body[]{n -> c.run(op, n), n -> t.run(op, n)}, seconds);
                    ops.add(new OpCost(Workload.NAMES[k], Workload.SHAPES[k], both[0].medianNanos(),
                            both[1].medianNanos()));
                }
            }
            return new Result(ttnn.library(), ttnn.implementation(), jna.medianNanos(), jna.bestNanos(), jna.calls(),
                    List.copyOf(ops));
        }
    }

    /** Times {@code body} alone (see {@link #time(Body[], double)}). */
    static Timing time(Body body, double seconds) {
        return time(new Body[]{body}, seconds)[0];
    }

    /**
     * Times bodies side by side: for each, a batch size that takes about 0.2 ms; a fifth of
     * {@code seconds} of warmup; then one sample (one batch) of each in turn until {@code seconds}
     * are spent (at least 11 each). Interleaving makes the bodies see the same machine load, which
     * matters for their difference on a shared machine.
     */
    static Timing[] time(Body[] bodies, double seconds) {
        int k = bodies.length;
        long sink = 0;
        int[] batch = new int[k];
        for (int b = 0; b < k; b++) {
            batch[b] = 1;
            while (true) {
                long t0 = System.nanoTime();
                sink += bodies[b].run(batch[b]);
                if (System.nanoTime() - t0 > 200_000 || batch[b] >= 1 << 24) break;
                batch[b] *= 2;
            }
        }
        long budget = (long) (seconds * 1e9) * k;
        long warmEnd = System.nanoTime() + budget / 5;
        while (System.nanoTime() < warmEnd) {
            for (int b = 0; b < k; b++) sink += bodies[b].run(batch[b]);
        }
        long end = System.nanoTime() + budget * 4 / 5;
        double[][] samples = new double[k][64];
        int count = 0;
        while (count < 11 || System.nanoTime() < end) {
            if (count == samples[0].length) {
                for (int b = 0; b < k; b++) samples[b] = Arrays.copyOf(samples[b], 2 * count);
            }
            for (int b = 0; b < k; b++) {
                long t0 = System.nanoTime();
                sink += bodies[b].run(batch[b]);
                samples[b][count] = (double) (System.nanoTime() - t0) / batch[b];
            }
            count++;
        }
        Timing[] out = new Timing[k];
        for (int b = 0; b < k; b++) {
            double[] s = Arrays.copyOf(samples[b], count);
            Arrays.sort(s);
            double median = count % 2 == 1 ? s[count / 2] : (s[count / 2 - 1] + s[count / 2]) / 2;
            out[b] = new Timing(median, s[0], (long) count * batch[b]);
        }
        if (sink == Long.MIN_VALUE) System.out.print(""); // keeps the results alive
        return out;
    }

    /** The ops measured, on one backend's one-device submesh, with their inputs made once. */
    private static final class Workload implements AutoCloseable {
        static final String[] NAMES = {"add", "matmul", "layerNorm", "softmax", "gelu", "toHost"};
        static final String[] SHAPES = {"[4, 32] + [4, 32]", "[8, 8] x [8, 8]", "[4, 32]", "[4, 32]", "[4, 32]",
                "[4, 32]"};

        private final Ops ops;
        private final Tensor a, b, m1, m2, gamma, beta;

        Workload(Ops ops) {
            this.ops = ops;
            Random rnd = new Random(7);
            a = ops.fromHost(random(rnd, ROWS * COLS), Shape.of(ROWS, COLS), Layout.REPLICATED, DType.FP32);
            b = ops.fromHost(random(rnd, ROWS * COLS), Shape.of(ROWS, COLS), Layout.REPLICATED, DType.FP32);
            m1 = ops.fromHost(random(rnd, MATMUL * MATMUL), Shape.of(MATMUL, MATMUL), Layout.REPLICATED, DType.FP32);
            m2 = ops.fromHost(random(rnd, MATMUL * MATMUL), Shape.of(MATMUL, MATMUL), Layout.REPLICATED, DType.FP32);
            gamma = ops.full(Shape.of(COLS), Layout.REPLICATED, DType.FP32, 1f);
            beta = ops.zeros(Shape.of(COLS), Layout.REPLICATED, DType.FP32);
        }

        private static float[] random(Random rnd, int n) {
            float[] x = new float[n];
            for (int i = 0; i < n; i++) x[i] = (float) rnd.nextGaussian();
            return x;
        }

        long run(int op, int n) {
            long acc = 0;
            for (int i = 0; i < n; i++) {
                switch (op) {
                    case 0 -> {
                        try (Tensor r = ops.add(a, b)) {
                            acc += r.shape().rank();
                        }
                    }
                    case 1 -> {
                        try (Tensor r = ops.matmul(m1, m2, false, false)) {
                            acc += r.shape().rank();
                        }
                    }
                    case 2 -> {
                        try (var r = ops.layerNorm(a, gamma, beta, 1e-5f)) {
                            acc += r.y().shape().rank();
                        }
                    }
                    case 3 -> {
                        try (Tensor r = ops.softmax(a, 1f, false)) {
                            acc += r.shape().rank();
                        }
                    }
                    case 4 -> {
                        try (Tensor r = ops.gelu(a)) {
                            acc += r.shape().rank();
                        }
                    }
                    default -> acc += Float.floatToRawIntBits(a.toHost()[0]);
                }
            }
            return acc;
        }

        @Override
        public void close() {
            for (Tensor t : new Tensor[]{a, b, m1, m2, gamma, beta}) t.close();
        }
    }

    /** {@code java -cp ... dev.ttpipe.device.ttnn.BridgeBenchmark [library [seconds]]}: prints the table. */
    public static void main(String[] args) {
        Result r = run(args.length > 0 && !args[0].isEmpty() ? args[0] : null, args.length > 1 ? Double.parseDouble(args[1])
                : 0.3);
        System.out.printf(Locale.ROOT, "bridge %s (%s)%njna call %.1f ns (median; best %.1f)%n", r.library(),
                r.implementation(), r.jnaCallNanos(), r.jnaCallBest());
        for (OpCost c : r.ops()) {
            System.out.printf(Locale.ROOT, "%-10s %-18s cpu %9.0f ns  ttnn %9.0f ns  +%9.0f ns%n", c.op(), c.shape(),
                    c.cpuNanos(), c.ttnnNanos(), c.overheadNanos());
        }
    }
}
