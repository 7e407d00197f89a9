package dev.ttpipe.stages.data;

/**
 * A sequence of token ids to draw training windows from: an array in memory (a tokenised text) or
 * memory-mapped token files ({@link TokenFiles}), which are never read whole into the heap.
 * Reading is thread-safe.
 */
public interface TokenSource {
    long size();

    int get(long index);

    /** Copies {@code n} tokens from {@code from} into {@code dst[off..]}. */
    default void copy(long from, int[] dst, int off, int n) {
        for (int i = 0; i < n; i++) dst[off + i] = get(from + i);
    }

    /** Where token {@code index} comes from, for messages ("FILE, token N at byte offset B"). */
    default String where(long index) {
        return "token " + index;
    }

    static TokenSource of(int[] tokens) {
        return new TokenSource() {
            @Override
            public long size() {
                return tokens.length;
            }

            @Override
            public int get(long index) {
                return tokens[(int) index];
            }

            @Override
            public void copy(long from, int[] dst, int off, int n) {
                System.arraycopy(tokens, (int) from, dst, off, n);
            }
        };
    }

    /** Tokens {@code [from, to)} of this source (a held-out fraction of a token file). */
    default TokenSource slice(long from, long to) {
        TokenSource whole = this;
        if (from < 0 || to < from || to > size()) throw new IndexOutOfBoundsException("[" + from + ", " + to + ") of " + size());
        return new TokenSource() {
            @Override
            public long size() {
                return to - from;
            }

            @Override
            public int get(long index) {
                return whole.get(from + index);
            }

            @Override
            public void copy(long f, int[] dst, int off, int n) {
                whole.copy(from + f, dst, off, n);
            }

            @Override
            public String where(long index) {
                return whole.where(from + index);
            }
        };
    }
}
