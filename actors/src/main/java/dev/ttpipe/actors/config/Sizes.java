package dev.ttpipe.actors.config;

import java.util.Locale;

/** Parses and prints byte sizes with binary and decimal units ({@code 12GiB}, {@code 4MiB}, {@code 500MB}). */
public final class Sizes {
    private Sizes() {
    }

    public static long parseBytes(String text) {
        String s = text.trim().replace("_", "");
        int i = 0;
        while (i < s.length() && (Character.isDigit(s.charAt(i)) || s.charAt(i) == '.')) i++;
        if (i == 0) throw new IllegalArgumentException("not a size: " + text);
        double number = Double.parseDouble(s.substring(0, i));
        String unit = s.substring(i).trim().toLowerCase(Locale.ROOT);
        long scale;
        switch (unit) {
            case "": case "b": scale = 1; break;
            case "k": case "kib": scale = 1L << 10; break;
            case "m": case "mib": scale = 1L << 20; break;
            case "g": case "gib": scale = 1L << 30; break;
            case "t": case "tib": scale = 1L << 40; break;
            case "kb": scale = 1_000L; break;
            case "mb": scale = 1_000_000L; break;
            case "gb": scale = 1_000_000_000L; break;
            case "tb": scale = 1_000_000_000_000L; break;
            default: throw new IllegalArgumentException("unknown unit '" + unit + "' in " + text);
        }
        double bytes = number * scale;
        if (bytes > Long.MAX_VALUE || bytes < 0) throw new IllegalArgumentException("size out of range: " + text);
        return (long) bytes;
    }

    /** A short human form: 1536 -> "1.5 KiB", 12884901888 -> "12.0 GiB". */
    public static String format(long bytes) {
        if (bytes < 1024) return bytes + " B";
        String[] units = {"KiB", "MiB", "GiB", "TiB"};
        double v = bytes;
        int u = -1;
        while (v >= 1024 && u < units.length - 1) {
            v /= 1024;
            u++;
        }
        return String.format(Locale.ROOT, "%.1f %s", v, units[u]);
    }
}
