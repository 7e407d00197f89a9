package dev.ttpipe.actors.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;

import static dev.ttpipe.actors.cli.CliTest.assertOneLineBadInput;
import static dev.ttpipe.actors.cli.CliTest.HF_GPT2;
import static dev.ttpipe.actors.cli.CliTest.config;
import static dev.ttpipe.actors.cli.CliTest.evalData;
import static dev.ttpipe.actors.cli.CliTest.hfModel;
import static dev.ttpipe.actors.cli.CliTest.run;

/**
 * Inputs a user can get wrong, each answered in one line with exit 2 (and no Java exception): a model with no
 * heads, a tokenizer with a negative id, a checkpoint whose step is not an integer or whose files lie outside it,
 * a negative --tolerance.
 */
class BadInputsCliTest {
    @TempDir
    Path dir;

    /** A checkpoint directory whose trainer_state.json has {@code step} and {@code files} as given. */
    private Path checkpoint(String step, String files) throws Exception {
        Path c = Files.createDirectories(dir.resolve("step-000006"));
        Files.writeString(c.resolve("trainer_state.json"), "{\"format\":1,\"step\":" + step + ",\"optimizer_steps\":6,"
                + "\"config\":\"training_config: {}\",\"files\":" + files + "}");
        return c;
    }

    @Test
    void aModelWithNoHeads() throws Exception {
        Path m = hfModel(dir, HF_GPT2.replace("\"n_head\":2", "\"n_head\":0"));
        assertOneLineBadInput(run("eval", m.toString(), "--data", evalData(dir)),
                m.resolve("config.json") + ": n_head: 0 given, expected a positive integer");
    }

    @Test
    void aTokenizerWithANegativeId() throws Exception {
        Path m = hfModel(dir, HF_GPT2);
        Files.writeString(m.resolve("tokenizer.json"), "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":-3},\"merges\":[]},"
                + "\"pre_tokenizer\":{\"type\":\"ByteLevel\"}}");
        assertOneLineBadInput(run("eval", m.toString(), "--data", evalData(dir)),
                m.resolve("tokenizer.json") + ": model.vocab.b -3, expected a token id from 0 to 16777215");
    }

    @Test
    void aCheckpointWhoseStepIsNotAnInteger() throws Exception {
        String files = "{\"stage-00.safetensors\":{\"sha256\":\"00\"}}";
        for (String step : new String[]{"\"6\"", "6.5", "-1", "null"}) {
            Path c = checkpoint(step, files);
            assertOneLineBadInput(run("export", c.toString(), "--out", dir.resolve("out").toString()),
                    c.resolve("trainer_state.json") + ": 'step' is " + step + ", expected an integer 0..2147483647");
        }
    }

    @Test
    void aCheckpointThatListsFilesOutsideItself() throws Exception {
        Files.writeString(dir.resolve("secret.safetensors"), "not yours");
        for (String name : new String[]{"../secret.safetensors", dir.resolve("secret.safetensors").toString()}) {
            Path c = checkpoint("6", "{\"" + name + "\":{\"sha256\":\"00\"}}");
            assertOneLineBadInput(run("eval", c.toString(), "--data", evalData(dir)),
                    c.resolve("trainer_state.json") + ": 'files': '" + name + "' given, expected a file name inside the folder");
        }
    }

    @Test
    void aNegativeTolerance() throws Exception {
        Path cfg = config(dir, CliTest.SMALL.replace("RUNS", dir.resolve("runs").toString()));
        for (String t : new String[]{"-1", "NaN"}) {
            assertOneLineBadInput(run("verify", cfg.toString(), "--tolerance", t),
                    "--tolerance: " + Double.parseDouble(t) + " given, expected a finite relative difference >= 0 (e.g. 1e-5)");
        }
    }
}
