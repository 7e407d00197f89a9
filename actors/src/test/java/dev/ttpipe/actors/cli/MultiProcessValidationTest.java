package dev.ttpipe.actors.cli;

import dev.ttpipe.stages.checkpoint.MiniJson;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code eval_every} in a job of worker processes ({@code ttpipe launch}: two workers, tensors over Aeron UDP):
 * rank 0's metrics.jsonl has the validation loss after every eval_every-th step and after the last, the summary
 * and run.json the final one, and they are the numbers a one-process {@code ttpipe train} of the same config gives,
 * bit for bit.
 */
class MultiProcessValidationTest {
    static final Pattern SUMMARY = Pattern.compile("validation loss: (\\S+) nats/char");

    @Test
    void aLaunchedJobValidatesEveryEvalEveryStepsAsAOneProcessJobDoes(@TempDir Path dir) throws Exception {
        Path cfg = MultiProcessTest.write(dir, "pp2.yaml", MultiProcessTest.config(2, 28100, "{0: 2, 1: 2}")
                .replace("max_steps: 400", "max_steps: 5, eval_every: 2"));
        CliTest.Result launched = CliTest.run("launch", cfg.toString(), "--run-dir", dir.resolve("launched").toString());
        assertEquals(0, launched.code(), launched.out() + launched.err());
        CliTest.Result one = CliTest.run("train", cfg.toString(), "--run-dir", dir.resolve("one").toString());
        assertEquals(0, one.code(), one.out() + one.err());

        List<String> multi = Files.readAllLines(dir.resolve("launched/metrics.jsonl"));
        List<String> single = Files.readAllLines(dir.resolve("one/metrics.jsonl"));
        assertEquals(5, multi.size(), String.join("\n", multi));
        for (int k = 0; k < multi.size(); k++) {
            Map<?, ?> m = (Map<?, ?>) MiniJson.parse(multi.get(k)), s = (Map<?, ?>) MiniJson.parse(single.get(k));
            int step = k + 1;
            assertEquals(step == 2 || step == 4 || step == 5, m.containsKey("val_loss"), "step " + step + ": " + multi.get(k));
            assertEquals(s.get("loss"), m.get("loss"), "step " + step + "'s loss");
            assertEquals(s.get("val_loss"), m.get("val_loss"), "step " + step + "'s validation loss");
        }

        String text = launched.joined();
        Matcher m = SUMMARY.matcher(text), s = SUMMARY.matcher(one.joined());
        assertTrue(m.find(), text);
        assertTrue(s.find(), one.out());
        assertEquals(s.group(1), m.group(1));
        assertTrue(text.contains(", val " + ((Map<?, ?>) MiniJson.parse(multi.get(4))).get("val_loss").toString().substring(0, 4)),
                "the progress line shows the last validation loss: " + text);
        assertTrue(text.contains("(multi-process job: samples need every stage in one process;"), text);
        assertFalse(text.contains("validation loss and samples need"), text);
        assertEquals(runJsonValidation(dir.resolve("one")), runJsonValidation(dir.resolve("launched")));
        assertEquals(runJsonValidation(dir.resolve("launched")), ((Map<?, ?>) MiniJson.parse(multi.get(4))).get("val_loss"),
                "the last step's line has the final validation loss");
        MultiProcessTest.assertNoLeftovers();
    }

    private static Object runJsonValidation(Path run) throws Exception {
        Object v = ((Map<?, ?>) MiniJson.parse(Files.readString(run.resolve("run.json")))).get("validation_loss");
        assertTrue(v instanceof Number, run + "/run.json: validation_loss " + v);
        return v;
    }
}
