package dev.ttpipe.stages;

/**
 * Learning-rate schedules as TTML names them: {@code identity} (constant), {@code warmup_linear}
 * (linear warmup, then linear decay to {@code minLr} at {@code totalSteps}) and {@code cosine}
 * (linear warmup, then half a cosine down to {@code minLr}). Steps count from 0.
 */
public record LrSchedule(Kind kind, double baseLr, int warmupSteps, int totalSteps, double minLr) {
    public enum Kind { IDENTITY, WARMUP_LINEAR, COSINE }

    public static LrSchedule constant(double lr) {
        return new LrSchedule(Kind.IDENTITY, lr, 0, 1, lr);
    }

    public double at(int step) {
        if (kind == Kind.IDENTITY) return baseLr;
        if (step < warmupSteps) return baseLr * (step + 1) / warmupSteps;
        int span = Math.max(1, totalSteps - warmupSteps);
        double progress = Math.min(1.0, (double) (step - warmupSteps) / span);
        if (kind == Kind.WARMUP_LINEAR) return minLr + (baseLr - minLr) * (1.0 - progress);
        return minLr + (baseLr - minLr) * 0.5 * (1.0 + Math.cos(Math.PI * progress));
    }
}
