package dev.ttpipe.actors.telemetry;

import dev.ttpipe.schedules.TraceEventWriter;

/** Writes JSON by hand (ttpipe ships no JSON library): escaped strings and finite-or-null numbers. */
public final class Json {
    private Json() {
    }

    /** {@code s} as a JSON string literal (escaped as the traces escape it), or {@code null}. */
    public static String str(String s) {
        return s == null ? "null" : TraceEventWriter.quote(s);
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
