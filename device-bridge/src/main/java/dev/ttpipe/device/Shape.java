package dev.ttpipe.device;

import java.util.Arrays;

/** An immutable tensor shape, outermost dimension first. Negative indices count from the end. */
public final class Shape {
    private final int[] dims;
    private final long numel;

    private Shape(int[] dims) {
        this.dims = dims;
        long n = 1;
        for (int d : dims) n *= d;
        this.numel = n;
    }

    public static Shape of(int... dims) {
        for (int d : dims) {
            if (d < 0) throw new IllegalArgumentException("negative dimension in shape " + Arrays.toString(dims));
        }
        return new Shape(dims.clone());
    }

    public int rank() {
        return dims.length;
    }

    /** Size of dimension {@code i}; {@code -1} is the last. */
    public int dim(int i) {
        return dims[axis(i)];
    }

    /** Normalises a possibly negative dimension index. */
    public int axis(int i) {
        int a = i < 0 ? dims.length + i : i;
        if (a < 0 || a >= dims.length) {
            throw new IllegalArgumentException("dimension " + i + " out of range for shape " + this);
        }
        return a;
    }

    public long numel() {
        return numel;
    }

    /** Product of all dimensions but the last ("rows" of a row-major matrix view). */
    public long rows() {
        return dims.length == 0 ? 1 : numel() / Math.max(1, dims[dims.length - 1]);
    }

    /** The last dimension (1 for a scalar). */
    public int last() {
        return dims.length == 0 ? 1 : dims[dims.length - 1];
    }

    public int[] toArray() {
        return dims.clone();
    }

    public Shape with(int i, int size) {
        int[] d = dims.clone();
        d[axis(i)] = size;
        return new Shape(d);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Shape s && Arrays.equals(dims, s.dims);
    }

    @Override
    public int hashCode() {
        return Arrays.hashCode(dims);
    }

    @Override
    public String toString() {
        return Arrays.toString(dims);
    }
}
