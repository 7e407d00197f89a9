package dev.ttpipe.actors.config;

import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

/** The keys two resolved configs (as {@link ConfigWriter} writes them) disagree on. */
public final class ConfigDiff {
    private ConfigDiff() {
    }

    /** {@code key.path: before -> after}, one entry per differing key, in key order. */
    public static List<String> differences(String before, String after) {
        Map<String, String> a = flatten(before), b = flatten(after);
        List<String> out = new ArrayList<>();
        for (String k : new TreeSet<>(union(a, b))) {
            String x = a.get(k), y = b.get(k);
            if (x == null ? y != null : !x.equals(y)) out.add(k + ": " + (x == null ? "(absent)" : x) + " -> " + (y == null ? "(absent)" : y));
        }
        return out;
    }

    private static Set<String> union(Map<String, String> a, Map<String, String> b) {
        Set<String> s = new TreeSet<>(a.keySet());
        s.addAll(b.keySet());
        return s;
    }

    static Map<String, String> flatten(String yaml) {
        Map<String, String> out = new TreeMap<>();
        Object root = new Yaml(new LoaderOptions()).load(yaml);
        flatten("", root, out);
        return out;
    }

    private static void flatten(String prefix, Object node, Map<String, String> out) {
        if (node instanceof Map<?, ?> m) {
            for (Map.Entry<?, ?> e : m.entrySet()) flatten(prefix.isEmpty() ? String.valueOf(e.getKey()) : prefix + "." + e.getKey(), e.getValue(), out);
        } else {
            out.put(prefix, String.valueOf(node));
        }
    }
}
