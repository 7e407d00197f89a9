package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.ExitCodes;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * docs/walkthrough.md does what it says: its {@code sh} blocks, in page order and as written, run in one
 * {@code bash -e} in an empty folder, with a {@code ttpipe} on the PATH that runs what the repository's
 * {@code ttpipe} script runs ({@link Main}, with this JVM's java and flags, from the classes under test, so
 * nothing builds a jar). The interrupt is the page's own {@code kill -INT} (SIGINT, what Ctrl-C sends) to
 * the background {@code ttpipe train}. Each block's output is then checked for what the page promises:
 * prepare's files (and its progress as lines, the output being a log); top's snapshot of 4 ranks; exit code 130 with a checkpoint of the step it stopped at and
 * the resume command the page runs next, to the character; the resume going on from that step to the last;
 * eval's loss; generate's text; export's config.json and model.safetensors, which generate the same text
 * as the checkpoint. A command of the page that fails, or an output that changes, fails this test.
 */
class WalkthroughTest {
    static final Path PAGE = DocsTest.ROOT.resolve("docs/walkthrough.md");
    static final String MARK = "@@walkthrough block ";

    /** The page's {@code sh} blocks, in order. */
    static List<String> blocks() throws IOException {
        List<String> blocks = new ArrayList<>();
        StringBuilder block = null;
        for (String line : Files.readAllLines(PAGE)) {
            if (block == null && line.strip().equals("```sh")) {
                block = new StringBuilder();
            } else if (block != null && line.strip().equals("```")) {
                blocks.add(block.toString());
                block = null;
            } else if (block != null) {
                block.append(line).append('\n');
            }
        }
        assertTrue(block == null, "an sh block that is not closed");
        return blocks;
    }

