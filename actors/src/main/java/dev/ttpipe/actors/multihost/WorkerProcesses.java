package dev.ttpipe.actors.multihost;

import dev.ttpipe.actors.config.SocketType;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.telemetry.LinkTable;
import dev.ttpipe.actors.train.TrainingJob;
import dev.ttpipe.actors.train.Verification;

import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;

/** How {@code ttpipe verify} starts a multi-process config: rank 0 in this JVM, ranks 1..P-1 as worker processes. */
public final class WorkerProcesses {
    private WorkerProcesses() {
    }

    /** True when {@code job} runs its ranks as separate processes (multihost, Aeron UDP). */
    public static boolean needed(TrainingJob job) {
        return job.config().multihost.enabled && job.plan().transport() == SocketType.AERON;
    }

    /**
     * The pipeline of a multi-process config: {@code configFile} and {@code workerArgs} start the worker processes
     * of ranks 1..P-1 on this machine; rank 0 runs here and joins them.
     */
    public static Verification.PipelineStart forVerify(Path configFile, List<String> workerArgs) {
        return (job, out) -> {
            Worker rank0 = new Worker(job, 0);
            out.println("multi-process: rank 0 here, ranks 1.." + (job.plan().ranks() - 1)
                    + " as worker processes (Aeron UDP on " + rank0.deployment().seed().host() + ")");
            Launcher workers = new Launcher(configFile, workerArgs, rank0.deployment(), out, System.err);
            PipelineRuntime runtime;
            try {
                workers.start(1, job.plan().ranks());
                runtime = rank0.start(Duration.ofSeconds(90));
            } catch (RuntimeException | IOException e) {
                workers.close();
                throw e;
            }
            try {
                out.print(LinkTable.text(job.checkLinks(runtime)));
            } catch (RuntimeException e) {
                runtime.close(e.getMessage());
                workers.close();
                throw e;
            }
            return new Verification.Started(runtime, () -> workers.finish(20));
        };
    }
}
