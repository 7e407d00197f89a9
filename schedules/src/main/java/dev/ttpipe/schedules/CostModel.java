package dev.ttpipe.schedules;

import java.util.Arrays;

/**
 * What each action costs, per stage: compute time of F, B, I and W, the time data takes to cross
 * between neighbouring stages, and optionally activation memory and memory limits. Times are in
 * one arbitrary unit of the caller's choice (milliseconds when the timeline goes to a Chrome
 * trace). Immutable.
 *
 * <p>Every per-stage value is given either once, for all stages, or as one value per stage; a
 * model with per-stage arrays only fits schedules with that many stages. {@code comm(s)} is the
 * latency of the hop between stage s and s+1, both directions; it is paid only when the two
 * stages live on different ranks. SEND and RECV actions occupy their rank for {@code
 * commOverhead} (default 0); REDUCE_GRAD and OPTIMIZER_STEP for their own costs (default 0).
 */
public final class CostModel {
    private final double[] forward;
    private final double[] backward;
    private final double[] backwardInput;
    private final double[] backwardWeight;
    private final double[] comm;
    private final double[] commOverhead;
    private final double[] reduceGrad;
    private final double[] optimizerStep;
    private final long[] memoryPerMicrobatchBytes;
    private final long[] memoryLimitBytes;
    private final int[] memoryLimitMicrobatches;
    private final double sharedProcessors;
    private final int stages;

    private CostModel(Builder b, double[] backward, double[] backwardInput, double[] backwardWeight) {
        this.forward = b.forward;
        this.backward = backward;
        this.backwardInput = backwardInput;
        this.backwardWeight = backwardWeight;
        this.comm = b.comm;
        this.commOverhead = b.commOverhead;
        this.reduceGrad = b.reduceGrad;
        this.optimizerStep = b.optimizerStep;
        this.memoryPerMicrobatchBytes = b.memoryPerMicrobatchBytes;
        this.memoryLimitBytes = b.memoryLimitBytes;
        this.memoryLimitMicrobatches = b.memoryLimitMicrobatches;
        this.sharedProcessors = b.sharedProcessors;
        int n = 1;
        String first = null;
        Object[] all = {forward, backward, backwardInput, backwardWeight, comm, commOverhead, reduceGrad, optimizerStep,
                memoryPerMicrobatchBytes, memoryLimitBytes, memoryLimitMicrobatches};
        String[] names = {"forward", "backward", "backwardInput", "backwardWeight", "comm", "commOverhead", "reduceGrad",
                "optimizerStep", "memoryPerMicrobatchBytes", "memoryLimitBytes", "memoryLimitMicrobatches"};
        for (int k = 0; k < all.length; k++) {
            int len = length(all[k]);
            if (len <= 1) continue;
            if (n == 1) {
                n = len;
                first = names[k];
            } else if (len != n) {
                throw new IllegalArgumentException("cost model: " + names[k] + " has " + len + " stages but " + first
                        + " has " + n + "; give one value for all stages or one per stage");
            }
        }
        this.stages = n == 1 ? 0 : n;
    }

    /** The same F, B, I, W costs on every stage and the same latency on every hop; no memory model. */
    public static CostModel uniform(double forward, double backward, double backwardInput, double backwardWeight,
                                    double comm) {
        return builder().forward(forward).backward(backward).backwardInput(backwardInput)
                .backwardWeight(backwardWeight).comm(comm).build();
    }

    /**
     * One stage's whole backward B and its halves I and W, from those known (null: not known), by
     * the rule every cost model follows ({@link Builder}): a missing B is I + W; missing I and W are
     * B / 2 each; one missing of I and W is B minus the other. With neither B nor both halves known,
     * B defaults to {@code defaultBackward}.
     *
     * @return {B, I, W}
     * @throws IllegalArgumentException when a half is larger than B
     */
    public static double[] backwardParts(Double b, Double i, Double w, double defaultBackward) {
        Builder builder = builder().forward(0);
        if (b == null && (i == null || w == null)) b = defaultBackward;
        if (b != null) builder.backward(b);
        if (i != null) builder.backwardInput(i);
        if (w != null) builder.backwardWeight(w);
        CostModel c = builder.build();
        return new double[]{c.backward(0), c.backwardInput(0), c.backwardWeight(0)};
    }

    public static Builder builder() {
        return new Builder();
    }

    /** A builder holding this model's values, to change some of them. */
    public Builder toBuilder() {
        Builder b = new Builder();
        b.forward = forward;
        b.backward = backward;
        b.backwardInput = backwardInput;
        b.backwardWeight = backwardWeight;
        b.comm = comm;
        b.commOverhead = commOverhead;
        b.reduceGrad = reduceGrad;
        b.optimizerStep = optimizerStep;
        b.memoryPerMicrobatchBytes = memoryPerMicrobatchBytes;
        b.memoryLimitBytes = memoryLimitBytes;
        b.memoryLimitMicrobatches = memoryLimitMicrobatches;
        b.sharedProcessors = sharedProcessors;
        return b;
    }