    @Test
    void everyCommandOfTheWalkthroughRunsAsWrittenAndPrintsWhatThePageSays(@TempDir Path scratch) throws Exception {
        List<String> blocks = blocks();
        assertTrue(blocks.size() >= 8, "sh blocks in " + PAGE + ": " + blocks.size());
        Path bin = Files.createDirectories(scratch.resolve("bin"));
        Path work = Files.createDirectories(scratch.resolve("walk"));
        Path launcher = Files.writeString(bin.resolve("ttpipe"), "#!/usr/bin/env bash\nexec "
                + TtpipeProcesses.command(List.of()).stream().map(WalkthroughTest::quoted).collect(Collectors.joining(" ")) + " \"$@\"\n");
        assertTrue(launcher.toFile().setExecutable(true));
        StringBuilder script = new StringBuilder();
        for (int i = 0; i < blocks.size(); i++) script.append("echo '").append(MARK).append(i).append("@@'\n").append(blocks.get(i));
        Path scriptFile = Files.writeString(scratch.resolve("walkthrough.sh"), script);
        Path log = scratch.resolve("walkthrough.log");

        ProcessBuilder pb = new ProcessBuilder("bash", "-e", scriptFile.toString()).directory(work.toFile())
                .redirectErrorStream(true).redirectOutput(log.toFile());
        pb.environment().keySet().removeIf(k -> TtpipeProcesses.LAUNCHER_PREFIXES.stream().anyMatch(k::startsWith));
        pb.environment().put("PATH", bin + ":" + System.getenv("PATH"));
        Process p = pb.start();
        if (!p.waitFor(240, TimeUnit.SECONDS)) {
            p.descendants().forEach(ProcessHandle::destroyForcibly);
            p.destroyForcibly();
            fail("the walkthrough did not end within 240 s:\n" + Files.readString(log));
        }
        String all = Files.readString(log);
        assertEquals(0, p.exitValue(), "a command of the walkthrough failed (bash -e):\n" + all);
        List<String> outputs = outputs(all, blocks.size());

        // 2. prepare: llm.c token files and the char vocabulary
        String prepare = output(blocks, outputs, "ttpipe prepare ");
        assertTrue(prepare.contains("char tokenizer (") && prepare.contains("train on them: data_path: data"), prepare);
        assertFalse(prepare.contains("\r"), "a progress line redrawn in place, in a log:\n" + prepare);
        for (String f : List.of("train_000000.bin", "val_000000.bin", "vocab.txt")) {
            assertTrue(Files.isRegularFile(work.resolve("data").resolve(f)), "prepare wrote no data/" + f + ":\n" + prepare);
        }

        // 4. top: one snapshot of the running job, every rank
        String top = output(blocks, outputs, "ttpipe top ");
        assertTrue(top.contains("ttpipe top http://127.0.0.1:"), top);
        for (int r = 0; r < 4; r++) assertTrue(Pattern.compile("(?m)^" + r + " +\\S").matcher(top).find(), "no rank " + r + ":\n" + top);

        Matcher steps = Pattern.compile("(?m)^  max_steps: (\\d+)$").matcher(Files.readString(work.resolve("walk.yaml")));
        assertTrue(steps.find(), "walk.yaml sets no max_steps");
        int last = Integer.parseInt(steps.group(1));

        // 5. the interrupt: exit 130, a checkpoint of the step it stopped at, the resume command the page runs next
        String interrupt = output(blocks, outputs, "kill -INT");
        assertTrue(interrupt.contains("exit code " + ExitCodes.SIGINT), interrupt);
        Matcher m = Pattern.compile("preempted \\(SIGINT\\) at step (\\d+) of " + last + ": the checkpoint of step \\1 is saved \\((\\S+)\\)")
                .matcher(CliTest.joined(interrupt));
        assertTrue(m.find(), interrupt);
        int step = Integer.parseInt(m.group(1));
        assertTrue(step >= 10 && step < last, interrupt);
        assertEquals(String.format("runs/walk/checkpoints/step-%06d", step), m.group(2));
        assertTrue(Files.isRegularFile(work.resolve(m.group(2)).resolve("trainer_state.json")), interrupt);
        Matcher resume = Pattern.compile("resume with: (.+)").matcher(interrupt);
        assertTrue(resume.find(), interrupt);
        String resumeBlock = blockWith(blocks, "--resume");
        assertEquals(resume.group(1).strip(), resumeBlock.strip(), "the page's resume command is not the one ttpipe printed");

        // 6. the resume: from that checkpoint to the last step, appended to the same run
        String resumed = output(blocks, outputs, "--resume");
        assertTrue(resumed.contains(String.format("resumed from runs/walk/checkpoints/step-%06d at step %d", step, step)), resumed);
        assertTrue(resumed.contains("step " + last + "/" + last) && resumed.contains("over steps " + (step + 1) + ".." + last), resumed);
        List<String> metrics = Files.readAllLines(work.resolve("runs/walk/metrics.jsonl"));
        assertEquals(last, metrics.size(), "one line per step");
        assertTrue(metrics.get(step).contains("\"mark\":{\"kind\":\"resume\",\"from_step\":" + step + ","), metrics.get(step));
        assertTrue(Files.readString(work.resolve("runs/walk/run.json")).contains("\"status\": \"finished\""));
        String ls = output(blocks, outputs, "ls runs/walk/checkpoints");
        assertTrue(ls.contains("stage-00.safetensors") && ls.contains("stage-03.safetensors") && ls.contains("trainer_state.json"), ls);

        // 7-9. eval, generate, export, and generate from the export
        String eval = output(blocks, outputs, "ttpipe eval ");
        assertTrue(Pattern.compile("loss \\d+\\.\\d+ nats/token, perplexity").matcher(eval).find(), eval);
        String generated = generatedText(output(blocks, outputs, "ttpipe generate runs/walk "));
        String export = output(blocks, outputs, "ttpipe export ");
        assertTrue(export.contains("config.json") && export.contains("model.safetensors"), export);
        assertTrue(Files.isRegularFile(work.resolve("hf/walk/config.json")) && Files.isRegularFile(work.resolve("hf/walk/model.safetensors")),
                export);
        assertTrue(Files.readString(work.resolve("hf/walk/config.json")).contains("\"GPT2LMHeadModel\""));
        String fromExport = generatedText(output(blocks, outputs, "ttpipe generate hf/walk "));
        assertEquals(generated, fromExport, "the exported model generates other text than its checkpoint");
    }

    /** The text generate printed: the prompt and at least 20 characters more, without the speed line. */
    static String generatedText(String output) {
        String text = CliTest.joined(output).lines().filter(l -> !l.startsWith("generate: ")).collect(Collectors.joining("\n"));
        assertTrue(text.startsWith("The miller") && text.length() >= "The miller".length() + 20, output);
        return text;
    }

    /** Each block's output, split at the marks the script echoes before each block. */
    static List<String> outputs(String all, int blocks) {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < blocks; i++) {
            String mark = MARK + i + "@@\n";
            int from = all.indexOf(mark);
            assertTrue(from >= 0, "no output of block " + i + ":\n" + all);
            int to = i + 1 < blocks ? all.indexOf(MARK + (i + 1) + "@@\n") : all.length();
            out.add(all.substring(from + mark.length(), to < 0 ? all.length() : to));
        }
        return out;
    }

    /** The one block that holds {@code command}. */
    static String blockWith(List<String> blocks, String command) {
        List<String> with = blocks.stream().filter(b -> b.contains(command)).toList();
        assertEquals(1, with.size(), "sh blocks of the page with '" + command + "': " + with);
        return with.get(0);
    }

    /** The output of the one block that holds {@code command}. */
    static String output(List<String> blocks, List<String> outputs, String command) {
        String block = blockWith(blocks, command);
        String out = outputs.get(blocks.indexOf(block));
        assertFalse(out.isBlank(), "no output from:\n" + block);
        return out;
    }

    /** {@code s} in single quotes for bash. */
    static String quoted(String s) {
        return "'" + s.replace("'", "'\\''") + "'";
    }
}
