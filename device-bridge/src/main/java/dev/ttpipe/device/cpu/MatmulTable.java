package dev.ttpipe.device.cpu;

import dev.ttpipe.device.DeviceException;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Which engine multiplies each fp32 product shape: {@code blas} (OpenBLAS) or {@code dnnl} (oneDNN's
 * {@code dnnl_sgemm}), as {@code ttpipe bench step CONFIG --write-matmul-table FILE} measured them on this
 * machine. A cpu mesh follows it when {@code TTPIPE_MATMUL_TABLE} (or {@code -Dttpipe.matmul.table}, or the
 * config's {@code global_env}) names the file; a shape the table does not list runs on OpenBLAS.
 *
 * <p>The choice is read, never measured while training: two processes given one table pick the same engine for
 * the same shape whatever the load, so a pipeline and its reference trainer stay bit for bit equal.
 *
 * <p>The file is text: a first line {@value #MAGIC}, comment lines starting with {@code #}, then one line per shape,
 * {@code opA opB MxKxN engine blas_gflops dnnl_gflops}, e.g. {@code N T 2048x384x1152 dnnl 171.2 201.9}
 * (op N: the operand as stored, T: transposed; the figures are what the choice was made on).
 */
public final class MatmulTable {
    static final String MAGIC = "# ttpipe matmul table 1";
    /** The largest table read: far more shapes than any model multiplies. */
    static final long MAX_BYTES = 1 << 20;
    private static final Map<String, MatmulTable> CACHE = new ConcurrentHashMap<>();

    /** One measured shape: the engine chosen and the median GFLOP/s of each engine. */
    public record Row(MatmulShapes.Shape shape, String engine, double blasGflops, double dnnlGflops) {
    }

    private final Path file;
    private final String sha256;
    private final Map<MatmulShapes.Shape, Row> rows;

    private MatmulTable(Path file, String sha256, Map<MatmulShapes.Shape, Row> rows) {
        this.file = file;
        this.sha256 = sha256;
        this.rows = rows;
    }

    /** The table file named by {@code -Dttpipe.matmul.table}, else {@code TTPIPE_MATMUL_TABLE} as {@code getenv} reads it; null if neither. */
    static String requested(java.util.function.UnaryOperator<String> getenv) {
        String p = System.getProperty("ttpipe.matmul.table");
        if (p == null || p.isBlank()) p = getenv.apply("TTPIPE_MATMUL_TABLE");
        return p == null || p.isBlank() ? null : p.trim();
    }

    /** Reads a table (once per file and content: later calls with an unchanged file reuse it). */
    public static MatmulTable read(Path file) {
        byte[] bytes;
        try {
            long size = Files.size(file);
            if (size > MAX_BYTES) {
                throw new DeviceException("matmul table " + file + ": " + size + " bytes, expected at most " + MAX_BYTES
                        + " (a table written by ttpipe bench step --write-matmul-table)");
            }
            bytes = Files.readAllBytes(file);
        } catch (IOException e) {
            throw new DeviceException("matmul table " + file + ": cannot read it (" + e.getClass().getSimpleName() + ": "
                    + e.getMessage() + "); expected a file written by ttpipe bench step --write-matmul-table");
        }
        String sha = sha256(bytes);
        return CACHE.computeIfAbsent(file.toAbsolutePath().normalize() + "@" + sha, key -> parse(file, sha, bytes));
    }

    private static MatmulTable parse(Path file, String sha, byte[] bytes) {
        String[] lines = new String(bytes, StandardCharsets.UTF_8).split("\n", -1);
        if (!lines[0].strip().equals(MAGIC)) {
            throw new DeviceException("matmul table " + file + ":1: '" + clip(lines[0]) + "' given, expected the first line '"
                    + MAGIC + "' (a file written by ttpipe bench step --write-matmul-table)");
        }
        Map<MatmulShapes.Shape, Row> rows = new LinkedHashMap<>();
        for (int i = 1; i < lines.length; i++) {
            String line = lines[i].strip();
            if (line.isEmpty() || line.startsWith("#")) continue;
            Row row = row(line, file + ":" + (i + 1));
            Row before = rows.putIfAbsent(row.shape(), row);
            if (before != null) {
                throw new DeviceException("matmul table " + file + ":" + (i + 1) + ": shape " + row.shape()
                        + " given twice, expected each shape once");
            }
        }
        return new MatmulTable(file, sha, Collections.unmodifiableMap(rows));
    }

    private static Row row(String line, String where) {
        String[] f = line.split("\\s+");
        String expected = "expected 'opA opB MxKxN engine blas_gflops dnnl_gflops', such as 'N T 2048x384x1152 dnnl 171.2 201.9'";
        if (f.length != 6 || !op(f[0]) || !op(f[1])) {
            throw new DeviceException("matmul table " + where + ": '" + clip(line) + "' given, " + expected);
        }
        String[] mkn = f[2].toLowerCase(Locale.ROOT).split("x", -1);
        int[] size = new int[3];
        try {
            if (mkn.length != 3) throw new NumberFormatException();
            for (int j = 0; j < 3; j++) {
                size[j] = Integer.parseInt(mkn[j]);
                if (size[j] < 1) throw new NumberFormatException();
            }
        } catch (NumberFormatException e) {
            throw new DeviceException("matmul table " + where + ": shape '" + clip(f[2]) + "' given, expected MxKxN,"
                    + " three positive integers (an M x K by K x N product)");
        }
        String engine = f[3].toLowerCase(Locale.ROOT);
        if (!engine.equals("blas") && !engine.equals("dnnl")) {
            throw new DeviceException("matmul table " + where + ": engine '" + clip(f[3]) + "' given, expected blas or dnnl");
        }
        double[] gflops = new double[2];
        for (int j = 0; j < 2; j++) {
            try {
                gflops[j] = Double.parseDouble(f[4 + j]);
            } catch (NumberFormatException e) {
                gflops[j] = Double.NaN;
            }
            if (!(gflops[j] >= 0) || Double.isInfinite(gflops[j])) {
                throw new DeviceException("matmul table " + where + ": " + (j == 0 ? "blas" : "dnnl") + " GFLOP/s '"
                        + clip(f[4 + j]) + "' given, expected a number >= 0");
            }
        }
        return new Row(new MatmulShapes.Shape(f[0].equals("T"), f[1].equals("T"), size[0], size[1], size[2]), engine,
                gflops[0], gflops[1]);
    }

    private static boolean op(String s) {
        return s.equals("N") || s.equals("T");
    }

    private static String clip(String s) {
        String one = s.replace("\r", "\\r").replace("\t", "\\t");
        return one.length() > 60 ? one.substring(0, 57) + "..." : one;
    }

    /** Writes {@code rows} as a table {@link #read} takes, with {@code comments} (one per line) after the first line. */
    public static void write(Path file, List<String> comments, List<Row> rows) throws IOException {
        StringBuilder sb = new StringBuilder(MAGIC).append('\n');
        for (String c : comments) sb.append("# ").append(c).append('\n');
        sb.append("# opA opB MxKxN engine blas_gflops dnnl_gflops\n");
        for (Row r : rows) {
            sb.append(String.format(Locale.ROOT, "%s %s %s %s %.1f %.1f%n", r.shape().transA() ? "T" : "N",
                    r.shape().transB() ? "T" : "N", r.shape().m() + "x" + r.shape().k() + "x" + r.shape().n(), r.engine(),
                    r.blasGflops(), r.dnnlGflops()));
        }
        Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        Files.writeString(tmp, sb.toString());
        Files.move(tmp, file, java.nio.file.StandardCopyOption.REPLACE_EXISTING, java.nio.file.StandardCopyOption.ATOMIC_MOVE);
    }

    /** The engine the table names for this shape ({@code blas} or {@code dnnl}), or null where it does not list it. */
    String engine(boolean transA, boolean transB, int m, int n, int k) {
        if (rows.isEmpty() || m < 1 || n < 1 || k < 1) return null;
        Row r = rows.get(new MatmulShapes.Shape(transA, transB, m, k, n));
        return r == null ? null : r.engine();
    }

    public Path file() {
        return file;
    }

    /** The first 12 hex digits of the file's SHA-256, to tell two tables apart in run records. */
    public String sha256() {
        return sha256;
    }

    public List<Row> rows() {
        return new ArrayList<>(rows.values());
    }

    /** How many shapes the table sends to oneDNN. */
    long dnnlShapes() {
        return rows.values().stream().filter(r -> r.engine().equals("dnnl")).count();
    }

    private static String sha256(byte[] bytes) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes)).substring(0, 12);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
