package dev.ttpipe.actors.telemetry;

import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;

class TextWrapTest {

    @Test
    void breaksAtSpacesOnlyWithAHangingIndent() {
        String text = "wrote runs/a/metrics.jsonl, runs/a/trace.json (open in https://ui.perfetto.dev), run.json, stdout.log";
        List<String> lines = TextWrap.lines(text, 40, 2);
        assertEquals(List.of("wrote runs/a/metrics.jsonl,", "  runs/a/trace.json (open in",
                "  https://ui.perfetto.dev), run.json,", "  stdout.log"), lines);
        assertEquals(text, String.join(" ", lines).replaceAll(" +", " "), "no word split, none lost");
    }

    @Test
    void keepsALineThatFitsAsItIsAndAWordLongerThanTheWidthWhole() {
        assertEquals(List.of("  4+6=1      wrong (10)"), TextWrap.lines("  4+6=1      wrong (10)", 80, 2));
        assertEquals(List.of("checkpoints:", "  /a/very/long/path/that/does/not/fit/anywhere", "  saved"),
                TextWrap.lines("checkpoints: /a/very/long/path/that/does/not/fit/anywhere saved", 20, 2));
        assertEquals(List.of("one", "", "  two three", "    four"), TextWrap.lines("one\n\n  two three four", 11, 2),
                "each line on its own; the hanging indent adds to the line's own");
    }

    @Test
    void aNumberKeepsItsUnit() {
        String text = "memory plan: at most 289.6 KiB of 12.0 GiB per device (rank 0: parameters 27.3 KiB, gradients 82.1 KiB)";
        List<String> lines = TextWrap.lines(text, 40, 2);
        assertEquals(List.of("memory plan: at most 289.6 KiB of", "  12.0 GiB per device (rank 0:", "  parameters 27.3 KiB, gradients",
                "  82.1 KiB)"), lines);
    }

    @Test
    void aCommandStaysPasteableAndKeepsFlagsWithTheirValuesAndQuotesWhole() {
        String command = "resume with: ttpipe train job.yaml --run-dir 'runs/my run' --resume auto --max-steps 80";
        String wrapped = TextWrap.wrapCommand(command, 40, 4);
        assertEquals(String.join("\n", "resume with: ttpipe train job.yaml \\", "    --run-dir 'runs/my run' \\",
                "    --resume auto --max-steps 80"), wrapped);
        assertEquals(command, TextWrap.wrapCommand(command, 200, 4), "a command that fits stays one line");
    }
}
