package dev.ttpipe.device;

/** A device's position in a mesh or submesh. */
public record MeshCoord(int row, int col) {
    public int along(int axis) {
        return axis == 0 ? row : col;
    }

    @Override
    public String toString() {
        return "(" + row + ", " + col + ")";
    }
}
