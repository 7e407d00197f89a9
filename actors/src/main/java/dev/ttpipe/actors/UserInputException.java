package dev.ttpipe.actors;

/**
 * A mistake the user can fix (a bad flag value, a missing file): printed as one line, exit code 2.
 * The message names the flag or file, the value given and what was expected.
 */
public final class UserInputException extends RuntimeException {
    public UserInputException(String message) {
        super(message);
    }

    public UserInputException(String message, Throwable cause) {
        super(message, cause);
    }
}
