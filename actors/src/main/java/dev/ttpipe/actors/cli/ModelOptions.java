package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.train.ModelSource;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.IOException;
import java.nio.file.Path;

/** The model a using command (eval, generate) reads: MODEL, how to split it, its tokenizer where the model does not say. */
public final class ModelOptions {
    @Parameters(index = "0", paramLabel = "MODEL", description = "A ttpipe checkpoint (or run directory, or 'latest') or a Hugging Face model directory.")
    String model;

    @Option(names = "--stages", paramLabel = "P", defaultValue = "1", description = "Split the model into P stages (default ${DEFAULT-VALUE}).")
    int stages;

    @Option(names = "--tokenizer", paramLabel = "NAME", description = "gpt2, a Hugging Face tokenizer.json or a char vocab.txt, where the model does not say.")
    String tokenizer;

    @Option(names = "--runs-dir", paramLabel = "DIR", defaultValue = "runs", description = "Where 'latest' looks (default ${DEFAULT-VALUE}).")
    Path runsDir;

    ModelSource open() throws IOException {
        if (stages < 1) throw new UserInputException("--stages: " + stages + " given, expected a positive integer");
        return ModelSource.open(model, runsDir, tokenizer, System.err);
    }
}
