package dev.ttpipe.schedules;

/**
 * A schedule problem the user can fix: an unknown schedule name, an impossible microbatch count,
 * a CSV with a syntax error, a schedule that breaks a dependency or deadlocks.
 *
 * <p>The first line of the message is the reason, naming the thing, the value and what was
 * expected. For dependency and deadlock failures the message goes on with the rank-by-step grid
 * of the schedule, the first offending action marked; {@link #reason()} is then the first line
 * alone and {@link #grid()} the rest.
 */
public class ScheduleException extends RuntimeException {
    private final String reason;
    private final String grid;

    public ScheduleException(String reason) {
        super(reason);
        this.reason = reason;
        this.grid = "";
    }

    /** A failure located in a schedule: {@code reason} is one line, {@code grid} shows where. */
    public ScheduleException(String reason, String grid) {
        super(grid.isEmpty() ? reason : reason + System.lineSeparator() + grid);
        this.reason = reason;
        this.grid = grid;
    }

    /** The one-line reason. */
    public String reason() {
        return reason;
    }

    /** The rank-by-step grid with the offending action marked, or "" when there is none. */
    public String grid() {
        return grid;
    }
}
