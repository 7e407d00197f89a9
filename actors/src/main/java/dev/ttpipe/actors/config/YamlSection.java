package dev.ttpipe.actors.config;

import org.yaml.snakeyaml.nodes.MappingNode;
import org.yaml.snakeyaml.nodes.Node;
import org.yaml.snakeyaml.nodes.NodeTuple;
import org.yaml.snakeyaml.nodes.ScalarNode;
import org.yaml.snakeyaml.nodes.SequenceNode;

import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;

/**
 * One YAML mapping being read into the typed config. Every getter records the key as known; keys
 * never asked for are reported by {@link #rejectUnknownKeys()} with a did-you-mean. Type and range
 * errors go to {@link ConfigProblems} with the key's line, so reading never stops at the first one.
 */
public final class YamlSection {
    private final String path;
    private final ConfigProblems problems;
    private final Map<String, NodeTuple> entries = new LinkedHashMap<>();
    private final Set<String> known = new LinkedHashSet<>();

    YamlSection(String path, Node node, ConfigProblems problems) {
        this.path = path;
        this.problems = problems;
        if (node instanceof MappingNode mapping) {
            for (NodeTuple t : mapping.getValue()) {
                if (t.getKeyNode() instanceof ScalarNode key) {
                    entries.put(key.getValue(), t);
                    problems.recordLine(keyPath(key.getValue()), line(t.getKeyNode()));
                } else {
                    problems.addRaw(problems.file() + ":" + line(t.getKeyNode()) + ": " + orRoot(path)
                            + ": a non-scalar key given, expected a plain key name");
                }
            }
        } else if (node != null && !isNull(node)) {
            problems.add(path, describe(node), "a mapping of keys to values");
        }
    }

    static int line(Node node) {
        return node.getStartMark().getLine() + 1;
    }

    private static String orRoot(String path) {
        return path.isEmpty() ? "(top level)" : path;
    }

    String keyPath(String key) {
        return path.isEmpty() ? key : path + "." + key;
    }

    boolean has(String key) {
        know(key);
        return entries.containsKey(key) && !isNull(entries.get(key).getValueNode());
    }

    /** Marks keys as known without reading them here (a section read elsewhere, or only when present). */
    void accept(String... keys) {
        for (String k : keys) know(k);
    }

    /** The key is one this section reads: not reported as unknown, and listed by {@link ConfigLoader#acceptedKeys()}. */
    private void know(String key) {
        known.add(key);
        problems.recordKnown(keyPath(key));
    }

    Node node(String key) {
        know(key);
        NodeTuple t = entries.get(key);
        return t == null ? null : t.getValueNode();
    }

    YamlSection section(String key) {
        return new YamlSection(keyPath(key), node(key), problems);
    }

    String string(String key, String def) {
        Node n = node(key);
        if (n == null || isNull(n)) return def;
        if (n instanceof ScalarNode s) return s.getValue();
        problems.add(keyPath(key), describe(n), "a single value");
        return def;
    }

    /** A string that must be one of {@code choices} (case-insensitive); returned in lower case. */
    String choice(String key, String def, Collection<String> choices) {
        String v = string(key, null);
        if (v == null) return def;
        String lower = v.toLowerCase(Locale.ROOT);
        if (choices.contains(lower)) return lower;
        problems.add(keyPath(key), v, "one of " + String.join(", ", choices) + didYouMean(lower, choices));
        return def;
    }

    /**
     * An enum constant by its config name ({@code toString()}), case-insensitive, with {@code -} and
     * {@code _} read alike (so {@code ready-first} and {@code ready_first} both work).
     */
    <E extends Enum<E>> E choice(String key, E def, Class<E> type) {
        String v = string(key, null);
        if (v == null) return def;
        E e = parseEnum(v, type);
        if (e != null) return e;
        List<String> names = enumNames(type);
        problems.add(keyPath(key), v, "one of " + String.join(", ", names) + didYouMean(v.toLowerCase(Locale.ROOT), names));
        return def;
    }

