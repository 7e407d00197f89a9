package dev.ttpipe.actors;

/** The exit codes of every ttpipe command and worker process. */
public final class ExitCodes {
    /** The job did what was asked. */
    public static final int OK = 0;
    /** Anything else: a failed step, a mismatch in verify, a lost worker. */
    public static final int FAILURE = 1;
    /** Bad input: a config key, a flag or a file, named in one line. */
    public static final int BAD_INPUT = 2;
    /** Stopped by SIGINT (Ctrl-C) at a step boundary, a checkpoint saved: 128 + 2, as a shell reports it. */
    public static final int SIGINT = 130;
    /** Stopped by SIGTERM (SLURM's, Kubernetes') at a step boundary, a checkpoint saved: 128 + 15. */
    public static final int SIGTERM = 143;

    private ExitCodes() {
    }
}
