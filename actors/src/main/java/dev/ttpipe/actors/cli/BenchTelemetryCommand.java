package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.actors.runtime.PipelineRuntime;
import dev.ttpipe.actors.telemetry.Json;
import dev.ttpipe.actors.telemetry.MetricsServer;
import dev.ttpipe.actors.telemetry.StepAnalysis;
import dev.ttpipe.actors.telemetry.Stragglers;
import dev.ttpipe.actors.train.TrainingJob;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * {@code ttpipe bench telemetry CONFIG}: what live telemetry costs the training step. One pipeline,
 * its /metrics endpoint up; blocks of steps alternate between no scraper and a scraper hitting
 * /metrics every second (each scrape asks every rank for its state), so the host's noise falls on both.
 */
@Command(name = "telemetry",
        mixinStandardHelpOptions = true,
        description = {"Time training steps with and without /metrics scraped every second.",
                "Scraped against not scraped, in alternating blocks of steps on one pipeline; reports the medians and their ratio."},
        footer = {"", "Examples:",
                "  ttpipe bench telemetry configs/nanogpt-pp4-1f1b.yaml",
                "  ttpipe bench telemetry configs/nanogpt-pp4-1f1b.yaml --blocks 6 --block-steps 10 --json"})
public final class BenchTelemetryCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "CONFIG", description = "A training config YAML.")
    Path config;

    @Mixin
    JobOptions job = new JobOptions();

    @Option(names = "--blocks", paramLabel = "N", defaultValue = "6", description = "Blocks of each kind (default ${DEFAULT-VALUE}).")
    int blocks;

    @Option(names = "--block-steps", paramLabel = "N", defaultValue = "8", description = "Steps per block (default ${DEFAULT-VALUE}).")
    int blockSteps;

    @Option(names = "--json", description = "Print one JSON object.")
    boolean json;

    @Override
    public Integer call() throws Exception {
        if (blocks < 1 || blockSteps < 1) throw new UserInputException("--blocks and --block-steps: expected positive integers");
        TtpipeConfig cfg = job.resolve(config, null);
        TrainingJob training = TrainingJob.fromConfig(cfg);
        List<Double> off = new ArrayList<>(), on = new ArrayList<>();
        AtomicBoolean scraping = new AtomicBoolean();
        AtomicInteger scrapes = new AtomicInteger();
        try (PipelineRuntime runtime = PipelineRuntime.start(training.plan());
             MetricsServer server = MetricsServer.start(runtime, "127.0.0.1", 0)) {
            HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
            Thread scraper = new Thread(() -> {
                while (!Thread.currentThread().isInterrupted()) {
                    try {
                        if (scraping.get()) {
                            http.send(HttpRequest.newBuilder(URI.create(server.url() + "/metrics")).build(),
                                    HttpResponse.BodyHandlers.discarding());
                            scrapes.incrementAndGet();
                        }
                        Thread.sleep(1000);
                    } catch (InterruptedException e) {
                        return;
                    } catch (Exception e) {
                        // a failed scrape still cost what it cost
                    }
                }
            }, "ttpipe-bench-scraper");
            scraper.setDaemon(true);
            scraper.start();
            Stragglers stragglers = new Stragglers(training.plan(), true);        // as the training loop does
            int step = 0;
            runtime.step(step, training.batches(step));                      // warm-up
            step++;
            for (int b = 0; b < 2 * blocks; b++) {
                boolean withScrapes = b % 2 == 1;
                scraping.set(withScrapes);
                for (int k = 0; k < blockSteps; k++, step++) {
                    var r = runtime.step(step, training.batches(step));
                    stragglers.observe(r);
                    server.stepped(r, StepAnalysis.of(training.plan().schedule(), r), stragglers.view());
                    (withScrapes ? on : off).add(r.seconds() * 1e3);
                }
            }
            scraper.interrupt();
        }
        double mOff = median(off), mOn = median(on);
        if (json) {
            System.out.println("{\"config\":" + Json.str(config.toString()) + ",\"steps_each\":" + off.size() + ",\"off_ms\":"
                    + Json.num(mOff) + ",\"scraped_ms\":" + Json.num(mOn) + ",\"ratio\":" + Json.num(mOn / mOff)
                    + ",\"scrapes\":" + scrapes.get() + "}");
        } else {
            System.out.printf(Locale.ROOT, "bench telemetry: %s, %d steps each, alternating blocks of %d%n", config, off.size(), blockSteps);
            System.out.printf(Locale.ROOT, "median step: %.1f ms not scraped, %.1f ms with /metrics scraped every second (%d scrapes):"
                    + " %+.1f%%%n", mOff, mOn, scrapes.get(), 100 * (mOn / mOff - 1));
        }
        return Main.EXIT_OK;
    }

    /** The median of {@code v} (the mean of the middle two when even; NaN when empty); the cli's benches share it. */
    static double median(List<Double> v) {
        if (v.isEmpty()) return Double.NaN;
        double[] s = v.stream().mapToDouble(Double::doubleValue).toArray();
        Arrays.sort(s);
        return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    }
}
