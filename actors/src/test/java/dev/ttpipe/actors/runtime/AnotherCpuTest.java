package dev.ttpipe.actors.runtime;

import dev.ttpipe.stages.WeightDiff;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * What another CPU changes, with this machine standing in for others: OpenBLAS picks its kernels by the CPU
 * ({@code DYNAMIC_ARCH}), and {@code OPENBLAS_CORETYPE} makes it pick another CPU's. The reference trainer of
 * {@link BitIdentityTest} (clipping on) runs in a fresh JVM with this CPU's kernels, with Haswell's (AVX2) and
 * with Nehalem's (SSE), each where this CPU runs them. Its weights after 3 AdamW steps stay within the tolerance
 * {@code verify} uses (1e-5, relative, the worst parameter); the test prints how many elements differ in their
 * bits. With the pure-JVM matmul ({@code -Dttpipe.blas=java}) another CPU changes nothing: the same bits, checked
 * here too. docs/determinism.md says which of these a resume or a recovery on another host meets.
 */
class AnotherCpuTest {
    static final double VERIFY_TOLERANCE = 1e-5;

    /** Runs the reference trainer and writes its weights to {@code args[0]}. */
    public static void main(String[] args) throws IOException {
        BitIdentityTest.setUp();
        BitIdentityTest.Run run = BitIdentityTest.reference(1);
        try (DataOutputStream out = new DataOutputStream(Files.newOutputStream(Path.of(args[0])))) {
            out.writeInt(run.weights().size());
            for (Map.Entry<String, float[]> e : run.weights().entrySet()) {
                out.writeUTF(e.getKey());
                out.writeInt(e.getValue().length);
                for (float v : e.getValue()) out.writeFloat(v);
            }
        }
    }

    static Map<String, float[]> train(Path dir, String name, String coretype, String blas) throws Exception {
        Path file = dir.resolve(name + ".bin");
        List<String> cmd = new ArrayList<>();
        cmd.add(ProcessHandle.current().info().command().orElse("java"));
        cmd.addAll(ManagementFactory.getRuntimeMXBean().getInputArguments().stream()
                .filter(a -> !a.startsWith("-agentlib:jdwp") && !a.startsWith("-javaagent")).toList());
        if (blas != null) cmd.add("-Dttpipe.blas=" + blas);
        cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), AnotherCpuTest.class.getName(), file.toString()));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(dir.resolve(name + ".log").toFile());
        pb.environment().remove("OPENBLAS_CORETYPE");
        if (coretype != null) pb.environment().put("OPENBLAS_CORETYPE", coretype);
        Process p = pb.start();
        assertTrue(p.waitFor(300, TimeUnit.SECONDS), name + " did not finish in 300 s");
        assertEquals(0, p.exitValue(), name + " failed: " + Files.readString(dir.resolve(name + ".log")));
        Map<String, float[]> w = new LinkedHashMap<>();
        try (DataInputStream in = new DataInputStream(Files.newInputStream(file))) {
            for (int i = in.readInt(); i > 0; i--) {
                String k = in.readUTF();
                float[] v = new float[in.readInt()];
                for (int j = 0; j < v.length; j++) v[j] = in.readFloat();
                w.put(k, v);
            }
        }
        return w;
    }

    static long differingBits(Map<String, float[]> a, Map<String, float[]> b) {
        long n = 0;
        for (Map.Entry<String, float[]> e : a.entrySet()) {
            float[] x = e.getValue(), y = b.get(e.getKey());
            for (int i = 0; i < x.length; i++) if (Float.floatToRawIntBits(x[i]) != Float.floatToRawIntBits(y[i])) n++;
        }
        return n;
    }

    static Set<String> cpuFlags() throws IOException {
        for (String line : Files.readAllLines(Path.of("/proc/cpuinfo"))) {
            if (line.startsWith("flags") && line.contains(":")) return Set.of(line.substring(line.indexOf(':') + 1).trim().split("\\s+"));
        }
        return Set.of();
    }

    @Test
    void anotherCpusBlasKernelsStayWithinVerifysTolerance(@TempDir Path dir) throws Exception {
        assumeTrue(Files.isReadable(Path.of("/proc/cpuinfo")), "skipped: no /proc/cpuinfo to tell which kernels this CPU runs");
        Set<String> flags = cpuFlags();
        Map<String, float[]> here = train(dir, "this-cpu", null, null);
        int others = 0;
        for (String[] core : new String[][]{{"Haswell", "avx2"}, {"Nehalem", "sse4_2"}}) {
            if (!flags.contains(core[1])) continue;
            others++;
            Map<String, float[]> there = train(dir, core[0], core[0], null);
            WeightDiff d = WeightDiff.compare(there, here);
            long total = here.values().stream().mapToLong(v -> v.length).sum();
            System.out.printf(Locale.ROOT, "AnotherCpuTest: OpenBLAS's %s kernels against this CPU's: %d of %d weights differ in"
                    + " their bits, worst relative difference %.3e (%s)%n", core[0], differingBits(there, here), total,
                    d.maxRelative(), d.worstParam());
            assertTrue(d.maxRelative() < VERIFY_TOLERANCE, core[0] + "'s kernels: " + d.maxRelative() + " in " + d.worstParam());
        }
        assumeTrue(others > 0, "skipped: this CPU runs neither Haswell's nor Nehalem's kernels");
    }

    @Test
    void thePureJvmMatmulGivesTheSameBitsWhateverOpenBlasWouldPick(@TempDir Path dir) throws Exception {
        Map<String, float[]> plain = train(dir, "java", null, "java");
        Map<String, float[]> nehalem = train(dir, "java-nehalem", "Nehalem", "java");
        assertEquals(0, differingBits(plain, nehalem), "the pure-JVM matmul does not use OpenBLAS");
    }
}
