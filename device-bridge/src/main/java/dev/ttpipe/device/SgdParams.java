package dev.ttpipe.device;

/**
 * One SGD step as torch.optim.SGD: weight decay added to the gradient, momentum with dampening
 * (the first step copies the gradient into the buffer), optional Nesterov. {@code gradScale}
 * multiplies the gradient first.
 */
public record SgdParams(float lr, float momentum, float dampening, float weightDecay, boolean nesterov, int step,
                        float gradScale) {
}
