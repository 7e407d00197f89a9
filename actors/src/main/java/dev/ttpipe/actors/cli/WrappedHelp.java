package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.telemetry.TextWrap;
import picocli.CommandLine;
import picocli.CommandLine.Help;
import picocli.CommandLine.Help.Ansi.Text;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Model.OptionSpec;
import picocli.CommandLine.Model.PositionalParamSpec;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * The usage help of every command fitted to its width (80 columns, or the terminal's) with lines broken at
 * spaces only: picocli's own layout breaks inside words ({@code metrics.} / {@code jsonl}) and keeps each
 * element of a description on a line of its own. Here the description, the parameter, option and command
 * lists and the footer are laid out with {@link TextWrap}; the synopsis stays picocli's.
 *
 * <p>How the annotations are read: an option's or parameter's description is one paragraph, however many
 * elements it is written in. In a command's description and footer an element that does not end a sentence
 * (with {@code . : ! ?}) goes on in the next one; a blank element is a blank line; an indented element is an
 * example command line, wrapped so that it still pastes into a shell ({@code " \"} at each break), its
 * {@code # comment} two spaces after it, or on a line of its own above it when the two do not fit together.
 */
final class WrappedHelp {
    /** Names this wide or less (after the six columns of a short name) set where the descriptions start. */
    private static final int LONG_NAMES_MAX_WIDTH = 20;
    /** How far the second and later lines of a list entry's description hang in. */
    private static final int HANG = 2;

    private WrappedHelp() {
    }

    /** Installs the wrapped sections on {@code cl} and every subcommand under it. */
    static void install(CommandLine cl) {
        Map<String, CommandLine.IHelpSectionRenderer> sections = cl.getHelpSectionMap();
        sections.put(CommandLine.Model.UsageMessageSpec.SECTION_KEY_DESCRIPTION, WrappedHelp::description);
        sections.put(CommandLine.Model.UsageMessageSpec.SECTION_KEY_PARAMETER_LIST, WrappedHelp::parameters);
        sections.put(CommandLine.Model.UsageMessageSpec.SECTION_KEY_OPTION_LIST, WrappedHelp::options);
        sections.put(CommandLine.Model.UsageMessageSpec.SECTION_KEY_COMMAND_LIST, WrappedHelp::commands);
        sections.put(CommandLine.Model.UsageMessageSpec.SECTION_KEY_FOOTER, WrappedHelp::footer);
        cl.setHelpSectionMap(sections);
    }

    private static int width(Help help) {
        return help.commandSpec().usageMessage().width();
    }

    private static String description(Help help) {
        return prose(help.commandSpec().usageMessage().description(), width(help));
    }

    private static String footer(Help help) {
        return prose(help.commandSpec().usageMessage().footer(), width(help));
    }

    /** A command's description or footer: paragraphs and example command lines (see the class comment). */
    static String prose(String[] elements, int width) {
        StringBuilder out = new StringBuilder();
        for (String paragraph : paragraphs(elements)) {
            if (paragraph.startsWith(" ")) {
                example(paragraph, width, out);
            } else {
                out.append(TextWrap.wrap(paragraph, width, 0)).append('\n');
            }
        }
        return out.toString();
    }

    /** The elements with each one that does not end a sentence joined to the next (prose only, not examples). */
    static List<String> paragraphs(String[] elements) {
        List<String> out = new ArrayList<>();
        for (String e : elements) {
            String text = e.stripTrailing();
            int last = out.size() - 1;
            if (last >= 0 && goesOn(out.get(last)) && !text.isEmpty() && !text.startsWith(" ")) {
                out.set(last, out.get(last) + " " + text);
            } else {
                out.add(text);
            }
        }
        return out;
    }

    private static boolean goesOn(String paragraph) {
        return !paragraph.isEmpty() && !paragraph.startsWith(" ") && ".:!?".indexOf(paragraph.charAt(paragraph.length() - 1)) < 0;
    }

    /** An indented example: the command wrapped for a shell, its {@code #} comment above it when they do not fit together. */
    private static void example(String line, int width, StringBuilder out) {
        if (line.length() <= width) {
            out.append(line).append('\n');
            return;
        }
        int lead = line.length() - line.stripLeading().length();
        int hash = line.indexOf(" #");
        String command = hash > 0 ? line.substring(0, hash).stripTrailing() : line;
        if (hash > 0) {
            String comment = line.substring(hash + 1).strip();
            if (command.length() + 2 + comment.length() <= width) {          // closer together, it fits
                out.append(command).append("  ").append(comment).append('\n');
                return;
            }
            out.append(TextWrap.wrap(" ".repeat(lead) + comment, width, 2)).append('\n');
        }
        out.append(TextWrap.wrapCommand(command, width, 4)).append('\n');
    }

    private static String parameters(Help help) {
        return list(help, parameterEntries(help), parameterEntries(help), optionEntries(help));
    }

    private static String options(Help help) {
        return list(help, optionEntries(help), parameterEntries(help), optionEntries(help));
    }

    /** A parameter or option as listed: its names (with indent) and its description. */
    private record Entry(Text names, int width, String description) {
    }

    /** {@code entries} laid out in the column that the parameters and options of the command share. */
    @SafeVarargs
    private static String list(Help help, List<Entry> entries, List<Entry>... all) {
        int longest = 0;
        for (List<Entry> l : all) for (Entry e : l) if (e.width() - 6 <= LONG_NAMES_MAX_WIDTH) longest = Math.max(longest, e.width() - 6);
        int column = Math.min(6 + longest + 3, width(help) / 2);
        StringBuilder out = new StringBuilder();
        for (Entry e : entries) entry(e, column, width(help), out);
        return out.toString();
    }

    private static List<Entry> parameterEntries(Help help) {
        List<Entry> entries = new ArrayList<>();
        for (PositionalParamSpec p : help.commandSpec().positionalParameters()) {
            if (p.hidden()) continue;
            Text label = help.colorScheme().text("      ")
                    .concat(help.parameterLabelRenderer().renderParameterLabel(p, help.ansi(), help.colorScheme().parameterStyles()));
            entries.add(new Entry(label, label.plainString().length(), String.join(" ", p.description()).strip()));
        }
        return entries;
    }

    private static List<Entry> optionEntries(Help help) {
        CommandSpec spec = help.commandSpec();
        List<OptionSpec> options = new ArrayList<>();
        for (OptionSpec o : spec.options()) if (!o.hidden()) options.add(o);
        if (spec.usageMessage().sortOptions()) options.sort(Help.createShortOptionNameComparator());
        List<Entry> entries = new ArrayList<>();
        for (OptionSpec o : options) {
            String[] names = o.names().clone();
            Arrays.sort(names, Help.shortestFirst());
            boolean shortName = names[0].length() == 2 && names[0].charAt(0) == '-' && names[0].charAt(1) != '-';
            Text text = help.colorScheme().text("  ");
            int from = 0;
            if (shortName) {
                text = text.concat(help.colorScheme().optionText(names[0]));
                from = 1;
            }
            if (from < names.length) {
                text = text.concat(shortName ? ", " : "    ");
                for (int k = from; k < names.length; k++) {
                    text = text.concat(k > from ? ", " : "").concat(help.colorScheme().optionText(names[k]));
                }
            }
            text = text.concat(help.parameterLabelRenderer().renderParameterLabel(o, help.ansi(), help.colorScheme().optionParamStyles()));
            entries.add(new Entry(text, text.plainString().length(), String.join(" ", o.description()).strip()));
        }
        return entries;
    }

    private static String commands(Help help) {
        Map<String, Help> subcommands = help.subcommands();
        if (subcommands.isEmpty()) return "";
        int nameWidth = 0;
        for (String name : subcommands.keySet()) nameWidth = Math.max(nameWidth, name.length());
        StringBuilder out = new StringBuilder();
        for (Map.Entry<String, Help> e : subcommands.entrySet()) {
            CommandSpec sub = e.getValue().commandSpec();
            if (sub.usageMessage().hidden()) continue;
            String[] summary = sub.usageMessage().header().length > 0 ? sub.usageMessage().header() : sub.usageMessage().description();
            String first = summary.length > 0 ? paragraphs(summary).get(0) : "";
            String head = "  " + e.getKey() + " ".repeat(nameWidth - e.getKey().length() + 2);
            List<String> lines = TextWrap.lines(first, width(help) - head.length(), HANG);
            for (int k = 0; k < lines.size(); k++) {
                out.append(k == 0 ? head : " ".repeat(head.length())).append(lines.get(k)).append('\n');
            }
        }
        return out.toString();
    }

    /**
     * One list entry: its names, its description from {@code column} (on the next line when the names reach it),
     * wrapped at spaces, the second and later lines hanging by {@link #HANG}.
     */
    private static void entry(Entry e, int column, int width, StringBuilder out) {
        if (e.description().isEmpty()) {
            out.append(e.names()).append('\n');
            return;
        }
        List<String> lines = TextWrap.lines(e.description(), width - column, HANG);
        boolean apart = e.width() > column - 2;
        if (apart) out.append(e.names()).append('\n');
        for (int k = 0; k < lines.size(); k++) {
            out.append(k == 0 && !apart ? e.names() + " ".repeat(column - e.width()) : " ".repeat(column)).append(lines.get(k)).append('\n');
        }
    }
}
