package dev.ttpipe.stages.data;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/** GPT-2's spelling of bytes as characters ({@code ByteLevel}): printable bytes stand for themselves, the others from U+0100. */
final class ByteLevelSpelling {
    private static final char[] SPELL = Gpt2Tokenizer.bytesToUnicode();
    private static final int[] BYTE = new int[512];

    static {
        Arrays.fill(BYTE, -1);
        for (int b = 0; b < 256; b++) BYTE[SPELL[b]] = b;
    }

    private ByteLevelSpelling() {
    }

    /** The text's UTF-8 bytes, one character each. */
    static String spell(String text) {
        byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
        char[] out = new char[bytes.length];
        for (int i = 0; i < bytes.length; i++) out[i] = SPELL[bytes[i] & 0xff];
        return new String(out);
    }

    /** The bytes a token spells, or null when one of its characters spells no byte (an added token's own text). */
    static byte[] bytes(String token) {
        byte[] out = new byte[token.length()];
        for (int i = 0; i < token.length(); i++) {
            char c = token.charAt(i);
            int b = c < BYTE.length ? BYTE[c] : -1;
            if (b < 0) return null;
            out[i] = (byte) b;
        }
        return out;
    }
}
