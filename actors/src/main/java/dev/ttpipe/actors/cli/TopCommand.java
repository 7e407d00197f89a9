package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.telemetry.TopView;
import dev.ttpipe.stages.checkpoint.MiniJson;
import org.jline.terminal.Terminal;
import org.jline.terminal.TerminalBuilder;
import org.jline.utils.InfoCmp;
import org.jline.utils.NonBlockingReader;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** {@code ttpipe top}: a live terminal view of a running job, from its /status endpoint. */
@Command(name = "top",
        mixinStandardHelpOptions = true,
        description = {"Watch a running job live, rank by rank.",
                "Per rank the action it runs or the RECV it waits for (in the schedule notation),",
                "busy against idle, memory and queue depth; above, the step, a loss sparkline,",
                "tokens/s, measured and simulated bubble; below, the ranks and links named",
                "stragglers, with the blocks_per_rank that would even them out.",
                "Refreshes about twice a second; q quits. --once prints one snapshot (for",
                "scripts and logs)."},
        footer = {"", "Examples:",
                "  ttpipe top                                   # the job on 127.0.0.1:9464",
                "  ttpipe top runs/20261123-101500-arithmetic  # the address its run.json records",
                "  ttpipe top --url 10.0.0.1:9464 --once",
                "  ttpipe top --once --json                     # the job's /status object, as it answers"})
public final class TopCommand implements Callable<Integer> {
    @Parameters(index = "0", arity = "0..1", paramLabel = "RUN_DIR", description = "A running job's run directory.")
    Path runDir;

    @Option(names = "--url", paramLabel = "HOST:PORT", description = "The job's telemetry address (default 127.0.0.1:9464).")
    String url;

    @Option(names = "--once", description = "Print one snapshot and exit.")
    boolean once;

    @Option(names = "--json", description = "With --once: print the job's /status object (JSON, one line) instead of the view.")
    boolean json;

    @Override
    public Integer call() throws Exception {
        if (json && !once) throw new UserInputException("--json given without --once, expected --once --json (one snapshot as JSON)");
        String base = base();
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
        TopView view = new TopView();
        if (json) {
            System.out.println(fetchBody(http, base).strip());
            return Main.EXIT_OK;
        }
        if (once) {
            Map<?, ?> status = fetch(http, base);
            view.observe(status);
            System.out.print(view.render(base, status, 80));
            return Main.EXIT_OK;
        }
        try (Terminal terminal = TerminalBuilder.builder().system(true).build()) {
            terminal.enterRawMode();
            NonBlockingReader keys = terminal.reader();
            while (true) {
                String screen;
                try {
                    Map<?, ?> status = fetch(http, base);
                    view.observe(status);
                    int height = terminal.getHeight() > 0 ? terminal.getHeight() : Integer.MAX_VALUE;
                    screen = view.render(base, status, terminal.getWidth(), height);
                } catch (UserInputException e) {
                    screen = e.getMessage() + "\n(retrying; q quits)\n";
                }
                terminal.puts(InfoCmp.Capability.clear_screen);
                terminal.writer().print(screen.replace("\n", "\r\n"));
                terminal.writer().print("q quits\r\n");
                terminal.flush();
                int c = keys.read(500);
                if (c == 'q' || c == 'Q' || c == 3) return Main.EXIT_OK;
            }
        }
    }

    private String base() throws IOException {
        if (url != null) {
            String u = url.startsWith("http://") ? url : "http://" + url;
            if (!u.matches("http://[^/:]+:\\d+/?")) throw new UserInputException("--url: '" + url + "' given, expected HOST:PORT");
            return u.replaceAll("/$", "");
        }
        if (runDir != null) {
            Path record = runDir.resolve("run.json");
            if (!Files.isRegularFile(record)) {
                throw new UserInputException(runDir + ": no run.json, expected the run directory of a running `ttpipe train`");
            }
            Matcher m = Pattern.compile("\"telemetry_url\": \"([^\"]+)\"").matcher(Files.readString(record));
            if (!m.find()) throw new UserInputException(record + ": no telemetry_url (the run serves no endpoint: telemetry.port 0?)");
            return m.group(1);
        }
        return "http://127.0.0.1:9464";
    }

    private static Map<?, ?> fetch(HttpClient http, String base) {
        Object parsed;
        try {
            parsed = MiniJson.parse(fetchBody(http, base));
        } catch (IllegalArgumentException e) {
            throw new UserInputException(base + "/status: the reply is not valid JSON (" + e.getMessage() + ")");
        }
        if (!(parsed instanceof Map<?, ?> m)) throw new UserInputException(base + "/status: the reply is not a JSON object");
        return m;
    }

    /** The most of a /status reply that is read (a 256-rank job's is tens of KB). */
    private static final int MAX_STATUS_BYTES = 16 << 20;

    /** The /status answer as it came (a JSON object). */
    private static String fetchBody(HttpClient http, String base) {
        try {
            HttpResponse<InputStream> r = http.send(HttpRequest.newBuilder(URI.create(base + "/status")).timeout(Duration.ofSeconds(5))
                    .build(), HttpResponse.BodyHandlers.ofInputStream());
            try (InputStream in = r.body()) {
                if (r.statusCode() != 200) throw new UserInputException(base + "/status answered " + r.statusCode());
                byte[] body = in.readNBytes(MAX_STATUS_BYTES + 1);
                if (body.length > MAX_STATUS_BYTES) {
                    throw new UserInputException(base + "/status: the reply is over the limit of " + MAX_STATUS_BYTES + " bytes");
                }
                return new String(body, StandardCharsets.UTF_8);
            }
        } catch (IOException e) {
            throw new UserInputException(base + ": no job answers (" + e.getClass().getSimpleName() + "); is it running, and is"
                    + " telemetry.port set?");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new UserInputException("interrupted");
        }
    }
}
