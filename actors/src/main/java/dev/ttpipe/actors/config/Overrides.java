package dev.ttpipe.actors.config;

import org.yaml.snakeyaml.DumperOptions;
import org.yaml.snakeyaml.error.Mark;
import org.yaml.snakeyaml.nodes.MappingNode;
import org.yaml.snakeyaml.nodes.Node;
import org.yaml.snakeyaml.nodes.NodeTuple;
import org.yaml.snakeyaml.nodes.ScalarNode;
import org.yaml.snakeyaml.nodes.SequenceNode;
import org.yaml.snakeyaml.nodes.Tag;

import java.io.StringReader;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * {@code --set KEY=VALUE}: a dotted key ({@code training_config.learning_rate}, {@code rank_bindings[1].host}) set in
 * the parsed YAML tree before the config is read from it, so that any key can be set and is checked exactly as the
 * file's keys are (an unknown key, a value of the wrong type or range: the same one-line problems, naming
 * {@code --set KEY}). VALUE is read as YAML: {@code 3e-4}, {@code true}, {@code [1, 2]}, {@code {0: 2, 1: 2}}; empty
 * means the key left out.
 */
public final class Overrides {
    /** The flag named by the problems of a key it set. */
    public static final String FLAG = "--set";

    private static final Pattern SEGMENT = Pattern.compile("([^.\\[\\]]+)(?:\\[(\\d+)])?");

    private Overrides() {
    }

    /** One {@code --set}: the dotted key and the value's text. */
    record Setting(String key, String value) {
        static Setting parse(String arg) {
            int eq = arg.indexOf('=');
            String key = eq < 0 ? "" : arg.substring(0, eq).strip();
            if (key.isEmpty() || key.startsWith(".") || key.endsWith(".") || key.contains("..")) {
                throw new ConfigException(ConfigProblems.oneLine(FLAG + ": '" + arg + "' given, expected KEY=VALUE with a dotted key,"
                        + " such as training_config.learning_rate=0.001"));
            }
            return new Setting(key, arg.substring(eq + 1));
        }
    }

    /** Sets every {@code KEY=VALUE} of {@code args} in the mapping {@code root}, in order, recording each key as set by --set. */
    static void apply(MappingNode root, List<String> args, ConfigProblems problems) {
        for (String arg : args) {
            Setting s = Setting.parse(arg);
            set(root, s, problems);
            problems.recordFlag(s.key(), FLAG);
        }
    }

    private static void set(MappingNode root, Setting s, ConfigProblems problems) {
        String[] parts = s.key().split("\\.");
        MappingNode at = root;
        StringBuilder path = new StringBuilder();
        for (int i = 0; i < parts.length; i++) {
            Matcher m = SEGMENT.matcher(parts[i]);
            if (!m.matches()) throw refused(s, "'" + parts[i] + "' is not a key name (a name, or name[N] for a list's item N)");
            String name = m.group(1);
            path.append(path.length() == 0 ? "" : ".").append(name);
            boolean last = i == parts.length - 1;
            if (last && m.group(2) == null) {
                put(at, name, value(s));
                return;
            }
            Node child = get(at, name);
            if (m.group(2) != null) {
                int index = Integer.parseInt(m.group(2));
                if (!(child instanceof SequenceNode seq) || index >= seq.getValue().size()) {
                    throw refused(s, path + " has no item " + index + " (" + (child instanceof SequenceNode q ? q.getValue().size() + " items"
                            : "not a list") + ")");
                }
                path.append('[').append(index).append(']');
                if (last) {
                    seq.getValue().set(index, value(s));
                    return;
                }
                child = seq.getValue().get(index);
            } else if (child == null || YamlSection.isNull(child)) {
                child = new MappingNode(Tag.MAP, true, new ArrayList<>(), HERE, HERE, DumperOptions.FlowStyle.BLOCK);
                put(at, name, child);
            }
            if (!(child instanceof MappingNode next)) {
                throw refused(s, path + " is " + YamlSection.describe(child) + " in the config, expected a section to set a key in");
            }
            at = next;
        }
    }

    private static ConfigException refused(Setting s, String why) {
        return new ConfigException(ConfigProblems.oneLine(FLAG + " " + s.key() + ": " + why));
    }

    /** Where the keys and sections --set adds are: on no line of the file (so no problem names one). */
    private static final Mark HERE = new Mark(FLAG, 0, -1, 0, new int[0], 0);

    private static Node get(MappingNode at, String key) {
        for (NodeTuple t : at.getValue()) {
            if (t.getKeyNode() instanceof ScalarNode k && k.getValue().equals(key)) return t.getValueNode();
        }
        return null;
    }

    /** Replaces the value of {@code key} in {@code at} (every entry of it: the file may give a key twice), or adds the key. */
    private static void put(MappingNode at, String key, Node value) {
        List<NodeTuple> entries = at.getValue();
        boolean found = false;
        for (int i = 0; i < entries.size(); i++) {
            NodeTuple t = entries.get(i);
            if (t.getKeyNode() instanceof ScalarNode k && k.getValue().equals(key)) {
                entries.set(i, new NodeTuple(t.getKeyNode(), value));
                found = true;
            }
        }
        if (!found) entries.add(new NodeTuple(new ScalarNode(Tag.STR, key, HERE, HERE, DumperOptions.ScalarStyle.PLAIN), value));
    }

    /** The value's text read as YAML (empty: null, the key left out). */
    private static Node value(Setting s) {
        Node n = s.value().isBlank() ? null : ConfigLoader.compose(new StringReader(s.value()), FLAG + " " + s.key());
        return n != null ? n : new ScalarNode(Tag.NULL, "null", HERE, HERE, DumperOptions.ScalarStyle.PLAIN);
    }
}
