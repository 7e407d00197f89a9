package dev.ttpipe.schedules;

import java.util.ArrayList;
import java.util.List;

/**
 * Where an action goes in a Chrome trace, shared by the simulator's trace and the runtime's measured
 * one so that both load into Perfetto side by side with the same names: one process per rank
 * ({@code rank r}), on it one track per stage for compute ({@code stage s}: F, B, I, W, and the
 * step's REDUCE_GRAD and OPTIMIZER_STEP) and one for its communication ({@code stage s comm}: SEND
 * and RECV), every span named in the action notation ({@code 2F0}, {@code 1RECV_B3}).
 */
public final class TraceLayout {
    private TraceLayout() {
    }

    /** The process of rank {@code rank}. */
    public static int pid(int rank) {
        return rank;
    }

    /** The track of {@code a} on its rank's process. */
    public static int tid(Action a) {
        return 2 * a.stage() + (a.kind().isComm() ? 2 : 1);
    }

    /** The span name: the action notation. */
    public static String spanName(Action a) {
        return a.toString();
    }

    /** The metadata events (JSON objects, one per entry) that name and order every process and track. */
    public static List<String> metadata(Schedule schedule) {
        List<String> out = new ArrayList<>();
        for (int r = 0; r < schedule.ranks(); r++) {
            out.add("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid(r) + ",\"tid\":0,\"args\":{\"name\":\"rank " + r + "\"}}");
            out.add("{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid(r) + ",\"tid\":0,\"args\":{\"sort_index\":" + r + "}}");
            for (int s : schedule.stagesOfRank(r)) {
                int compute = tid(new Action(s, ActionKind.F, 0));
                int comm = tid(new Action(s, ActionKind.SEND_F, 0));
                out.add(thread(r, compute, "stage " + s));
                out.add(thread(r, comm, "stage " + s + " comm"));
            }
        }
        return out;
    }

    private static String thread(int rank, int tid, String name) {
        return "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid(rank) + ",\"tid\":" + tid + ",\"args\":{\"name\":\""
                + name + "\"}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" + pid(rank) + ",\"tid\":" + tid
                + ",\"args\":{\"sort_index\":" + tid + "}}";
    }
}
