package dev.ttpipe.device;

/** A 2D mesh of devices, {@code [rows, cols]} as in TTNN's {@code MeshShape}. Axis 0 is rows, axis 1 cols. */
public record MeshShape(int rows, int cols) {
    public MeshShape {
        if (rows < 1 || cols < 1) throw new IllegalArgumentException("mesh shape [" + rows + ", " + cols + "]: both sizes must be >= 1");
    }

    public int size() {
        return rows * cols;
    }

    /** Devices along {@code axis} (0 or 1). */
    public int axisSize(int axis) {
        if (axis == 0) return rows;
        if (axis == 1) return cols;
        throw new IllegalArgumentException("mesh axis " + axis + " out of range, expected 0 or 1");
    }

    @Override
    public String toString() {
        return "[" + rows + ", " + cols + "]";
    }
}
