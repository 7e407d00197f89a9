package dev.ttpipe.actors.train;

import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.runtime.HostName;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.device.cpu.CpuKernels;
import dev.ttpipe.device.ttnn.BridgeLibrary;
import dev.ttpipe.stages.checkpoint.SafeTensors;

import java.io.IOException;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Instant;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * {@code run.json} in a run directory: what ran and how it ended, so a run can be reproduced and
 * compared: the command line and the flags it applied, ttpipe's version and git commit, the JVM and
 * host, the launcher that started a multi-process job's workers, the matmul kernel the cpu backend
 * loaded, the bridge library the ttnn backend ran on (the TTNN C++ shim or the reference C emulation,
 * and its path), the data file's SHA-256, a multi-process job's link check (every link's latency and bandwidth), the status ({@code running}, {@code finished},
 * {@code preempted} with what stopped it and the command that resumes it, {@code interrupted at step N},
 * {@code failed: ...}), the steps done and the final validation loss. Rewritten (atomically) at the
 * start and at the end.
 */
public final class RunRecord {
    private final Map<String, String> fixed = new LinkedHashMap<>();
    private final Path file;

    RunRecord(Path runDir, List<String> commandLine, Map<String, String> flags, String dataPath) {
        this.file = runDir.resolve("run.json");
        fixed.put("command_line", Json.str(String.join(" ", commandLine)));
        StringBuilder f = new StringBuilder("{");
        for (Map.Entry<String, String> e : flags.entrySet()) {
            f.append(f.length() == 1 ? "" : ",").append(Json.str(e.getKey())).append(':').append(Json.str(e.getValue()));
        }
        fixed.put("flags", f.append('}').toString());
        fixed.put("ttpipe_version", Json.str(Checkpoints.version()));
        fixed.put("git_commit", Json.str(gitCommit()));
        fixed.put("jvm", Json.str(System.getProperty("java.vm.name") + " " + System.getProperty("java.runtime.version")));
        fixed.put("collector", Json.str(String.join(", ", ManagementFactory.getGarbageCollectorMXBeans().stream()
                .map(GarbageCollectorMXBean::getName).toList())));
        fixed.put("host", Json.str(HostName.get()));
        fixed.put("processors", Integer.toString(Runtime.getRuntime().availableProcessors()));
        fixed.put("cpu", Json.str(cpuModel()));
        fixed.put("started", Json.str(Instant.now().toString()));
        fixed.put("data_path", dataPath == null ? "null" : Json.str(dataPath));
        fixed.put("data_sha256", dataPath == null ? "null" : Json.str(sha256(Path.of(dataPath))));
    }

    /** Backend ttnn: the bridge library this process loaded (null: none, its ranks run elsewhere). */
    void bridgeLibrary(BridgeLibrary.Loaded lib) {
        fixed.put("bridge_library", lib == null ? "null"
                : "{\"kind\": " + Json.str(lib.kind()) + ", \"implementation\": " + Json.str(lib.implementation())
                        + ", \"path\": " + Json.str(lib.path().toString()) + "}");
    }

    /**
     * Which launcher started the job's workers (SLURM, torchrun, ...) and the variables rank 0 read it from; where the
     * ranks found each other through rank 0 ({@code peers} not null), {@code "peers": "through rank 0"} and every
     * rank's endpoint, each marked whether it announced it ({@code announced}) or the config or launcher gave it.
     */
    void launcher(String engine, Map<String, String> variables, Deployment peers, List<Integer> announced) {
        StringBuilder v = new StringBuilder("{");
        for (Map.Entry<String, String> e : variables.entrySet()) {
            v.append(v.length() == 1 ? "" : ", ").append(Json.str(e.getKey())).append(": ").append(Json.str(e.getValue()));
        }
        StringBuilder p = new StringBuilder();
        if (peers != null) {
            p.append(", \"peers\": \"through rank 0\", \"endpoints\": [");
            for (Deployment.Binding b : peers.bindings()) {
                p.append(b.rank() == 0 ? "" : ", ").append("{\"rank\": ").append(b.rank()).append(", \"control\": ")
                        .append(Json.str(b.controlAddress())).append(", \"data\": ").append(Json.str(b.dataAddress()))
                        .append(", \"announced\": ").append(announced.contains(b.rank())).append('}');
            }
            p.append(']');
        }
        fixed.put("launcher", "{\"engine\": " + Json.str(engine) + ", \"variables\": " + v.append('}') + p + "}");
    }