    /**
     * How many processors all ranks share (a fraction where other work takes part of one), or 0 when every rank has its own device (the default).
     * With N shared processors and k ranks busy at once, each busy rank runs at min(1, N / k) of its
     * full speed (processor sharing: ranks emulated as threads on one host's cores); the F, B, I, W
     * costs are then each action's work at full speed.
     */
    public double sharedProcessors() {
        return sharedProcessors;
    }

    /** Number of stages the per-stage arrays describe, or 0 when every value holds for all stages. */
    public int stages() {
        return stages;
    }

    public double forward(int stage) {
        return at(forward, stage);
    }

    /** Full backward (B). */
    public double backward(int stage) {
        return at(backward, stage);
    }

    /** Backward for the input gradient (I). */
    public double backwardInput(int stage) {
        return at(backwardInput, stage);
    }

    /** Backward for the weight gradient (W). */
    public double backwardWeight(int stage) {
        return at(backwardWeight, stage);
    }

    /** Latency of the hop between {@code stage} and {@code stage + 1}. */
    public double comm(int stage) {
        return at(comm, stage);
    }

    /** How long the rank is busy running {@code action}. */
    public double duration(Action action) {
        int s = action.stage();
        return switch (action.kind()) {
            case F -> at(forward, s);
            case B -> at(backward, s);
            case I -> at(backwardInput, s);
            case W -> at(backwardWeight, s);
            case SEND_F, RECV_F, SEND_B, RECV_B -> at(commOverhead, s);
            case REDUCE_GRAD -> at(reduceGrad, s);
            case OPTIMIZER_STEP -> at(optimizerStep, s);
        };
    }

    /** Activation memory one microbatch holds on {@code stage} from F until its B or W, or -1 when unknown. */
    public long memoryPerMicrobatchBytes(int stage) {
        return memoryPerMicrobatchBytes == null ? -1 : at(memoryPerMicrobatchBytes, stage);
    }

    /** Activation memory limit of {@code stage} in bytes, or -1 when there is none. */
    public long memoryLimitBytes(int stage) {
        return memoryLimitBytes == null ? -1 : at(memoryLimitBytes, stage);
    }

    /**
     * How many microbatches' activations {@code stage} may hold at once, or -1 for no limit: the
     * explicit limit in microbatches, and the byte limit divided by the bytes per microbatch,
     * whichever is smaller.
     */
    public int memoryLimitMicrobatches(int stage) {
        long limit = memoryLimitMicrobatches == null ? -1 : at(memoryLimitMicrobatches, stage);
        long perMicrobatch = memoryPerMicrobatchBytes(stage);
        long bytes = memoryLimitBytes(stage);
        if (bytes >= 0 && perMicrobatch > 0) {
            long fromBytes = bytes / perMicrobatch;
            limit = limit < 0 ? fromBytes : Math.min(limit, fromBytes);
        }
        return (int) Math.min(limit, Integer.MAX_VALUE);
    }

    /** @throws ScheduleException when the per-stage arrays do not have one value per stage of {@code schedule} */
    void checkFits(Schedule schedule) {
        if (stages != 0 && stages != schedule.stages()) {
            throw new ScheduleException("the cost model gives costs for " + stages + " stages but schedule "
                    + schedule.name() + " has " + schedule.stages() + " stages (" + schedule.ranks() + " ranks x "
                    + schedule.virtualStages() + " virtual stages)");
        }
    }

    @Override
    public String toString() {
        return "CostModel{F=" + Arrays.toString(forward) + ", B=" + Arrays.toString(backward) + ", I="
                + Arrays.toString(backwardInput) + ", W=" + Arrays.toString(backwardWeight) + ", comm="
                + Arrays.toString(comm) + "}";
    }

    private static double at(double[] values, int stage) {
        return values.length == 1 ? values[0] : values[stage];
    }

    private static long at(long[] values, int stage) {
        return values.length == 1 ? values[0] : values[stage];
    }

    private static int at(int[] values, int stage) {
        return values.length == 1 ? values[0] : values[stage];
    }

    private static int length(Object array) {
        if (array == null) return 0;
        if (array instanceof double[] d) return d.length;
        if (array instanceof long[] l) return l.length;
        return ((int[]) array).length;
    }

    /**
     * Builds a {@link CostModel}. Each setter takes one value for all stages or one per stage.
     * Forward is required, and backward either directly or as backwardInput plus backwardWeight:
     * a missing B is I + W; missing I and W are B / 2 each; one missing of I and W is B minus the
     * other. Comm and the other costs default to 0; memory values to unknown / no limit.
     */
    public static final class Builder {
        private double[] forward;
        private double[] backward;
        private double[] backwardInput;
        private double[] backwardWeight;
        private double[] comm = {0};
        private double[] commOverhead = {0};
        private double[] reduceGrad = {0};
        private double[] optimizerStep = {0};
        private long[] memoryPerMicrobatchBytes;
        private long[] memoryLimitBytes;
        private int[] memoryLimitMicrobatches;
        private double sharedProcessors;