    /** The constant whose config name matches {@code v} (case and {@code -}/{@code _} ignored), or null. */
    public static <E extends Enum<E>> E parseEnum(String v, Class<E> type) {
        String norm = v.trim().toLowerCase(Locale.ROOT).replace('-', '_');
        for (E e : type.getEnumConstants()) {
            if (e.toString().toLowerCase(Locale.ROOT).replace('-', '_').equals(norm)) return e;
        }
        return null;
    }

    public static <E extends Enum<E>> List<String> enumNames(Class<E> type) {
        List<String> out = new ArrayList<>();
        for (E e : type.getEnumConstants()) out.add(e.toString());
        return out;
    }

    int integer(String key, int def, int min, int max) {
        String v = string(key, null);
        if (v == null) return def;
        try {
            long x = Long.parseLong(v.replace("_", ""));
            if (x < min || x > max) {
                problems.add(keyPath(key), v, rangeText(min, max));
                return def;
            }
            return (int) x;
        } catch (NumberFormatException e) {
            problems.add(keyPath(key), v, "an integer " + rangeText(min, max));
            return def;
        }
    }

    double number(String key, double def, double min, double max) {
        String v = string(key, null);
        if (v == null) return def;
        try {
            double x = Double.parseDouble(v.replace("_", ""));
            if (!(x >= min && x <= max)) {
                problems.add(keyPath(key), v, "a number in [" + trim(min) + ", " + trim(max) + "]");
                return def;
            }
            return x;
        } catch (NumberFormatException e) {
            problems.add(keyPath(key), v, "a number in [" + trim(min) + ", " + trim(max) + "]");
            return def;
        }
    }

    boolean bool(String key, boolean def) {
        String v = string(key, null);
        if (v == null) return def;
        switch (v.toLowerCase(Locale.ROOT)) {
            case "true": case "yes": case "on": case "enabled": return true;
            case "false": case "no": case "off": case "disabled": return false;
            default:
                problems.add(keyPath(key), v, "true or false");
                return def;
        }
    }

    /** A size in bytes: a plain integer or a number with a unit (KiB, MiB, GiB, KB, MB, GB). */
    long bytes(String key, long def) {
        String v = string(key, null);
        if (v == null) return def;
        try {
            return Sizes.parseBytes(v);
        } catch (IllegalArgumentException e) {
            problems.add(keyPath(key), v, "a size such as 12GiB, 512MiB or 1073741824");
            return def;
        }
    }

    List<Integer> integers(String key, List<Integer> def) {
        return list(key, def, Integer::parseInt, "a list of integers such as [1, 4]");
    }

    /** A list of plain values, such as {@code [TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384]}. */
    List<String> strings(String key, List<String> def) {
        return List.copyOf(list(key, def, v -> v, "a list of names such as [A, B]"));
    }

    /** A list of scalars, each trimmed and parsed; the first that does not parse (or is nested) is reported with its line. */
    private <T> List<T> list(String key, List<T> def, Function<String, T> parse, String expected) {
        Node n = node(key);
        if (n == null || isNull(n)) return def;
        if (!(n instanceof SequenceNode seq)) {
            problems.add(keyPath(key), describe(n), expected);
            return def;
        }
        List<T> out = new ArrayList<>();
        for (Node item : seq.getValue()) {
            try {
                out.add(parse.apply(((ScalarNode) item).getValue().trim()));
            } catch (RuntimeException e) { // a nested item (ClassCastException) or a value that does not parse
                problems.addRaw(problems.file() + ":" + line(item) + ": " + keyPath(key) + ": " + describe(item)
                        + " given, expected " + expected);
                return def;
            }
        }
        return out;
    }

