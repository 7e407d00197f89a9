package dev.ttpipe.actors.telemetry;

import java.util.Locale;

/** Writes JSON by hand (ttpipe ships no JSON library): escaped strings and finite-or-null numbers. */
public final class Json {
    private Json() {
    }

    public static String str(String s) {
        if (s == null) return "null";
        StringBuilder sb = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                    else sb.append(c);
            }
        }
        return sb.append('"').toString();
    }

    public static String num(double v) {
        if (!Double.isFinite(v)) return "null";
        if (v == Math.rint(v) && Math.abs(v) < 1e15) return Long.toString((long) v);
        return Double.toString(v);   // shortest exact form; "1.0E-5" is valid JSON
    }

    public static String nums(double[] values) {
        StringBuilder sb = new StringBuilder("[");
        for (int i = 0; i < values.length; i++) sb.append(i == 0 ? "" : ",").append(num(values[i]));
        return sb.append(']').toString();
    }

    public static String nums(long[] values) {
        StringBuilder sb = new StringBuilder("[");
        for (int i = 0; i < values.length; i++) sb.append(i == 0 ? "" : ",").append(values[i]);
        return sb.append(']').toString();
    }
}
