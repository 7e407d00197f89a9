package dev.ttpipe.actors.config;

/** Checks the schedule name and microbatch count against the schedule engine. */
final class ScheduleCheck {
    private ScheduleCheck() {
    }

    static void check(TtpipeConfig cfg, ConfigProblems p) {
        // wired to dev.ttpipe.schedules once that module lands
    }
}
