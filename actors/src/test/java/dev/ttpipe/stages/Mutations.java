package dev.ttpipe.stages;

/** Lets this module's tests switch a {@link Mutation} on: its setter is package-private, for tests only. */
public final class Mutations {
    /** Undoes {@link #activate} when closed. */
    public interface Active extends AutoCloseable {
        @Override
        void close();
    }

    private Mutations() {
    }

    public static Active activate(Mutation m) {
        Mutation.set(m);
        return () -> Mutation.set(null);
    }
}
