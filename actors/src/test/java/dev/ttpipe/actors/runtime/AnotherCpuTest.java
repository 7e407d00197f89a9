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
 * What another CPU changes, with this machine standing in for others: oneDNN and OpenBLAS pick their kernels by
 * the CPU, and {@code ONEDNN_MAX_CPU_ISA} and {@code OPENBLAS_CORETYPE} make them pick another CPU's. The reference
 * trainer of {@link BitIdentityTest} (clipping on) runs in a fresh JVM with this CPU's kernels and with an older
 * CPU's, each where this CPU runs them: oneDNN (the default engine) held to AVX2 and to SSE4.1, OpenBLAS
 * ({@code -Dttpipe.blas=blas}) given Haswell's (AVX2) and Nehalem's (SSE) kernels. Its weights after 3 AdamW steps
 * stay within the tolerance {@code verify} uses (1e-5, relative, the worst parameter); the test prints how many
 * elements differ in their bits. With the pure-JVM matmul ({@code -Dttpipe.blas=java}) another CPU changes
 * nothing: the same bits, checked here too. docs/determinism.md says which of these a resume or a recovery on
 * another host meets.
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

    /** The reference trainer's weights in a fresh JVM whose environment has {@code env} for the engines' ISA settings. */
    static Map<String, float[]> train(Path dir, String name, Map<String, String> env, String blas) throws Exception {
        Path file = dir.resolve(name + ".bin");
        List<String> cmd = new ArrayList<>();
        cmd.add(ProcessHandle.current().info().command().orElse("java"));
        cmd.addAll(ManagementFactory.getRuntimeMXBean().getInputArguments().stream()
                .filter(a -> !a.startsWith("-agentlib:jdwp") && !a.startsWith("-javaagent")).toList());
        if (blas != null) cmd.add("-Dttpipe.blas=" + blas);
        cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), AnotherCpuTest.class.getName(), file.toString()));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(dir.resolve(name + ".log").toFile());
        for (String k : List.of("OPENBLAS_CORETYPE", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")) pb.environment().remove(k);
        pb.environment().putAll(env);
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
    void anotherCpusKernelsStayWithinVerifysTolerance(@TempDir Path dir) throws Exception {
        assumeTrue(Files.isReadable(Path.of("/proc/cpuinfo")), "skipped: no /proc/cpuinfo to tell which kernels this CPU runs");
        Set<String> flags = cpuFlags();
        // engine (-Dttpipe.blas), its setting, and for each older CPU: its name there, and the flag this CPU needs beyond it
        String[][] engines = {{"dnnl", "ONEDNN_MAX_CPU_ISA", "AVX2", "avx512f", "SSE41", "avx2"},
                {"blas", "OPENBLAS_CORETYPE", "Haswell", "avx2", "Nehalem", "sse4_2"}};
        int others = 0;
        for (String[] e : engines) {
            Map<String, float[]> here = train(dir, e[0] + "-this-cpu", Map.of(), e[0]);
            for (int i = 2; i < e.length; i += 2) {
                if (!flags.contains(e[i + 1])) continue;
                others++;
                Map<String, float[]> there = train(dir, e[0] + "-" + e[i], Map.of(e[1], e[i]), e[0]);
                WeightDiff d = WeightDiff.compare(there, here);
                long total = here.values().stream().mapToLong(v -> v.length).sum();
                System.out.printf(Locale.ROOT, "AnotherCpuTest: %s=%s against this CPU's kernels: %d of %d weights differ in"
                        + " their bits, worst relative difference %.3e (%s)%n", e[1], e[i], differingBits(there, here), total,
                        d.maxRelative(), d.worstParam());
                assertTrue(d.maxRelative() < VERIFY_TOLERANCE, e[1] + "=" + e[i] + ": " + d.maxRelative() + " in " + d.worstParam());
            }
        }
        assumeTrue(others > 0, "skipped: this CPU runs no older kernels than its own (no avx2)");
    }

    @Test
    void thePureJvmMatmulGivesTheSameBitsWhateverTheLibrariesWouldPick(@TempDir Path dir) throws Exception {
        Map<String, float[]> plain = train(dir, "java", Map.of(), "java");
        Map<String, float[]> old = train(dir, "java-old-cpu", Map.of("OPENBLAS_CORETYPE", "Nehalem", "ONEDNN_MAX_CPU_ISA", "SSE41"), "java");
        assertEquals(0, differingBits(plain, old), "the pure-JVM matmul uses neither OpenBLAS nor oneDNN");
    }
}