    Map<String, String> stringMap(String key) {
        Map<String, String> out = new LinkedHashMap<>();
        Node n = node(key);
        if (n == null || isNull(n)) return out;
        if (!(n instanceof MappingNode m)) {
            problems.add(keyPath(key), describe(n), "a mapping of names to values");
            return out;
        }
        for (NodeTuple t : m.getValue()) {
            if (t.getKeyNode() instanceof ScalarNode k && t.getValueNode() instanceof ScalarNode v) {
                out.put(k.getValue(), v.getValue());
            } else {
                problems.addRaw(problems.file() + ":" + line(t.getKeyNode()) + ": " + keyPath(key)
                        + ": a nested value given, expected NAME: value pairs");
            }
        }
        return out;
    }

    List<YamlSection> sectionList(String key) {
        List<YamlSection> out = new ArrayList<>();
        Node n = node(key);
        if (n == null || isNull(n)) return out;
        if (!(n instanceof SequenceNode seq)) {
            problems.add(keyPath(key), describe(n), "a list");
            return out;
        }
        int i = 0;
        for (Node item : seq.getValue()) {
            String p = keyPath(key) + "[" + i++ + "]";
            problems.recordLine(p, line(item));
            out.add(new YamlSection(p, item, problems));
        }
        return out;
    }

    /** Reports every key of this mapping that no getter asked for, with the closest known key. */
    void rejectUnknownKeys() {
        for (Map.Entry<String, NodeTuple> e : entries.entrySet()) {
            if (!known.contains(e.getKey())) {
                String hint = didYouMean(e.getKey(), known);
                if (hint.isEmpty() && !known.isEmpty()) hint = " (known keys here: " + String.join(", ", known) + ")";
                problems.addRaw(problems.where(keyPath(e.getKey())) + ": unknown key" + hint);
            }
        }
    }

    Set<String> presentKeys() {
        return entries.keySet();
    }

    String path() {
        return path;
    }

    ConfigProblems problems() {
        return problems;
    }

    static boolean isNull(Node n) {
        return n instanceof ScalarNode s && "tag:yaml.org,2002:null".equals(s.getTag().getValue());
    }

    static String describe(Node n) {
        if (n instanceof ScalarNode s) return "'" + s.getValue() + "'";
        if (n instanceof SequenceNode) return "a list";
        if (n instanceof MappingNode) return "a mapping";
        return "a value";
    }

    private static String rangeText(int min, int max) {
        if (max == Integer.MAX_VALUE) return ">= " + min;
        return "in [" + min + ", " + max + "]";
    }

    private static String trim(double d) {
        if (d == Double.MAX_VALUE) return "inf";
        if (d == Math.rint(d) && Math.abs(d) < 1e15) return Long.toString((long) d);
        return Double.toString(d);
    }

    /** {@code " (did you mean 'x'?)"} for the closest candidate within a small edit distance, else "". */
    static String didYouMean(String given, Collection<String> candidates) {
        String best = null;
        int bestDist = Integer.MAX_VALUE;
        for (String c : candidates) {
            int d = editDistance(given.toLowerCase(Locale.ROOT), c.toLowerCase(Locale.ROOT));
            if (d < bestDist) {
                bestDist = d;
                best = c;
            }
        }
        if (best == null) return "";
        int limit = Math.max(2, given.length() / 3);
        boolean close = bestDist <= limit || best.startsWith(given) || given.startsWith(best);
        return close ? " (did you mean '" + best + "'?)" : "";
    }

    static int editDistance(String a, String b) {
        int[] prev = new int[b.length() + 1];
        int[] cur = new int[b.length() + 1];
        for (int j = 0; j <= b.length(); j++) prev[j] = j;
        for (int i = 1; i <= a.length(); i++) {
            cur[0] = i;
            for (int j = 1; j <= b.length(); j++) {
                int cost = a.charAt(i - 1) == b.charAt(j - 1) ? 0 : 1;
                cur[j] = Math.min(Math.min(cur[j - 1] + 1, prev[j] + 1), prev[j - 1] + cost);
            }
            int[] t = prev;
            prev = cur;
            cur = t;
        }
        return prev[b.length()];
    }
}
