package dev.ttpipe.device;

/**
 * A normalisation's output and what its backward needs: {@code mean} (null for rmsnorm) and
 * {@code rstd}, each shaped like the input without its last dimension. The caller owns all three.
 */
public record NormOutput(Tensor y, Tensor mean, Tensor rstd) implements AutoCloseable {
    /** Closes the saved statistics, keeping {@code y}. */
    public void closeSaved() {
        if (mean != null) mean.close();
        if (rstd != null) rstd.close();
    }

    @Override
    public void close() {
        y.close();
        closeSaved();
    }
}
