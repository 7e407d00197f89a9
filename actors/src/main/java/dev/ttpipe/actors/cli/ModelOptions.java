package dev.ttpipe.actors.cli;

import dev.ttpipe.actors.UserInputException;
import dev.ttpipe.actors.config.SocketType;
import dev.ttpipe.actors.train.ModelSource;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.IOException;
import java.nio.file.Path;
import java.util.Locale;

/** The model a using command (eval, generate) reads: MODEL, how to split and run it, its tokenizer where the model does not say. */
public final class ModelOptions {
    @Parameters(index = "0", paramLabel = "MODEL", description = "A ttpipe checkpoint (or run directory, or 'latest') or a Hugging Face model directory.")
    String model;

    @Option(names = "--stages", paramLabel = "P", defaultValue = "1",
            description = "Split the model into P stages; P > 1 runs them pipelined, one rank each, as training does (default ${DEFAULT-VALUE}).")
    int stages;

    @Option(names = "--transport", paramLabel = "NAME", defaultValue = "local",
            description = "How activations move between the ranks of --stages P > 1: local or aeron (IPC) (default ${DEFAULT-VALUE}).")
    String transport;

    @Option(names = "--tokenizer", paramLabel = "NAME", description = "gpt2, a Hugging Face tokenizer.json (or its folder) or a char vocab.txt, where the model does not say.")
    String tokenizer;

    @Option(names = "--runs-dir", paramLabel = "DIR", defaultValue = "runs", description = "Where 'latest' looks (default ${DEFAULT-VALUE}).")
    Path runsDir;

    /** The model, checked against {@code --stages} and {@code --transport}. */
    ModelSource open() throws IOException {
        if (stages < 1) throw new UserInputException("--stages: " + stages + " given, expected a positive integer");
        transport();
        ModelSource src = ModelSource.open(model, runsDir, tokenizer, System.err);
        int blocks = src.spec().numBlocks();
        if (stages > blocks) {
            throw new UserInputException("--stages: " + stages + " given, expected 1.." + blocks + " (at most one stage per block: "
                    + src.description() + " has " + blocks + ")");
        }
        return src;
    }

    boolean pipelined() {
        return stages > 1;
    }

    SocketType transport() {
        return switch (transport.toLowerCase(Locale.ROOT)) {
            case "local" -> SocketType.LOCAL;
            case "aeron" -> SocketType.AERON;
            default -> throw new UserInputException("--transport: '" + transport + "' given, expected local or aeron");
        };
    }

    /** How the stages run, for the output: "1 stage" or "2 stages pipelined over local". */
    String how() {
        return pipelined() ? stages + " stages pipelined over " + transport() : "1 stage";
    }
}
