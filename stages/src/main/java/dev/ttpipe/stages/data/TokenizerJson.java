package dev.ttpipe.stages.data;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/**
 * One JSON object of a {@code tokenizer.json} and where it sits in the file ({@code normalizer.normalizers[1]}):
 * reads its keys, and every error it makes names the file, the key and the value in one line.
 */
record TokenizerJson(Path file, String path, Map<?, ?> map) {

    String where(String key) {
        return path.isEmpty() ? key : path + "." + key;
    }

    boolean has(String key) {
        return map.get(key) != null;
    }

    Object get(String key) {
        return map.get(key);
    }

    /** The component's {@code type}. */
    String type() {
        return string("type");
    }

    String string(String key) {
        if (!(map.get(key) instanceof String s)) throw bad(key, "a string");
        return s;
    }

    String string(String key, String absent) {
        return map.get(key) == null ? absent : string(key);
    }

    boolean bool(String key, boolean absent) {
        Object v = map.get(key);
        if (v == null) return absent;
        if (!(v instanceof Boolean b)) throw bad(key, "true or false");
        return b;
    }

    int integer(String key, int absent) {
        Object v = map.get(key);
        if (v == null) return absent;
        if (!(v instanceof Long n) || n < 0 || n > Integer.MAX_VALUE) throw bad(key, "a whole number from 0");
        return (int) (long) n;
    }

    TokenizerJson object(String key) {
        if (!(map.get(key) instanceof Map<?, ?> m)) throw bad(key, "a JSON object");
        return new TokenizerJson(file, where(key), m);
    }

    List<?> list(String key) {
        if (!(map.get(key) instanceof List<?> l)) throw bad(key, "a JSON array");
        return l;
    }

    /** The objects of an array, each knowing its place ({@code key[i]}). */
    List<TokenizerJson> objects(String key) {
        List<?> l = list(key);
        List<TokenizerJson> out = new ArrayList<>(l.size());
        for (int i = 0; i < l.size(); i++) {
            if (!(l.get(i) instanceof Map<?, ?> m)) throw at(where(key) + "[" + i + "]", l.get(i), "a JSON object");
            out.add(new TokenizerJson(file, where(key) + "[" + i + "]", m));
        }
        return out;
    }

    /** A pattern field: {@code {"String": "literal"}} or {@code {"Regex": "..."}} (Unicode classes, as Hugging Face's Oniguruma). */
    Pattern pattern(String key) {
        TokenizerJson p = object(key);
        if (p.get("String") instanceof String s) return Pattern.compile(Pattern.quote(s));
        if (p.get("Regex") instanceof String re) {
            try {
                return Pattern.compile(re, Pattern.UNICODE_CHARACTER_CLASS);
            } catch (PatternSyntaxException e) {
                throw p.bad("Regex", "a regular expression Java reads (" + e.getDescription() + ")");
            }
        }
        throw bad(key, "{\"String\": ...} or {\"Regex\": ...}");
    }

    /** This key's value is wrong: what was expected instead. */
    DataException bad(String key, String expected) {
        return at(where(key), map.get(key), expected);
    }

    /** A component ttpipe does not read: the file, where it is, its type and what is read instead. */
    DataException unsupported(String supported) {
        return new DataException(file + ": " + where("type") + " " + show(map.get("type")) + " is not supported, ttpipe reads "
                + supported);
    }

    DataException at(String where, Object value, String expected) {
        return new DataException(file + ": " + where + " " + show(value) + ", expected " + expected);
    }

    static String show(Object value) {
        String s = value instanceof String str ? "'" + str + "'" : value == null ? "absent" : String.valueOf(value);
        return s.length() > 80 ? s.substring(0, 77) + "..." : s;
    }
}
