package dev.ttpipe.actors;

/** The exit codes of every ttpipe command and worker process. */
public final class ExitCodes {
    /** The job did what was asked. */
    public static final int OK = 0;
    /** Anything else: a failed step, a mismatch in verify, a lost worker. */
    public static final int FAILURE = 1;
    /** Bad input: a config key, a flag or a file, named in one line. */
    public static final int BAD_INPUT = 2;

    private ExitCodes() {
    }
}
