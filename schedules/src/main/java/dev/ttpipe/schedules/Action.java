package dev.ttpipe.schedules;

/**
 * One entry of a schedule row: a stage does one kind of work on one microbatch.
 *
 * <p>The text form is {@code {stage}{KIND}{microbatch}}, e.g. {@code 2F0} or {@code 1SEND_B3}; an
 * action without a microbatch ({@code 0REDUCE_GRAD}) has {@code microbatch == -1} and no trailing
 * number. {@link #parse} and {@link #toString} are inverses.
 *
 * @param stage      pipeline stage (not rank), from 0
 * @param kind       what is done
 * @param microbatch microbatch index from 0, or -1 for REDUCE_GRAD and OPTIMIZER_STEP without one
 */
public record Action(int stage, ActionKind kind, int microbatch) {

    public Action {
        if (kind == null) throw new IllegalArgumentException("action kind is null");
        if (stage < 0) throw new IllegalArgumentException("stage " + stage + " of a " + kind + " action is negative");
        if (microbatch < -1 || (microbatch == -1 && kind.needsMicrobatch())) {
            throw new IllegalArgumentException("a " + kind + " action needs a microbatch >= 0, got " + microbatch);
        }
    }

    /** An action without a microbatch (REDUCE_GRAD, OPTIMIZER_STEP). */
    public Action(int stage, ActionKind kind) {
        this(stage, kind, -1);
    }

    /**
     * Parses the text form, e.g. {@code 2F0}, {@code 1SEND_B3}, {@code 0REDUCE_GRAD}. Surrounding
     * whitespace is ignored.
     *
     * @throws ScheduleException naming the text and the expected form when it is not an action
     */
    public static Action parse(String text) {
        String s = text.strip();
        int i = 0;
        while (i < s.length() && isDigit(s.charAt(i))) i++;
        int digitsEnd = i;
        while (i < s.length() && !isDigit(s.charAt(i))) i++;
        int kindEnd = i;
        while (i < s.length() && isDigit(s.charAt(i))) i++;
        if (digitsEnd == 0 || kindEnd == digitsEnd || i != s.length() || digitsEnd > 9 || i - kindEnd > 9) {
            throw new ScheduleException(badAction(text));
        }
        ActionKind kind = kindOf(s.substring(digitsEnd, kindEnd));
        if (kind == null) throw new ScheduleException(badAction(text));
        int stage = Integer.parseInt(s, 0, digitsEnd, 10);
        int microbatch = kindEnd == s.length() ? -1 : Integer.parseInt(s, kindEnd, s.length(), 10);
        if (microbatch == -1 && kind.needsMicrobatch()) {
            throw new ScheduleException("bad action \"" + text.strip() + "\": a " + kind
                    + " action needs a microbatch number, e.g. " + stage + kind + "0");
        }
        return new Action(stage, kind, microbatch);
    }

    /** Whether there is a microbatch ({@code microbatch >= 0}). */
    public boolean hasMicrobatch() {
        return microbatch >= 0;
    }

    @Override
    public String toString() {
        return microbatch < 0 ? stage + kind.name() : stage + kind.name() + microbatch;
    }

    private static boolean isDigit(char c) {
        return c >= '0' && c <= '9';
    }

    private static ActionKind kindOf(String name) {
        for (ActionKind k : ActionKind.values()) {
            if (k.name().equals(name)) return k;
        }
        return null;
    }

    static String badAction(String text) {
        return "bad action \"" + text.strip() + "\": expected {stage}{KIND}{microbatch} such as 2F0 or 1SEND_B3,"
                + " KIND one of F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B, REDUCE_GRAD, OPTIMIZER_STEP";
    }
}
