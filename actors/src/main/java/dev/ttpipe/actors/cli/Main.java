package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.ExitCodes;
import dev.ttpipe.actors.UserInputException;
import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import dev.ttpipe.actors.config.ConfigException;
import dev.ttpipe.actors.runtime.Faults;
import dev.ttpipe.actors.runtime.PipelineFailure;
import dev.ttpipe.schedules.ScheduleException;
import dev.ttpipe.stages.StagesException;
import dev.ttpipe.stages.checkpoint.CheckpointException;
import dev.ttpipe.stages.data.DataException;
import org.slf4j.LoggerFactory;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.PrintWriter;

/**
 * The {@code ttpipe} command line: one subcommand per user job.
 *
 * <p>Exit codes: 0 ok, 2 bad input (config, flags, files), 1 anything else. Errors are one line;
 * {@code --verbose} adds debug logging and stack traces.
 */
@Command(name = "ttpipe",
        mixinStandardHelpOptions = true,
        versionProvider = Main.Version.class,
        description = {"Actor-based, asynchronous pipeline-parallel trainer for Tenstorrent meshes (and any JVM).", ""},
        subcommands = {
                TrainCommand.class,
                VerifyCommand.class,
                WorkerCommand.class,
                LaunchCommand.class,
                SimulateCommand.class,
                TuneCommand.class,
                TopCommand.class,
                ReportCommand.class,
                BenchCommand.class,
                PrepareCommand.class,
                ExportCommand.class,
                EvalCommand.class,
                GenerateCommand.class,
                CommandLine.HelpCommand.class,
        },
        footer = {"", "Run 'ttpipe COMMAND --help' for a command's options and examples."})
public final class Main implements Runnable {

    public static final int EXIT_OK = ExitCodes.OK;
    public static final int EXIT_FAILURE = ExitCodes.FAILURE;
    public static final int EXIT_BAD_INPUT = ExitCodes.BAD_INPUT;

    @Option(names = "--verbose", scope = CommandLine.ScopeType.INHERIT,
            description = "Debug logging, and stack traces on errors.")
    void setVerbose(boolean verbose) {
        Main.verbose = verbose;
        Logger root = (Logger) LoggerFactory.getLogger(org.slf4j.Logger.ROOT_LOGGER_NAME);
        root.setLevel(verbose ? Level.DEBUG : Level.WARN);
        ((Logger) LoggerFactory.getLogger("org.apache.pekko")).setLevel(verbose ? Level.INFO : Level.ERROR);
    }

    static volatile boolean verbose;

    /** This process's command line after the jar, when {@link #main} started it (null where a test calls {@link #run}). */
    static volatile String[] processArgs;

    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    /** Faults the commands that start a pipeline inject into it: none, but in tests. */
    private final Faults faults;

    private Main(Faults faults) {
        this.faults = faults;
    }

    /** What a pipeline started by a subcommand gets injected (for {@code @ParentCommand} fields). */
    Faults faults() {
        return faults;
    }

    @Override
    public void run() {
        spec.commandLine().usage(spec.commandLine().getOut());
    }

    public static void main(String[] args) {
        processArgs = args.clone();
        System.exit(run(args));
    }

    /** Runs the command line and returns the exit code (tests call this instead of {@link #main}). */
    public static int run(String... args) {
        return run(Faults.NONE, args);
    }

    /** Runs the command line with {@code faults} injected into the pipelines it starts (tests). */
    static int run(Faults faults, String... args) {
        LoggerFactory.getILoggerFactory(); // initialise logging before any other thread logs (no SLF4J replay notice)
        return newCommandLine(new PrintWriter(System.out, true), new PrintWriter(System.err, true), faults).execute(args);
    }

    static CommandLine newCommandLine(PrintWriter out, PrintWriter err) {
        return newCommandLine(out, err, Faults.NONE);
    }

    private static CommandLine newCommandLine(PrintWriter out, PrintWriter err, Faults faults) {
        CommandLine cl = new CommandLine(new Main(faults));
        cl.setOut(out);
        cl.setErr(err);
        cl.setCaseInsensitiveEnumValuesAllowed(true);
        cl.setUsageHelpAutoWidth(true);
        WrappedHelp.install(cl);
        cl.setExitCodeExceptionMapper(Main::exitCodeOf);
        cl.setParameterExceptionHandler((ex, argv) -> {
            CommandLine c = ex.getCommandLine();
            c.getErr().println("ttpipe: " + ex.getMessage());
            c.getErr().println("Run '" + c.getCommandSpec().qualifiedName() + " --help' for usage.");
            return EXIT_BAD_INPUT;
        });
        cl.setExecutionExceptionHandler((ex, c, parseResult) -> {
            c.getErr().println("ttpipe: " + oneLine(ex));
            if (verbose) ex.printStackTrace(c.getErr());
            c.getErr().flush();
            return exitCodeOf(ex);
        });
        return cl;
    }

    static int exitCodeOf(Throwable ex) {
        for (Throwable t = ex; t != null; t = t.getCause()) {
            if (t instanceof ConfigException || t instanceof UserInputException
                    || t instanceof CommandLine.ParameterException || t instanceof ScheduleException
                    || t instanceof StagesException
                    || t instanceof CheckpointException
                    || t instanceof DataException) {
                return EXIT_BAD_INPUT;
            }
        }
        return EXIT_FAILURE;
    }

    /** The message a user sees: the user-facing cause if there is one, else the exception itself. */
    static String oneLine(Throwable ex) {
        for (Throwable t = ex; t != null; t = t.getCause()) {
            if (t instanceof ConfigException || t instanceof UserInputException
                    || t instanceof ScheduleException || t instanceof StagesException
                    || t instanceof CheckpointException
                    || t instanceof DataException
                    || t instanceof PipelineFailure) {
                return t.getMessage();
            }
        }
        Throwable root = ex;
        while (root.getCause() != null && root.getCause() != root) root = root.getCause();
        String msg = root.getMessage();
        String what = root.getClass().getSimpleName();
        return msg == null ? what + (verbose ? "" : " (run with --verbose for the stack trace)")
                : msg + (verbose ? "" : "  [" + what + "; --verbose for the stack trace]");
    }

    /** {@code --version}: from the jar manifest, with the JVM it runs on. */
    static final class Version implements CommandLine.IVersionProvider {
        @Override
        public String[] getVersion() {
            String v = Main.class.getPackage().getImplementationVersion();
            return new String[]{
                    "ttpipe " + (v == null ? "(development build)" : v),
                    "JVM: " + System.getProperty("java.vm.name") + " " + System.getProperty("java.version")
                            + " on " + System.getProperty("os.name") + " " + System.getProperty("os.arch")
                            + ", " + Runtime.getRuntime().availableProcessors() + " cpus"};
        }
    }
}
