package dev.ttpipe.actors.runtime;


import java.util.List;
import java.util.Locale;

/**
 * The hang watchdog's diagnosis: when no rank has finished an action for a while, what each rank
 * is doing (running which action for how long, or waiting for which RECV from whom), and the blocking
 * chain from the longest wait to the rank everyone waits on:
 * {@code rank 3 waits 3RECV_F5 from rank 2, which waits 2RECV_F5 from rank 1, which is running 1F5 for 31.0 s}.
 */
public final class Watchdog {
    private Watchdog() {
    }

    /** What the watchdog's lines start with (the diagnosis, and a worker's notices about a rank that does not answer). */
    public static final String PREFIX = "ttpipe watchdog: ";

    /** How long no rank has finished an action, ms: the smallest "since finished" over ranks, at most the step's age. */
    public static long stalledMs(List<StageStats> stats, long stepMs) {
        long stalled = stepMs;
        for (StageStats s : stats) {
            if (s == null) continue;
            long since = s.waiting().sinceFinishedMs();
            if (since >= 0) stalled = Math.min(stalled, since);
        }
        return stalled;
    }

    /** The diagnosis, several lines: one per rank, then the blocking chain. {@code stats[r]} null: rank r did not answer. */
    public static String diagnose(List<StageStats> stats, long stalledMs) {
        StringBuilder sb = new StringBuilder(String.format(Locale.ROOT, "no rank has finished an action for %.1f s:", stalledMs / 1e3));
        int longest = -1;
        long longestMs = -1;
        for (int r = 0; r < stats.size(); r++) {
            StageStats s = stats.get(r);
            sb.append("\n  rank ").append(r).append(": ");
            if (s == null) {
                sb.append("no answer (its process may be gone or stuck)");
                continue;
            }
            StageStats.Waiting w = s.waiting();
            sb.append(state(w));
            if (w.lastFinished() != null) {
                sb.append(String.format(Locale.ROOT, "; last finished %s %.1f s ago", w.lastFinished(), w.sinceFinishedMs() / 1e3));
            }
            if (w.waitingFor() != null && w.waitingMs() > longestMs) {
                longest = r;
                longestMs = w.waitingMs();
            }
        }
        if (longest >= 0) sb.append("\n  blocking chain: ").append(chain(stats, longest));
        return sb.toString();
    }

    private static String state(StageStats.Waiting w) {
        StringBuilder sb = new StringBuilder();
        if (w.running() != null) sb.append(String.format(Locale.ROOT, "running %s for %.1f s", w.running(), w.runningMs() / 1e3));
        if (w.waitingFor() != null) {
            if (sb.length() > 0) sb.append(", ");
            sb.append(String.format(Locale.ROOT, "waits %s from rank %d for %.1f s", w.waitingFor(), w.waitingFromRank(),
                    w.waitingMs() / 1e3));
        }
        if (sb.length() == 0) sb.append(w.inPass() ? "idle in the pass" : "idle between passes");
        return sb.toString();
    }

    /** rank r waits X from q, which waits Y from p, which is running Z for T s. */
    static String chain(List<StageStats> stats, int start) {
        StringBuilder sb = new StringBuilder();
        boolean[] seen = new boolean[stats.size()];
        int r = start;
        boolean firstLink = true;
        while (r >= 0 && r < stats.size() && !seen[r]) {
            seen[r] = true;
            StageStats s = stats.get(r);
            String who = firstLink ? "rank " + r : "which";
            if (s == null) {
                sb.append(firstLink ? "rank " + r : "rank " + r + ",").append(" does not answer");
                return sb.toString();
            }
            StageStats.Waiting w = s.waiting();
            if (w.waitingFor() != null && w.running() == null) {
                sb.append(who).append(" waits ").append(w.waitingFor()).append(" from rank ").append(w.waitingFromRank()).append(", ");
                r = w.waitingFromRank();
            } else {
                sb.append(who).append(firstLink ? " is " : " is ").append(state(w));
                return sb.toString();
            }
            firstLink = false;
        }
        if (r >= 0 && r < stats.size() && seen[r]) sb.append("back to rank ").append(r).append(" (a cycle)");
        return sb.toString();
    }
}
