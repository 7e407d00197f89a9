package dev.ttpipe.stages.data;

/**
 * Where a piece of text begins, for the steps of a {@code tokenizer.json} that add something at a start
 * (the {@code Prepend} normalizer, {@code Metaspace}'s {@code ▁}, {@code ByteLevel}'s prefix space).
 */
enum PieceStart {
    /** The start of the text being encoded. */
    TEXT,
    /** The start of a chunk that continues a longer text ({@link Tokenizer#encodeContinuing}): inside a piece of the whole. */
    CHUNK,
    /** Any other piece: after an added token, or one that a pre-tokenizer split off. */
    PIECE;

    /** Where the first piece begins once a pre-tokenizer has split: a chunk is cut where the whole text splits too. */
    PieceStart afterSplit() {
        return this == CHUNK ? PIECE : this;
    }
}
