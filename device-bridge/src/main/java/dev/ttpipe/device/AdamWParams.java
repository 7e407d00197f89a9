package dev.ttpipe.device;

/**
 * One AdamW step (decoupled weight decay, bias correction with {@code step} counted from 1).
 * The gradient is multiplied by {@code gradScale} first (gradient clipping, accumulation).
 */
public record AdamWParams(float lr, float beta1, float beta2, float eps, float weightDecay, int step, float gradScale) {
}
