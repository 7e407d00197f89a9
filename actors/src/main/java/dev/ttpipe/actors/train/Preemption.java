package dev.ttpipe.actors.train;

import dev.ttpipe.actors.ExitCodes;
import dev.ttpipe.actors.telemetry.Terminal;
import sun.misc.Signal;
import sun.misc.SignalHandler;

import java.io.PrintStream;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;

/**
 * A request to stop a training job at the next step boundary. SIGTERM (what SLURM and Kubernetes send
 * before they kill a job) and SIGINT (Ctrl-C) are one mechanism: the job finishes the step it is in,
 * saves a checkpoint there, writes run.json with status {@code preempted} and prints the command that
 * resumes, and the command exits with 128 + the signal's number ({@link ExitCodes#SIGTERM} 143, {@link ExitCodes#SIGINT} 130).
 * A second signal stops the process at once, as the JVM does without this class (shutdown hooks, the same
 * exit codes). The workers of a multi-process job pass a request on to rank 0 ({@link #request}).
 * Thread-safe: the handlers run on the JVM's signal threads, the training loop polls {@link #requested}.
 */
public final class Preemption implements AutoCloseable {
    /** Who asked: the signal's name, the exit code it gives, and where it arrived ("" here, else "on rank R"). */
    public record Request(String signal, int exitCode, String where) {
        /** "SIGTERM", or "SIGTERM on rank 1". */
        public String describe() {
            return where.isEmpty() ? signal : signal + " " + where;
        }
    }

    private final AtomicReference<Request> request = new AtomicReference<>();
    private final List<Consumer<Request>> listeners = new ArrayList<>();
    private final Map<Signal, SignalHandler> previous = new LinkedHashMap<>();

    /** A request only {@link #request} makes (the Java API, tests): no signal handlers. */
    public Preemption() {
    }

    /** Handles SIGTERM and SIGINT in this process until {@link #close}; the first one is announced on {@code err}. */
    public static Preemption onSignals(PrintStream err) {
        return onSignals(err, true);
    }

    /**
     * {@link #onSignals(PrintStream)}; {@code secondStopsAtOnce} false: later signals are the same request again (a
     * worker of `ttpipe launch`, which passes its own signal on, gets a Ctrl-C twice: from the terminal and from launch).
     */
    public static Preemption onSignals(PrintStream err, boolean secondStopsAtOnce) {
        Preemption p = new Preemption();
        for (String name : List.of("TERM", "INT")) {
            Signal s = new Signal(name);
            p.previous.put(s, Signal.handle(s, sig -> p.signalled(sig, err, secondStopsAtOnce)));
        }
        return p;
    }

    private void signalled(Signal sig, PrintStream err, boolean secondStopsAtOnce) {
        Request r = new Request("SIG" + sig.getName(), 128 + sig.getNumber(), "");
        if (secondStopsAtOnce) restoreHandlers();                     // a second signal: stop at once
        if (request(r)) {
            err.println();
            Terminal.printWrapped(err, "ttpipe: " + r.signal() + ": finishing the current step, then saving a checkpoint and exiting"
                    + " with code " + r.exitCode() + (secondStopsAtOnce ? " (" + r.signal() + " again: stop at once)" : ""));
            err.flush();
        }
    }

    /** Asks the job to stop at the next step boundary; false (and nothing done) when it was asked before. */
    public boolean request(Request r) {
        List<Consumer<Request>> tell;
        synchronized (this) {
            if (!request.compareAndSet(null, r)) return false;
            tell = List.copyOf(listeners);
            listeners.clear();
        }
        for (Consumer<Request> l : tell) l.accept(r);
        return true;
    }

    /** The first request, or null while none came. */
    public Request requested() {
        return request.get();
    }

    /** Tells {@code listener} of the first request (at once when it already came). */
    public void onRequest(Consumer<Request> listener) {
        Request r;
        synchronized (this) {
            r = request.get();
            if (r == null) {
                listeners.add(listener);
                return;
            }
        }
        listener.accept(r);
    }

    /** The job is over: signals go back to the JVM's own handling. */
    @Override
    public void close() {
        restoreHandlers();
    }

    private void restoreHandlers() {
        synchronized (previous) {
            for (Map.Entry<Signal, SignalHandler> e : previous.entrySet()) Signal.handle(e.getKey(), e.getValue());
            previous.clear();
        }
    }

    /**
     * The command line that resumes the run in {@code runDir}: {@code invocation} (the command that started it) with
     * its --resume and --run-dir replaced by {@code --run-dir runDir --resume auto}, quoted for a POSIX shell.
     */
    public static String resumeCommand(List<String> invocation, Path runDir) {
        List<String> args = new ArrayList<>();
        for (int i = 0; i < invocation.size(); i++) {
            String a = invocation.get(i);
            if (a.equals("--resume") || a.equals("--run-dir")) {
                i++;
                continue;
            }
            if (a.startsWith("--resume=") || a.startsWith("--run-dir=")) continue;
            args.add(a);
        }
        args.addAll(List.of("--run-dir", runDir.toString(), "--resume", "auto"));
        StringBuilder sb = new StringBuilder();
        for (String a : args) sb.append(sb.length() == 0 ? "" : " ").append(quote(a));
        return sb.toString();
    }

    private static String quote(String arg) {
        if (!arg.isEmpty() && arg.matches("[A-Za-z0-9_@%+=:,./-]+")) return arg;
        return "'" + arg.replace("'", "'\\''") + "'";
    }
}
