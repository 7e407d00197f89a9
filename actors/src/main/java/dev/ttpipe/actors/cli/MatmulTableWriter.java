package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.telemetry.Terminal;
import dev.ttpipe.actors.train.RunRecord;
import dev.ttpipe.device.cpu.MatmulBenchmark;
import dev.ttpipe.device.cpu.MatmulShapes;
import dev.ttpipe.device.cpu.MatmulTable;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/** {@code bench step --write-matmul-table}: times the shapes one step multiplied on each fp32 engine and writes the table. */
final class MatmulTableWriter {
    /** Seconds of alternating runs per shape (both engines together). */
    static final double SECONDS_PER_SHAPE = 0.6;
    /** Seconds of products timed and thrown away before the first shape's. */
    static final double SETTLE_SECONDS = 2.0;

    private MatmulTableWriter() {
    }

    /** Refuses, before any work, a FILE that is a folder or whose folder does not exist. */
    static void checkWritable(Path file) {
        Path parent = file.toAbsolutePath().getParent();
        if (Files.isDirectory(file)) {
            throw new UserInputException("--write-matmul-table " + file + ": a folder, expected a file to write");
        }
        if (parent == null || !Files.isDirectory(parent)) {
            throw new UserInputException("--write-matmul-table " + file + ": its folder " + parent + " does not exist");
        }
    }

    static void write(Path file, List<MatmulShapes.Shape> shapes, int threads, Path config, String dtype) {
        Terminal.printWrapped(System.out, String.format(Locale.ROOT, "timing the %d fp32 product shapes of one step on"
                + " OpenBLAS and oneDNN, alternating, about %.1f s each:", shapes.size(), SECONDS_PER_SHAPE));
        List<MatmulTable.Row> rows = new ArrayList<>();
        // Right after the step the JIT is still compiling its code on a core of its own: time the first shape once,
        // unrecorded, so that the products timed for the table do not share the machine with it.
        if (!shapes.isEmpty()) MatmulBenchmark.compare(shapes.get(0), threads, SETTLE_SECONDS);
        for (MatmulShapes.Shape shape : shapes) {
            MatmulTable.Row r = MatmulBenchmark.compare(shape, threads, SECONDS_PER_SHAPE);
            rows.add(r);
            System.out.printf(Locale.ROOT, "  %-22s blas %6.1f  dnnl %6.1f GFLOP/s -> %s%n", shape, r.blasGflops(),
                    r.dnnlGflops(), r.engine());
        }
        List<String> comments = List.of(
                "measured by: ttpipe bench step " + config + " --write-matmul-table (dtype " + dtype + ")",
                "on: " + RunRecord.cpuModel() + ", " + threads + " threads, "
                        + Instant.now().truncatedTo(ChronoUnit.SECONDS),
                "a shape goes to blas where its median is at least 3% faster than oneDNN's (the default engine)");
        try {
            MatmulTable.write(file, comments, rows);
        } catch (IOException e) {
            throw new UncheckedIOException("--write-matmul-table " + file + ": " + e.getMessage(), e);
        }
        long dnnl = rows.stream().filter(r -> r.engine().equals("dnnl")).count();
        Terminal.printWrapped(System.out, String.format(Locale.ROOT, "wrote %s: %d of %d shapes on dnnl.", file, dnnl,
                rows.size()));
        if (shapes.isEmpty()) {
            Terminal.printWrapped(System.out, "A step of this config multiplies no fp32 products: its matmuls run on the bf16"
                    + " engine.");
        }
        Terminal.printWrapped(System.out, "Use it: TTPIPE_MATMUL_TABLE=" + file + " ttpipe train ... (or global_env:"
                + " {TTPIPE_MATMUL_TABLE: " + file + "} in the config)");
    }
}
