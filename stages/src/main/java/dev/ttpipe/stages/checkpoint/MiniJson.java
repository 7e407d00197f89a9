package dev.ttpipe.stages.checkpoint;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The one JSON reader of ttpipe, for every JSON it reads (config.json, safetensors headers, tokenizer.json,
 * trainer_state.json, index files, run.json, trace.json, metrics.jsonl lines, /status replies): objects
 * (insertion-ordered maps), arrays (lists), strings, numbers (Long when integral, else Double), booleans and
 * null. It is bounded, so hostile input costs an error and not the process: nesting deeper than
 * {@link #MAX_DEPTH}, a string longer than {@link #MAX_STRING} characters, a number longer than
 * {@link #MAX_NUMBER}, or a text or file over {@link #MAX_TEXT} are refused. Every problem is an
 * {@link IllegalArgumentException} of one line with the offset and, for a limit, the limit; the caller names the
 * file. Stateless and thread-safe.
 */
public final class MiniJson {
    /** Deepest nesting of arrays and objects (the parser recurses once per level; 512 is far from a stack's end). */
    public static final int MAX_DEPTH = 512;
    /** Longest string, in characters (a tokenizer's tokens and a checkpoint's config are far shorter). */
    public static final int MAX_STRING = 16 << 20;
    /** Longest number, in characters. */
    public static final int MAX_NUMBER = 512;
    /** Largest text, in characters, and file, in bytes (a large tokenizer.json is tens of MB). */
    public static final long MAX_TEXT = 256L << 20;

    private final String s;
    private int i;
    private int depth;

    private MiniJson(String s) {
        this.s = s;
    }

    public static Object parse(String text) {
        if (text.length() > MAX_TEXT) {
            throw new IllegalArgumentException(text.length() + " characters, over the limit of " + MAX_TEXT + " for JSON");
        }
        MiniJson p = new MiniJson(text);
        p.ws();
        Object v = p.value();
        p.ws();
        if (p.i != text.length()) throw p.error("trailing characters");
        return v;
    }

    /**
     * Reads and parses a UTF-8 JSON file of at most {@link #MAX_TEXT} bytes (its size is checked before it is read).
     *
     * @throws IllegalArgumentException one line with the offset or the limit (without the file: the caller names it)
     * @throws IOException when the file cannot be read
     */
    public static Object read(Path file) throws IOException {
        long size = Files.size(file);
        if (size > MAX_TEXT) throw new IllegalArgumentException(size + " bytes, over the limit of " + MAX_TEXT + " bytes for a JSON file");
        return parse(Files.readString(file, StandardCharsets.UTF_8));
    }

    /** A JSON string literal. */
    public static String str(String v) {
        StringBuilder sb = new StringBuilder(v.length() + 2).append('"');
        for (int k = 0; k < v.length(); k++) {
            char c = v.charAt(k);
            switch (c) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                default -> {
                    if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                    else sb.append(c);
                }
            }
        }
        return sb.append('"').toString();
    }

    private Object value() {
        if (i >= s.length()) throw error("unexpected end");
        char c = s.charAt(i);
        switch (c) {
            case '{': return object();
            case '[': return array();
            case '"': return string();
            case 't': return literal("true", Boolean.TRUE);
            case 'f': return literal("false", Boolean.FALSE);
            case 'n': return literal("null", null);
            default: return number();
        }
    }

    /** Enters one level of nesting; {@link #leave} on the way out. */
    private void enter() {
        if (++depth > MAX_DEPTH) throw error("nested deeper than the limit of " + MAX_DEPTH + " levels");
    }

    private <T> T leave(T value) {
        depth--;
        return value;
    }

    private Map<String, Object> object() {
        enter();
        Map<String, Object> out = new LinkedHashMap<>();
        i++;
        ws();
        if (peek() == '}') {
            i++;
            return leave(out);
        }
        while (true) {
            ws();
            if (peek() != '"') throw error("expected a key");
            String k = string();
            ws();
            expect(':');
            ws();
            if (out.put(k, value()) != null) throw error("duplicate key " + k);
            ws();
            char c = next();
            if (c == '}') return leave(out);
            if (c != ',') throw error("expected , or }");
        }
    }

    private List<Object> array() {
        enter();
        List<Object> out = new ArrayList<>();
        i++;
        ws();
        if (peek() == ']') {
            i++;
            return leave(out);
        }
        while (true) {
            ws();
            out.add(value());
            ws();
            char c = next();
            if (c == ']') return leave(out);
            if (c != ',') throw error("expected , or ]");
        }
    }

    private String string() {
        int start = i;
        expect('"');
        StringBuilder sb = new StringBuilder();
        while (true) {
            if (sb.length() >= MAX_STRING) {
                i = start;
                throw error("a string longer than the limit of " + MAX_STRING + " characters");
            }
            char c = next();
            if (c == '"') return sb.toString();
            if (c == '\\') {
                char e = next();
                switch (e) {
                    case 'n' -> sb.append('\n');
                    case 't' -> sb.append('\t');
                    case 'r' -> sb.append('\r');
                    case 'b' -> sb.append('\b');
                    case 'f' -> sb.append('\f');
                    case 'u' -> {
                        int code = i + 4 > s.length() ? -1 : hex4(i);
                        if (code < 0) throw error("bad \\u escape");
                        sb.append((char) code);
                        i += 4;
                    }
                    default -> sb.append(e);
                }
            } else {
                sb.append(c);
            }
        }
    }

    private Object number() {
        int start = i;
        while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) {
            if (i - start >= MAX_NUMBER) {
                i = start;
                throw error("a number longer than the limit of " + MAX_NUMBER + " characters");
            }
            i++;
        }
        String t = s.substring(start, i);
        if (t.isEmpty()) throw error("unexpected character '" + s.charAt(start) + "'");
        try {
            if (t.indexOf('.') < 0 && t.indexOf('e') < 0 && t.indexOf('E') < 0) return Long.parseLong(t);
            return Double.parseDouble(t);
        } catch (NumberFormatException e) {
            throw error("bad number " + t);
        }
    }

    /** The four hex digits at {@code at} as a char code, or -1. */
    private int hex4(int at) {
        int code = 0;
        for (int k = at; k < at + 4; k++) {
            int d = Character.digit(s.charAt(k), 16);
            if (d < 0) return -1;
            code = code * 16 + d;
        }
        return code;
    }

    private Object literal(String word, Object v) {
        if (!s.startsWith(word, i)) throw error("unexpected character '" + s.charAt(i) + "'");
        i += word.length();
        return v;
    }

    private void ws() {
        while (i < s.length() && Character.isWhitespace(s.charAt(i))) i++;
    }

    private char peek() {
        if (i >= s.length()) throw error("unexpected end");
        return s.charAt(i);
    }

    private char next() {
        if (i >= s.length()) throw error("unexpected end");
        return s.charAt(i++);
    }

    private void expect(char c) {
        if (next() != c) throw error("expected '" + c + "'");
    }

    private IllegalArgumentException error(String what) {
        return new IllegalArgumentException(what + " at offset " + i);
    }
}
