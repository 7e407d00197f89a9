package dev.ttpipe.stages.data;

/** Unicode's White_Space property: what Rust's {@code char::is_whitespace} and Hugging Face's regex {@code \s} match. */
final class UnicodeWhiteSpace {
    private UnicodeWhiteSpace() {
    }

    static boolean is(int cp) {
        return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A)
                || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
    }
}
