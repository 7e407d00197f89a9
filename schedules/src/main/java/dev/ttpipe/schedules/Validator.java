package dev.ttpipe.schedules;

/**
 * Proves a schedule can run: every action's dependencies exist and come first, every (stage,
 * microbatch) is computed exactly once, and executing the rows with blocking semantics finishes.
 *
 * <p>Dependencies checked: F(s,m) after F(s-1,m); B or I of (s,m) after F(s,m) and after the
 * input gradient (B or I) of (s+1,m); W(s,m) after I(s,m), and never together with B(s,m); a RECV
 * after its SEND, a SEND after the action that produces its data; REDUCE_GRAD and OPTIMIZER_STEP
 * of a stage after all its weight gradients. In a compute-only schedule a compute action blocks
 * until its cross-rank producer has run; in a lowered one a RECV blocks until its SEND has run
 * (a SEND never blocks). A hand-written schedule whose ranks wait on each other in a cycle is
 * rejected. Linear in the number of actions.
 */
public final class Validator {
    private Validator() {
    }

    /**
     * Validates {@code schedule}.
     *
     * @throws ScheduleException whose message is a one-line reason, then the rank-by-step grid
     *                           with the first offending action in brackets
     */
    public static void validate(Schedule schedule) {
        ActionGraph.of(schedule).executionOrder();
    }

    /** Whether {@code schedule} validates; the failure, if any, is in {@link Result#failure()}. */
    public static Result check(Schedule schedule) {
        try {
            validate(schedule);
            return new Result(null);
        } catch (ScheduleException e) {
            return new Result(e);
        }
    }

    /**
     * The outcome of {@link #check}.
     *
     * @param failure null when the schedule is valid
     */
    public record Result(ScheduleException failure) {
        public boolean ok() {
            return failure == null;
        }

        /** The one-line reason, or "" when valid. */
        public String reason() {
            return failure == null ? "" : failure.reason();
        }

        /** The grid with the offending action marked, or "" when valid. */
        public String grid() {
            return failure == null ? "" : failure.grid();
        }
    }
}
