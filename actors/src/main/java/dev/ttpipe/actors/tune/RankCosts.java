package dev.ttpipe.actors.tune;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.telemetry.RunLinks;
import dev.ttpipe.actors.telemetry.RunStageCosts;
import dev.ttpipe.schedules.CostModel;
import dev.ttpipe.schedules.Schedule;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The costs {@code ttpipe simulate} plays a schedule against: the {@code --costs} values for one rank's share of the
 * model, or ({@code measured} non-null) the per-stage costs measured in a run; then f, b, i, w are their means per
 * stage and comm the mean SEND time, or, where the run measured its links before step 1, the mean hop over them
 * (and each hop is then charged its own link's figure, {@link #forSchedule}).
 */
record RankCosts(double f, double b, double i, double w, double comm, RunStageCosts measured) {
    RankCosts(double f, double b, double i, double w, double comm) {
        this(f, b, i, w, comm, null);
    }

    /** The costs measured in a run, with their means per stage. */
    static RankCosts measured(RunStageCosts mc) {
        return new RankCosts(average(mc.f()), average(mc.b()), average(mc.i()), average(mc.w()),
                mc.links() != null ? mc.links().meanHopMs() : mc.comm(), mc);
    }

    private static double average(double[] v) {
        double s = 0;
        for (double x : v) s += x;
        return s / v.length;
    }

    /**
     * Parses {@code --costs}: keys f, b, i, w, comm, each at most once, values finite numbers >= 0.
     * Defaults f=1, b=2, comm=0; b alone gives i=w=b/2; i and w without b give b=i+w.
     */
    static RankCosts parse(String text) {
        Map<String, Double> given = new LinkedHashMap<>();
        if (text != null && !text.isBlank()) {
            for (String item : text.split(",", -1)) {
                String entry = item.strip();
                int eq = entry.indexOf('=');
                if (eq < 0) {
                    throw new UserInputException("--costs: \"" + entry + "\" given, expected KEY=NUMBER such as f=1 (keys f, b, i, w, comm)");
                }
                String key = entry.substring(0, eq).strip().toLowerCase(Locale.ROOT);
                String value = entry.substring(eq + 1).strip();
                if (!List.of("f", "b", "i", "w", "comm").contains(key)) {
                    throw new UserInputException("--costs: unknown key \"" + entry.substring(0, eq).strip()
                            + "\", expected f, b, i, w or comm (e.g. --costs f=1,b=2,comm=0.05)");
                }
                double number;
                try {
                    number = Double.parseDouble(value);
                } catch (NumberFormatException e) {
                    throw new UserInputException("--costs: " + key + "=" + value + " is not a number, expected e.g. " + key + "=1.5");
                }
                if (!(number >= 0) || Double.isInfinite(number)) {
                    throw new UserInputException("--costs: " + key + "=" + value + ", expected a finite number >= 0");
                }
                if (given.put(key, number) != null) {
                    throw new UserInputException("--costs: " + key + " given twice in \"" + text + "\"");
                }
            }
        }
        double f = given.getOrDefault("f", 1.0);
        Double b = given.get("b");
        Double i = given.get("i");
        Double w = given.get("w");
        double comm = given.getOrDefault("comm", 0.0);
        double[] biw;
        try {
            biw = CostModel.backwardParts(b, i, w, 2.0);
        } catch (IllegalArgumentException e) {
            throw new UserInputException("--costs: b=" + b + " is smaller than " + (i != null && i > b ? "i=" + i : "w=" + w)
                    + ", expected b >= i and b >= w (b is the whole backward, i + w)");
        }
        return new RankCosts(f, biw[0], biw[1], biw[2], comm);
    }

    /** Per-stage costs for a schedule with {@code v} stages per rank ({@code stages} in all). */
    CostModel forStages(int v, int stages, Integer memoryLimit) {
        return forStages(v, stages, memoryLimit, new double[]{comm});
    }

    /**
     * The costs of {@code schedule}: {@link #forStages}, each hop between ranks charged the link check's figure for
     * the two ranks it joins when the measured run has one ({@link RunLinks#hopMs}).
     */
    CostModel forSchedule(Schedule schedule, Integer memoryLimit) {
        if (measured == null || measured.links() == null) return forStages(schedule.virtualStages(), schedule.stages(), memoryLimit);
        return forStages(schedule.virtualStages(), schedule.stages(), memoryLimit, hops(schedule, measured.links()));
    }

    /** By stage s, the milliseconds of the hop from stage s to s + 1 over the links of {@code links} (0 within a rank). */
    static double[] hops(Schedule schedule, RunLinks links) {
        double[] hops = new double[schedule.stages()];
        for (int s = 0; s + 1 < schedule.stages(); s++) {
            int a = schedule.rankOfStage(s), b = schedule.rankOfStage(s + 1);
            if (a != b) hops[s] = links.hopMs(a, b);
        }
        return hops;
    }

    private CostModel forStages(int v, int stages, Integer memoryLimit, double[] comm) {
        CostModel.Builder builder;
        if (measured != null) {
            if (measured.f().length != stages) {
                throw new UserInputException("--costs-from: " + measured.runDir() + " measured " + measured.f().length
                        + " stages, this simulation has " + stages + "; expected the run's split (P x V)");
            }
            builder = CostModel.builder().forward(measured.f()).backward(measured.b()).backwardInput(measured.i())
                    .backwardWeight(measured.w()).comm(comm);
        } else {
            builder = CostModel.builder().forward(f / v).backward(b / v).backwardInput(i / v).backwardWeight(w / v).comm(comm);
        }
        if (memoryLimit != null) builder.memoryLimitMicrobatches(memoryLimit);
        return builder.build();
    }
}
