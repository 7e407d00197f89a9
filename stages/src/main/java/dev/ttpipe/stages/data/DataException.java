package dev.ttpipe.stages.data;

/**
 * Bad data a user gave (a token file, a text, a tokenizer file): the message names the file and the
 * offset in one line; the CLI prints it with exit code 2.
 */
public final class DataException extends RuntimeException {
    public DataException(String message) {
        super(message);
    }
}
