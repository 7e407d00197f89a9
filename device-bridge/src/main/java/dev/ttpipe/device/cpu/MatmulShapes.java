package dev.ttpipe.device.cpu;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The distinct fp32 matmul shapes this process's cpu meshes multiply while recording is on: what
 * {@code ttpipe bench step --write-matmul-table} times under each engine. Recording costs one volatile
 * read per product when off.
 */
public final class MatmulShapes {
    private static volatile Set<Shape> recording;

    private MatmulShapes() {
    }

    /**
     * One product's shape: op(A) [m, k] times op(B) [k, n], row-major, A (or B) stored transposed when
     * {@code transA} ({@code transB}).
     */
    public record Shape(boolean transA, boolean transB, int m, int k, int n) {
        public Shape {
            MatmulBenchmark.checkShape(m, k, n);
        }

        /** Multiply-adds: m k n. */
        public long multiplyAdds() {
            return (long) m * k * n;
        }

        /** {@code N T 2048x384x1152}: A as stored (N) or transposed (T), B likewise, then M x K x N. */
        @Override
        public String toString() {
            return String.format(Locale.ROOT, "%s %s %dx%dx%d", transA ? "T" : "N", transB ? "T" : "N", m, k, n);
        }
    }

    /** Starts recording (forgetting what an earlier recording saw). */
    public static void start() {
        recording = ConcurrentHashMap.newKeySet();
    }

    /** Stops recording; the shapes seen since {@link #start}, largest product first. */
    public static List<Shape> stop() {
        Set<Shape> seen = recording;
        recording = null;
        List<Shape> shapes = new ArrayList<>(seen == null ? Set.of() : seen);
        shapes.sort(Comparator.comparingLong(Shape::multiplyAdds).reversed().thenComparing(Shape::toString));
        return shapes;
    }

    /** Notes a product about to run (nothing unless recording). */
    static void note(boolean transA, boolean transB, int m, int n, int k) {
        Set<Shape> seen = recording;
        if (seen != null && m > 0 && n > 0 && k > 0) seen.add(new Shape(transA, transB, m, k, n));
    }
}
