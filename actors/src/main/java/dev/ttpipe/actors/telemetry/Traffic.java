package dev.ttpipe.actors.telemetry;

import dev.ttpipe.actors.runtime.ActionEvent;
import dev.ttpipe.schedules.ActionKind;
import dev.ttpipe.schedules.Schedule;

import java.util.List;

/**
 * What moved between ranks in one step, from its events: bytes from rank to rank (each SEND counted
 * at its sender and at the rank of the stage it goes to) and the time each rank waited on receives.
 */
public record Traffic(double[][] bytes, double[] recvWaitSeconds) {

    public static Traffic of(List<ActionEvent> events, Schedule schedule) {
        int ranks = schedule.ranks();
        double[][] bytes = new double[ranks][ranks];
        double[] waited = new double[ranks];
        for (ActionEvent e : events) {
            if (e.kind() == ActionKind.SEND_F || e.kind() == ActionKind.SEND_B) {
                int to = schedule.rankOfStage(e.kind() == ActionKind.SEND_F ? e.stage() + 1 : e.stage() - 1);
                bytes[e.rank()][to] += e.bytes();
            } else if (e.kind() == ActionKind.RECV_F || e.kind() == ActionKind.RECV_B) {
                waited[e.rank()] += e.waitNs() / 1e9;
            }
        }
        return new Traffic(bytes, waited);
    }

    /** Bytes each rank sent. */
    public double[] sent() {
        double[] out = new double[bytes.length];
        for (int r = 0; r < bytes.length; r++) for (double b : bytes[r]) out[r] += b;
        return out;
    }

    /** Bytes each rank received. */
    public double[] received() {
        double[] out = new double[bytes.length];
        for (double[] from : bytes) for (int r = 0; r < from.length; r++) out[r] += from[r];
        return out;
    }
}