        private Builder() {
        }

        public Builder forward(double... perStage) {
            forward = times("forward", perStage);
            return this;
        }

        public Builder backward(double... perStage) {
            backward = times("backward", perStage);
            return this;
        }

        public Builder backwardInput(double... perStage) {
            backwardInput = times("backwardInput", perStage);
            return this;
        }

        public Builder backwardWeight(double... perStage) {
            backwardWeight = times("backwardWeight", perStage);
            return this;
        }

        /** Latency of the hop from stage s to s+1 (and back), per stage s. */
        public Builder comm(double... perStage) {
            comm = times("comm", perStage);
            return this;
        }

        /** How long a SEND or RECV keeps its rank busy. */
        public Builder commOverhead(double... perStage) {
            commOverhead = times("commOverhead", perStage);
            return this;
        }

        public Builder reduceGrad(double... perStage) {
            reduceGrad = times("reduceGrad", perStage);
            return this;
        }

        public Builder optimizerStep(double... perStage) {
            optimizerStep = times("optimizerStep", perStage);
            return this;
        }

        public Builder memoryPerMicrobatchBytes(long... perStage) {
            memoryPerMicrobatchBytes = amounts("memoryPerMicrobatchBytes", perStage);
            return this;
        }

        public Builder memoryLimitBytes(long... perStage) {
            memoryLimitBytes = amounts("memoryLimitBytes", perStage);
            return this;
        }

        public Builder memoryLimitMicrobatches(int... perStage) {
            long[] checked = amounts("memoryLimitMicrobatches", Arrays.stream(perStage).asLongStream().toArray());
            for (long v : checked) {
                if (v < 1) throw new IllegalArgumentException("cost model: memoryLimitMicrobatches must be >= 1, got " + v);
            }
            memoryLimitMicrobatches = perStage.clone();
            return this;
        }

        /** Ranks share {@code n} processors (0: each rank has its own device); see {@link CostModel#sharedProcessors()}. */
        public Builder sharedProcessors(double n) {
            if (!(n >= 0) || Double.isInfinite(n)) throw new IllegalArgumentException("cost model: sharedProcessors must be >= 0, got " + n);
            sharedProcessors = n;
            return this;
        }

        /** @throws IllegalArgumentException when forward or backward is missing, or arrays disagree in length */
        public CostModel build() {
            if (forward == null) throw new IllegalArgumentException("cost model: forward cost is missing");
            double[] b = backward;
            double[] i = backwardInput;
            double[] w = backwardWeight;
            if (b == null) {
                if (i == null || w == null) {
                    throw new IllegalArgumentException("cost model: backward cost is missing; give backward, or backwardInput and backwardWeight");
                }
                b = combine(i, w, +1);
            } else if (i == null && w == null) {
                i = combine(b, b, 0);
                w = i;
            } else if (i == null) {
                i = combine(b, w, -1);
            } else if (w == null) {
                w = combine(b, i, -1);
            }
            return new CostModel(this, b, i, w);
        }

        private static double[] combine(double[] a, double[] b, int sign) {
            if (a.length != 1 && b.length != 1 && a.length != b.length) {
                throw new IllegalArgumentException("cost model: backward costs given for " + a.length + " and for "
                        + b.length + " stages; give one value for all stages or one per stage");
            }
            int n = Math.max(a.length, b.length);
            double[] out = new double[n];
            for (int s = 0; s < n; s++) {
                double x = at(a, s);
                double y = at(b, s);
                out[s] = sign > 0 ? x + y : sign < 0 ? x - y : x / 2;
                if (out[s] < 0) {
                    throw new IllegalArgumentException("cost model: backward " + x + " of stage " + s
                            + " is smaller than its other half " + y + "; expected B >= I and B >= W");
                }
            }
            return out;
        }

        private static double[] times(String name, double[] values) {
            if (values.length == 0) throw new IllegalArgumentException("cost model: " + name + " needs at least one value");
            for (double v : values) {
                if (!(v >= 0) || Double.isInfinite(v)) {
                    throw new IllegalArgumentException("cost model: " + name + " cost " + v + " is not a finite number >= 0");
                }
            }
            return values.clone();
        }

        private static long[] amounts(String name, long[] values) {
            if (values.length == 0) throw new IllegalArgumentException("cost model: " + name + " needs at least one value");
            for (long v : values) {
                if (v < 0) throw new IllegalArgumentException("cost model: " + name + " " + v + " is negative");
            }
            return values.clone();
        }
    }
}
