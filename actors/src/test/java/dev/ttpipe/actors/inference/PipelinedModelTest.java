package dev.ttpipe.actors.inference;

import dev.ttpipe.actors.config.Backend;
import dev.ttpipe.actors.config.SocketType;
import dev.ttpipe.actors.runtime.Coordinator;
import dev.ttpipe.actors.train.ModelSource;
import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.stages.Evaluation;
import dev.ttpipe.stages.ModelSpec;
import dev.ttpipe.stages.Optimizer;
import dev.ttpipe.stages.OptimizerSpec;
import dev.ttpipe.stages.Parallelism;
import dev.ttpipe.stages.Stage;
import dev.ttpipe.stages.checkpoint.HfExport;
import dev.ttpipe.stages.checkpoint.StageState;
import dev.ttpipe.stages.data.Batch;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Eval and generate pipelined over P ranks (StageActors, activations over the transport) give the one-process
 * path's loss and tokens bit for bit: GPT-2 (tied embedding, learned positions) and Llama (GQA, RoPE), at
 * P = 2 and 4, greedy and sampled with a seed, over the local transport and Aeron IPC.
 */
class PipelinedModelTest {
    static final int SEQ = 8, BATCH = 2;

    /** A Hugging Face directory holding a randomly initialised model of {@code spec}. */
    static Path hfModel(Path dir, ModelSpec spec) throws Exception {
        Path ckpt = Files.createDirectories(dir.resolve("ckpt")), hf = dir.resolve("hf");
        try (MeshDevice mesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults().withThreads(1));
             Stage whole = new Stage(spec, new dev.ttpipe.stages.StageSlice(0, 0, 0, spec.numBlocks(), true, true), mesh.asSubmesh(),
                     Parallelism.NONE, 11)) {
            StageState.write(ckpt, List.of(StageState.snapshot(whole, new Optimizer(OptimizerSpec.noop()))));
        }
        HfExport.export(ckpt, spec, hf);
        return hf;
    }

    static ModelSpec spec(ModelSpec.ModelType type) {
        return type == ModelSpec.ModelType.GPT2
                ? new ModelSpec(type, 64, 16, 4, 4, 4, 64, 16, 0f, true, 10000f, false)
                : new ModelSpec(type, 64, 16, 4, 2, 4, 48, 16, 0f, false, 10000f, false);
    }

    /** Three batches of random tokens, some targets ignored. */
    static List<Batch> batches(ModelSpec spec) {
        Random rng = new Random(3);
        List<Batch> out = new ArrayList<>();
        for (int b = 0; b < 3; b++) {
            int[] in = new int[BATCH * SEQ], tg = new int[BATCH * SEQ];
            for (int i = 0; i < in.length; i++) {
                in[i] = rng.nextInt(spec.vocabSize());
                tg[i] = i % 5 == 4 ? -100 : rng.nextInt(spec.vocabSize());     // -100: ignored
            }
            out.add(new Batch(BATCH, SEQ, in, tg));
        }
        return out;
    }

    @ParameterizedTest
    @EnumSource(ModelSpec.ModelType.class)
    void pipelinedEvalAndGenerationEqualTheOneProcessPathBitForBit(ModelSpec.ModelType type, @TempDir Path dir) throws Exception {
        ModelSpec spec = spec(type);
        ModelSource src = ModelSource.open(hfModel(dir, spec).toString(), dir, null, System.err);
        List<Batch> batches = batches(spec);
        int[] prompt = {5, 9, 2, 33, 7};
        int n = spec.maxSequenceLength() - prompt.length;
        double loss;
        int[] greedy, sampled;
        try (MeshDevice mesh = Backends.open("cpu", new MeshShape(1, 1), MeshOptions.defaults())) {
            List<Stage> stages = src.load(mesh.asSubmesh(), 1);
            try {
                loss = Evaluation.meanLoss(stages, batches);
                greedy = Evaluation.generateCached(stages, prompt, n, 0, 0, 1, Integer.MAX_VALUE, null);
                sampled = Evaluation.generateCached(stages, prompt, n, 0.9, 20, 7, Integer.MAX_VALUE, null);
            } finally {
                stages.forEach(Stage::close);
            }
        }
        assertTrue(Double.isFinite(loss) && loss > 0, "loss " + loss);
        assertTrue(!Arrays.equals(greedy, sampled), "sampling picks other tokens than greedy");
        for (int p : new int[]{2, 4}) {
            for (SocketType transport : p == 2 ? List.of(SocketType.LOCAL, SocketType.AERON) : List.of(SocketType.LOCAL)) {
                String where = type + " on " + p + " ranks over " + transport;
                // two batches a pass: the third runs in a second pass
                try (PipelinedModel m = PipelinedModel.forEval(src, p, Backend.CPU, transport, 2, BATCH, SEQ)) {
                    Coordinator.EvalReport r = m.eval(batches);
                    assertEquals(Double.doubleToLongBits(loss), Double.doubleToLongBits(r.loss()), where + ": " + r.loss() + " vs " + loss);
                    assertEquals(3L * BATCH * SEQ, r.tokens());
                }
                try (PipelinedModel m = PipelinedModel.forGeneration(src, p, Backend.CPU, transport, prompt.length)) {
                    List<Integer> streamed = new ArrayList<>();
                    Coordinator.GenerateReport g = m.generate(prompt, n, 0, 0, 1, Integer.MAX_VALUE, streamed::add);
                    assertArrayEquals(greedy, g.ids(), where + ", greedy");
                    assertEquals(Arrays.stream(greedy, prompt.length, greedy.length).boxed().toList(), streamed, where);
                    assertArrayEquals(sampled, m.generate(prompt, n, 0.9, 20, 7, Integer.MAX_VALUE, id -> { }).ids(), where + ", sampled");
                }
            }
        }
    }
}