    /** A run stopped at a step boundary: what stopped it (SIGTERM, ...) and the command that resumes it. */
    void preempted(String by, String resumeCommand) {
        fixed.put("preempted_by", Json.str(by));
        fixed.put("resume_command", resumeCommand == null ? "null" : Json.str(resumeCommand));
    }

    /** A multi-process job's link check before step 1: every link's figures and what the check sent (JSON, see LinkTable). */
    void links(String links, String check) {
        fixed.put("links", links);
        fixed.put("link_check", check);
    }

    /** The address of the job's telemetry endpoint. */
    void telemetry(String url) {
        fixed.put("telemetry_url", Json.str(url));
    }

    /** Writes the record with its current status. */
    void write(String status, int stepsDone, double validationLoss) throws IOException {
        StringBuilder sb = new StringBuilder("{\n");
        for (Map.Entry<String, String> e : fixed.entrySet()) {
            sb.append("  ").append(Json.str(e.getKey())).append(": ").append(e.getValue()).append(",\n");
        }
        String kernel = CpuKernels.matmul();
        sb.append("  \"matmul_kernel\": ").append(kernel == null ? "null" : Json.str(kernel)).append(",\n");
        String bf16 = CpuKernels.bf16Matmul();
        sb.append("  \"bf16_matmul_kernel\": ").append(bf16 == null ? "null" : Json.str(bf16)).append(",\n");
        sb.append("  \"elementwise_kernels\": ").append(kernel == null ? "null" : Json.str(CpuKernels.elementwise())).append(",\n");
        sb.append("  \"status\": ").append(Json.str(status)).append(",\n");
        sb.append("  \"steps_done\": ").append(stepsDone).append(",\n");
        sb.append("  \"validation_loss\": ").append(Json.num(validationLoss)).append(",\n");
        sb.append("  \"updated\": ").append(Json.str(Instant.now().toString())).append("\n}\n");
        Path tmp = file.resolveSibling("run.json.tmp");
        Files.writeString(tmp, sb, StandardCharsets.UTF_8);
        Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    static String gitCommit() {
        try {
            Process p = new ProcessBuilder("git", "rev-parse", "HEAD").redirectErrorStream(true).start();
            if (!p.waitFor(3, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                return "unknown";
            }
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).strip();
            return p.exitValue() == 0 && out.matches("[0-9a-f]{40}") ? out : "unknown (not in a git checkout)";
        } catch (IOException e) {
            return "unknown (no git)";
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return "unknown";
        }
    }

    /** The CPU as /proc/cpuinfo names it ("AMD EPYC 9R14 ..."), or the architecture elsewhere. */
    public static String cpuModel() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/cpuinfo"))) {
                if (line.startsWith("model name")) return line.substring(line.indexOf(':') + 1).strip();
            }
        } catch (IOException | RuntimeException ignored) {
            // not Linux
        }
        return System.getProperty("os.arch");
    }

    /**
     * A file's SHA-256; for a folder ({@code ttpipe prepare}'s output), the SHA-256 of its manifest: one line
     * {@code "<sha256>  <relative path>\n"} per regular file under it, sorted by path, as
     * {@code cd DIR && find . -type f -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' sha256sum | sha256sum} prints.
     */
    static String sha256(Path f) {
        try {
            if (!Files.isDirectory(f)) return SafeTensors.sha256(f);
            List<String> files;
            try (Stream<Path> walk = Files.walk(f)) {
                files = walk.filter(Files::isRegularFile).map(p -> f.relativize(p).toString().replace('\\', '/'))
                        .sorted(RunRecord::compareUtf8).toList();
            }
            MessageDigest manifest = MessageDigest.getInstance("SHA-256");
            for (String rel : files) {
                manifest.update((SafeTensors.sha256(f.resolve(rel)) + "  " + rel + "\n").getBytes(StandardCharsets.UTF_8));
            }
            return HexFormat.of().formatHex(manifest.digest());
        } catch (IOException e) {
            return "unreadable: " + e.getMessage();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Byte order of the UTF-8 forms, as {@code LC_ALL=C sort} orders them. */
    private static int compareUtf8(String a, String b) {
        return Arrays.compareUnsigned(a.getBytes(StandardCharsets.UTF_8), b.getBytes(StandardCharsets.UTF_8));
    }
}
