package dev.ttpipe.actors.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;
import picocli.CommandLine.Model.ArgSpec;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * What a person reads fits 80 columns when the output is not a terminal: every line of a default {@code ttpipe train}
 * (its banner, progress, summary and samples) and of every command's {@code --help}, whose text is broken at spaces
 * only, never inside a word such as {@code metrics.jsonl}.
 */
class EightyColumnsTest {
    static final int COLUMNS = 80;

    @Test
    void everyLineOfADefaultTrainRunFitsEightyColumns(@TempDir Path dir) throws Exception {
        Path run = dir.resolve("run");
        CliTest.Result r = CliTest.run("train", "--max-steps", "3", "--run-dir", run.toString());
        assertEquals(0, r.code(), r.out() + r.err());
        List<String> wide = wider(r.out() + r.err());
        assertTrue(wide.isEmpty(), wide.size() + " lines wider than " + COLUMNS + " columns:\n" + String.join("\n", wide));
        assertFalse(r.out().contains("\r"), "a log gets plain lines, no carriage returns");
        assertTrue(r.out().contains("ttpipe train: gpt2 4 blocks") && r.out().contains("memory plan:")
                && r.out().contains("blocks per stage: [1, 1, 1, 1]") && r.out().contains("validation loss:")
                && r.out().contains("sums right"), "the whole run was read: " + r.out());
        assertTrue(r.out().lines().anyMatch(l -> l.matches("ETA \\S+ \\| step 3/3, \\d+s \\| loss \\d\\.\\d{4}, .* tok/s, bubble .*")),
                "the progress line, ETA first: " + r.out());
        assertEquals(r.out(), Files.readString(run.resolve("stdout.log")), "stdout.log holds what the console got");
    }

    @Test
    void everyCommandsHelpFitsEightyColumnsAndBreaksOnlyBetweenWords() {
        List<String> problems = new ArrayList<>();
        int commands = 0;
        for (CommandLine c : all(Main.newCommandLine(new PrintWriter(new StringWriter()), new PrintWriter(new StringWriter())))) {
            List<String> path = new ArrayList<>();
            for (CommandLine p = c; p.getParent() != null; p = p.getParent()) path.add(0, p.getCommandName());
            if (path.equals(List.of("help"))) continue;
            path.add("--help");
            CliTest.Result r = CliTest.run(path.toArray(new String[0]));
            String name = "ttpipe " + String.join(" ", path);
            commands++;
            if (r.code() != 0) problems.add(name + ": exit code " + r.code() + " " + r.err());
            for (String line : wider(r.out())) problems.add(name + ": " + line);
            String words = r.out().replaceAll("\\s+", " ");
            List<ArgSpec> args = new ArrayList<>(c.getCommandSpec().options());
            args.addAll(c.getCommandSpec().positionalParameters());
            for (ArgSpec a : args) {
                String description = String.join(" ", a.description()).replaceAll("\\s+", " ").strip();
                if (!a.hidden() && !words.contains(description)) problems.add(name + ": description not whole: " + description);
            }
        }
        assertTrue(commands >= 20, "walked " + commands + " commands");
        assertTrue(problems.isEmpty(), problems.size() + " problems:\n" + String.join("\n", problems));
    }

    /** A folder deep enough that a path in it passes 80 columns on its own. */
    static Path deep(Path dir) throws Exception {
        Path d = dir.resolve("a-project-folder-with-a-long-name").resolve("experiments-of-the-second-quarter")
                .resolve("tinyshakespeare-characters");
        return Files.createDirectories(d);
    }

    /** --print-config of a config whose path is longer than a line: its comments wrap, the path broken after a '/'. */
    @Test
    void printConfigOfALongConfigPathFitsEightyColumns(@TempDir Path dir) throws Exception {
        Path folder = deep(dir);
        Path cfg = CliTest.config(folder, CliTest.SMALL.replace("RUNS", "runs"));
        assertTrue(cfg.toString().length() > COLUMNS, cfg.toString());
        for (String command : new String[]{"train", "simulate"}) {
            CliTest.Result r = CliTest.run(command, cfg.toString(), "--set", "training_config.seed=3", "--print-config");
            assertEquals(0, r.code(), r.err());
            List<String> wide = wider(r.out() + r.err());
            assertTrue(wide.isEmpty(), command + ": " + String.join("\n", wide));
            assertTrue(r.out().matches("(?s).*\n  batch_size: 8 +# job\\.yaml:1\n.*"), "named in its folder: " + r.out());
            assertTrue(r.out().matches("(?s).*\n  seed: 3 +# --set\n.*"), r.out());
            assertTrue(r.out().replaceAll("\n# +", "").contains(folder.toString()), "the header names the folder: " + r.out());
        }
    }

    /**
     * A text model: train's samples, then eval, generate and export on its checkpoint, whose paths make their summaries
     * longer than a line: every line fits, and the summaries read joined are whole.
     */
    @Test
    void evalGenerateExportAndATextModelsSamplesFitEightyColumns(@TempDir Path dir) throws Exception {
        Path text = Files.writeString(dir.resolve("words.txt"), "the cat sat on the mat and the dog ran to the red hat ".repeat(60));
        String cfg = CliTest.SMALL.replace("RUNS", dir.resolve("runs").toString()).replace("max_steps: 2", "max_steps: 20");
        Path run = dir.resolve("r");
        CliTest.Result t = CliTest.run("train", CliTest.config(dir, cfg).toString(), "--data", text.toString(), "--set",
                "eval_config.sample_tokens=240", "--run-dir", run.toString());
        assertEquals(0, t.code(), t.err());
        String samples = t.out().substring(t.out().indexOf("---"));
        assertTrue(samples.replace("\n", " ").length() > 240, "the samples were printed: " + t.out());
        assertTrue(wider(t.out() + t.err()).isEmpty(), "train: " + String.join("\n", wider(t.out() + t.err())));

        Path ckpt = run.resolve("checkpoints/step-000020");
        CliTest.Result e = CliTest.run("eval", ckpt.toString(), "--data", text.toString(), "--batches", "2");
        CliTest.Result g = CliTest.run("generate", ckpt.toString(), "--prompt", "the ", "--max-new-tokens", "12");
        CliTest.Result x = CliTest.run("export", ckpt.toString(), "--out", dir.resolve("hf").toString());
        for (CliTest.Result r : List.of(e, g, x)) {
            assertEquals(0, r.code(), r.err());
            List<String> wide = wider(r.out() + r.err());
            assertTrue(wide.isEmpty(), String.join("\n", wide));
        }
        assertTrue(CliTest.joined(e.out()).contains("eval: ") && CliTest.joined(e.out()).contains(" on " + text + ": 2 batches of "),
                e.out());
        assertTrue(CliTest.joined(g.err()).matches("(?s)generate: 12 new tokens in \\d+\\.\\d\\d s, [\\d.]+ tokens/s \\(key/value cache, .*\\)\n"),
                g.err());
        assertTrue(CliTest.joined(x.out()).contains(ckpt + ": gpt2 model, ") && CliTest.joined(x.out()).contains(", config.json, no tokenizer files"),
                x.out());
    }

    /** The lines of {@code text} wider than {@link #COLUMNS}, each with its width. */
    static List<String> wider(String text) {
        return text.lines().filter(l -> l.length() > COLUMNS).map(l -> l.length() + ": " + l).toList();
    }

    private static List<CommandLine> all(CommandLine root) {
        List<CommandLine> out = new ArrayList<>(List.of(root));
        for (CommandLine sub : root.getSubcommands().values()) out.addAll(all(sub));
        return out;
    }
}
