package dev.ttpipe.actors.multihost;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * SLURM's compressed host lists and task counts, expanded as {@code scontrol show hostnames} would:
 * {@code node[01-03,7],gpu-a} is node01, node02, node03, node7, gpu-a (a range keeps the width of its
 * first number; several brackets in one name multiply: {@code r[1-2]n[1-2]} is r1n1, r1n2, r2n1, r2n2),
 * and {@code SLURM_TASKS_PER_NODE}'s {@code 2(x3),1} is 2, 2, 2, 1. Malformed text throws
 * {@link IllegalArgumentException} naming the offending part.
 */
final class SlurmNodeList {
    /** No allocation is this big; a larger range is a typo, refused before it fills the memory. */
    static final int MAX_HOSTS = 1 << 16;

    private SlurmNodeList() {
    }

    /** The host names of {@code list}, in order. */
    static List<String> expand(String list) {
        List<String> hosts = new ArrayList<>();
        for (String item : splitTopLevel(list)) {
            if (item.isEmpty()) throw new IllegalArgumentException("an empty host name in '" + list + "'");
            List<String> names = List.of("");
            int i = 0;
            while (i < item.length()) {
                int open = item.indexOf('[', i);
                if (open < 0) {
                    names = append(names, List.of(item.substring(i)));
                    break;
                }
                int close = item.indexOf(']', open);
                if (close < 0) throw new IllegalArgumentException("'" + item + "' opens a '[' it does not close");
                names = append(names, List.of(item.substring(i, open)));
                names = append(names, ranges(item.substring(open + 1, close), item));
                i = close + 1;
            }
            hosts.addAll(names);
            if (hosts.size() > MAX_HOSTS) throw new IllegalArgumentException("more than " + MAX_HOSTS + " hosts in '" + list + "'");
        }
        return hosts;
    }

    /** {@code 2(x3),1} as [2, 2, 2, 1]. */
    static List<Integer> tasksPerNode(String spec) {
        List<Integer> out = new ArrayList<>();
        for (String part : spec.split(",", -1)) {
            String p = part.strip();
            int repeat = 1;
            int paren = p.indexOf('(');
            if (paren >= 0) {
                if (!p.endsWith(")") || !p.startsWith("x", paren + 1)) {
                    throw new IllegalArgumentException("'" + part + "' in '" + spec + "', expected N or N(xM)");
                }
                repeat = number(p.substring(paren + 2, p.length() - 1), spec);
                p = p.substring(0, paren);
            }
            int tasks = number(p, spec);
            if (tasks < 1 || repeat < 1) throw new IllegalArgumentException("'" + part + "' in '" + spec + "', expected counts of 1 or more");
            if (out.size() + repeat > MAX_HOSTS) throw new IllegalArgumentException("more than " + MAX_HOSTS + " nodes in '" + spec + "'");
            for (int r = 0; r < repeat; r++) out.add(tasks);
        }
        return out;
    }

    /** Commas outside brackets separate hosts; inside, ranges. */
    private static List<String> splitTopLevel(String list) {
        List<String> items = new ArrayList<>();
        int depth = 0, start = 0;
        for (int i = 0; i < list.length(); i++) {
            char c = list.charAt(i);
            if (c == '[') depth++;
            else if (c == ']') depth--;
            else if (c == ',' && depth == 0) {
                items.add(list.substring(start, i).strip());
                start = i + 1;
            }
            if (depth < 0 || depth > 1) throw new IllegalArgumentException("unbalanced '[' and ']' in '" + list + "'");
        }
        items.add(list.substring(start).strip());
        return items;
    }

    /** {@code 01-03,7}: 01, 02, 03, 7. */
    private static List<String> ranges(String spec, String item) {
        List<String> out = new ArrayList<>();
        for (String r : spec.split(",", -1)) {
            int dash = r.indexOf('-');
            String lo = dash < 0 ? r : r.substring(0, dash), hi = dash < 0 ? r : r.substring(dash + 1);
            int a = number(lo, item), b = number(hi, item);
            if (b < a) throw new IllegalArgumentException("the range '" + r + "' in '" + item + "' runs backwards");
            if (b - a >= MAX_HOSTS) throw new IllegalArgumentException("the range '" + r + "' in '" + item + "' is too large");
            for (int n = a; n <= b; n++) out.add(String.format(Locale.ROOT, "%0" + lo.length() + "d", n));
        }
        return out;
    }

    private static List<String> append(List<String> prefixes, List<String> suffixes) {
        List<String> out = new ArrayList<>(prefixes.size() * suffixes.size());
        for (String p : prefixes) for (String s : suffixes) out.add(p + s);
        return out;
    }

    private static int number(String s, String context) {
        if (s.isEmpty() || s.length() > 9 || !s.chars().allMatch(Character::isDigit)) {
            throw new IllegalArgumentException("'" + s + "' in '" + context + "' is not a number");
        }
        return Integer.parseInt(s);
    }
}
