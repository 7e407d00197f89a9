package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.telemetry.Json;

import dev.ttpipe.transport.TransportBenchmark;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;

/**
 * {@code ttpipe bench transport}: tensor throughput of the transports on the real path (a cpu
 * backend tensor sent from rank 0 and materialized on rank 1's submesh) next to memcpy of the same
 * size, measured in the same run. Prints figures; never passes or fails on them.
 */
@Command(name = "transport",
        mixinStandardHelpOptions = true,
        description = {"Measure tensor throughput between two ranks over each transport, against memcpy of the same size.",
                "An fp32 tensor on the cpu backend goes from rank 0 to rank 1 and is materialized on rank 1's submesh "
                        + "by a stage thread, as in training. Each iteration sends a batch of tensors (about 256 MiB, "
                        + "2 to 32 tensors) back to back; the figure is the median over the iterations, after at least "
                        + "a second of warmup. memcpy copies the same batch between direct buffers.",
                "Channels: local (the tensor object is handed over, nothing copied), aeron-ipc (shared memory), "
                        + "aeron-udp (UDP over 127.0.0.1)."},
        footer = {"", "Examples:",
                "  ttpipe bench transport",
                "  ttpipe bench transport --sizes 4MiB --iterations 20",
                "  ttpipe bench transport --sizes 256KiB,1MiB,16MiB --channels aeron-ipc",
                "  ttpipe bench transport --channels aeron-udp --udp-mtu 65504",
                "  ttpipe bench transport --json > transport.json",
                "",
                "GB/s are 1e9 bytes per second. copies: how many times the payload is copied on the way (aeron-ipc: "
                        + "into the term buffer, into the receive buffer, onto the devices; aeron-udp adds two through "
                        + "the kernel's sockets)."})
public final class BenchTransportCommand implements Callable<Integer> {
    static final int MAX_ITERATIONS = 10_000;

    @Option(names = "--sizes", paramLabel = "SIZES", defaultValue = "1MiB,4MiB,64MiB",
            description = "Tensor sizes, comma-separated, with a unit B, KiB, MiB or GiB (default: ${DEFAULT-VALUE}).")
    String sizes;

    @Option(names = "--iterations", paramLabel = "N", defaultValue = "5",
            description = "Timed iterations per channel and size, after warmup (default: ${DEFAULT-VALUE}).")
    int iterations;

    @Option(names = "--channels", paramLabel = "CHANNELS", defaultValue = "local,aeron-ipc,aeron-udp",
            description = "Channels to measure, comma-separated (default: ${DEFAULT-VALUE}).")
    String channels;

    @Option(names = "--udp-mtu", paramLabel = "BYTES", defaultValue = "8192",
            description = "UDP datagram size for aeron-udp: a multiple of 32 from 1408 to 65504 (default: ${DEFAULT-VALUE}, "
                    + "the transport's default; 65504 suits loopback, 1408 any network).")
    int udpMtu;

    @Option(names = "--json", description = "Print one JSON array (an object per channel and size) instead of the table.")
    boolean json;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() {
        List<Long> byteSizes = parseSizes(sizes);
        List<String> chans = parseChannels(channels);
        if (iterations < 1 || iterations > MAX_ITERATIONS) {
            throw new UserInputException("--iterations " + iterations + ": expected an integer from 1 to " + MAX_ITERATIONS);
        }
        if (udpMtu < 1408 || udpMtu > 65504 || udpMtu % 32 != 0) {
            throw new UserInputException("--udp-mtu " + udpMtu + ": expected a multiple of 32 from 1408 to 65504");
        }
        PrintWriter err = spec.commandLine().getErr();
        List<TransportBenchmark.Result> results = TransportBenchmark.run(chans, byteSizes, iterations, udpMtu, step -> {
            if (!json) {
                err.println("measuring " + step + "...");
                err.flush();
            }
        });
        PrintWriter out = spec.commandLine().getOut();
        if (json) out.println(json(results));
        else table(out, results, iterations, udpMtu);
        out.flush();
        return Main.EXIT_OK;
    }

    static List<Long> parseSizes(String text) {
        List<Long> out = new ArrayList<>();
        String[] parts = text.split(",", -1);
        for (String part : parts) {
            try {
                out.add(TransportBenchmark.parseSize(part));
            } catch (IllegalArgumentException e) {
                throw new UserInputException("--sizes " + text + ": " + (parts.length > 1 ? "'" + part.trim() + "': " : "")
                        + e.getMessage());
            }
        }
        return out;
    }

    static List<String> parseChannels(String text) {
        List<String> out = new ArrayList<>();
        for (String part : text.split(",", -1)) {
            String c = part.trim().toLowerCase(Locale.ROOT);
            if (!TransportBenchmark.CHANNELS.contains(c)) {
                throw new UserInputException("--channels " + text + ": unknown channel '" + part.trim() + "', expected "
                        + String.join(", ", TransportBenchmark.CHANNELS));
            }
            if (!out.contains(c)) out.add(c);
        }
        return out;
    }

    static void table(PrintWriter out, List<TransportBenchmark.Result> results, int iterations, int udpMtu) {
        out.printf(Locale.ROOT, "tensor transport, rank 0 -> rank 1, fp32 on the cpu backend, median of %d iteration%s%s%n",
                iterations, iterations == 1 ? "" : "s",
                results.stream().anyMatch(r -> r.channel().equals("aeron-udp")) ? ", udp mtu " + udpMtu : "");
        out.printf(Locale.ROOT, "%-10s %9s %9s %12s %7s %7s %8s%n", "channel", "size", "GB/s", "memcpy GB/s", "ratio",
                "copies", "tensors");
        for (TransportBenchmark.Result r : results) {
            out.printf(Locale.ROOT, "%-10s %9s %9s %12.2f %7s %7d %8d%n", r.channel(), TransportBenchmark.human(r.bytes()),
                    gbps(r.gbps()), r.memcpyGbps(), ratio(r.ratio()), r.copies(), r.frames());
        }
        if (results.stream().anyMatch(r -> r.copies() == 0)) {
            out.println("local copies nothing: the tensor object is handed over; its GB/s is the size over the hand-over time.");
        }
    }

    private static String gbps(double x) {
        return x >= 1000 ? String.format(Locale.ROOT, "%.0f", x) : String.format(Locale.ROOT, "%.2f", x);
    }

    private static String ratio(double x) {
        return x >= 100 ? String.format(Locale.ROOT, "%.0f", x) : String.format(Locale.ROOT, "%.2f", x);
    }

    static String json(List<TransportBenchmark.Result> results) {
        StringBuilder b = new StringBuilder("[");
        for (int i = 0; i < results.size(); i++) {
            TransportBenchmark.Result r = results.get(i);
            b.append(i == 0 ? "\n  " : ",\n  ").append(String.format(Locale.ROOT,
                    "{\"channel\": %s, \"bytes\": %d, \"gbps\": %.4f, \"memcpy_gbps\": %.4f, \"ratio\": %.4f, "
                            + "\"copies\": %d, \"tensors_per_iteration\": %d, \"iterations\": %d, \"median_seconds\": %.6g}",
                    Json.str(r.channel()), r.bytes(), r.gbps(), r.memcpyGbps(), r.ratio(), r.copies(),
                    r.frames(), r.iterations(), r.medianSeconds()));
        }
        return b.append(results.isEmpty() ? "]" : "\n]").toString();
    }
}
