package dev.ttpipe.stages;

import dev.ttpipe.device.Backends;
import dev.ttpipe.device.MeshDevice;
import dev.ttpipe.device.MeshOptions;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.stages.data.ArithmeticCorpus;
import dev.ttpipe.stages.data.Batch;
import dev.ttpipe.stages.data.CharTokenizer;
import dev.ttpipe.stages.data.TextDataset;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Partitioning, learning-rate schedules, clipping and data: the pieces around the model. */
class TrainingPiecesTest {
    @Test
    void blocksPerRankBecomesContiguousStagesOnTheirRanks() {
        List<StageSlice> s = Partitioner.fromBlocksPerRank(List.of(1, 3, 2), 6, 1);
        assertEquals(List.of(new StageSlice(0, 0, 0, 1, true, false), new StageSlice(1, 1, 1, 4, false, false),
                new StageSlice(2, 2, 4, 6, false, true)), s);
    }

    @Test
    void virtualStagesInterleaveRanksAndSplitEachRanksBlocks() {
        List<StageSlice> s = Partitioner.fromBlocksPerRank(List.of(2, 4), 6, 2);
        assertEquals(4, s.size());
        assertEquals(List.of(0, 1, 0, 1), s.stream().map(StageSlice::rank).toList());
        assertEquals(List.of(1, 2, 1, 2), s.stream().map(StageSlice::blocks).toList());
        assertTrue(s.get(0).embedding() && s.get(3).head());
    }

    @Test
    void rejectsBlocksPerRankThatDoNotSumOrLeaveARankEmpty() {
        StagesException sum = assertThrows(StagesException.class, () -> Partitioner.fromBlocksPerRank(List.of(4, 4), 10, 1));
        assertTrue(sum.getMessage().contains("sums to 8, expected num_blocks = 10 (2 too few)"), sum.getMessage());
        StagesException empty = assertThrows(StagesException.class, () -> Partitioner.fromBlocksPerRank(List.of(4, 0, 6), 10, 1));
        assertTrue(empty.getMessage().contains("rank 1 is missing or has 0 blocks"), empty.getMessage());
    }

    @Test
    void autoSplitGivesTheEndStagesFewerBlocksWhenEmbeddingAndHeadCost() {
        List<StageSlice> even = Partitioner.balanced(8, 4, 1, 1.0, 0.0, 0.0);
        assertEquals(List.of(2, 2, 2, 2), even.stream().map(StageSlice::blocks).toList());
        List<StageSlice> heavyHead = Partitioner.balanced(8, 4, 1, 1.0, 0.0, 2.0);
        assertEquals(8, heavyHead.stream().mapToInt(StageSlice::blocks).sum());
        assertTrue(heavyHead.get(3).blocks() < heavyHead.get(1).blocks(), heavyHead.toString());
        assertThrows(StagesException.class, () -> Partitioner.balanced(3, 4, 1, 1.0, 0.0, 0.0));
    }

    @Test
    void rebalancedGivesASlowRankFewerBlocks() {
        Partitioner.Costs blocksOnly = new Partitioner.Costs(1.0, 0.0, 0.0);
        boolean[] none = new boolean[4];
        assertArrayEquals(new int[] {2, 2, 2, 2},
                Partitioner.rebalanced(8, 1, blocksOnly, none, none, new double[] {1, 1, 1, 1}));
        // rank 2 takes twice as long: no split does better than 4 units; of those, the most even
        assertArrayEquals(new int[] {4, 3, 2, 3},
                Partitioner.rebalanced(12, 1, blocksOnly, none, none, new double[] {1, 1, 2, 1}));
        // a head worth two blocks on the last rank, as balanced() weighs it
        Partitioner.Costs heavyHead = new Partitioner.Costs(1.0, 0.0, 2.0);
        assertArrayEquals(new int[] {3, 3, 3, 1}, Partitioner.rebalanced(10, 1, heavyHead, none,
                new boolean[] {false, false, false, true}, new double[] {1, 1, 1, 1}));
        // at least one block per virtual stage, however slow
        assertArrayEquals(new int[] {5, 2}, Partitioner.rebalanced(7, 2, blocksOnly, new boolean[2], new boolean[2],
                new double[] {1, 100}));
        assertThrows(StagesException.class, () -> Partitioner.rebalanced(3, 1, blocksOnly, none, none, new double[4]));
    }

    @Test
    void learningRateSchedulesFollowTheirShapes() {
        LrSchedule id = LrSchedule.constant(0.1);
        assertEquals(0.1, id.at(0), 0);
        assertEquals(0.1, id.at(1000), 0);
        LrSchedule lin = new LrSchedule(LrSchedule.Kind.WARMUP_LINEAR, 1.0, 10, 110, 0.0);
        assertEquals(0.1, lin.at(0), 1e-12);
        assertEquals(1.0, lin.at(9), 1e-12);
        assertEquals(0.5, lin.at(60), 1e-12);
        assertEquals(0.0, lin.at(110), 1e-12);
        LrSchedule cos = new LrSchedule(LrSchedule.Kind.COSINE, 1.0, 0, 100, 0.1);
        assertEquals(1.0, cos.at(0), 1e-12);
        assertEquals(0.55, cos.at(50), 1e-12);
        assertEquals(0.1, cos.at(100), 1e-12);
    }

    @Test
    void clipFactorScalesTheGlobalNormDownToTheMaximum() {
        assertEquals(1.0, Optimizer.clipFactor(0.25, 1.0), 0);            // norm 0.5
        assertEquals(0.5, Optimizer.clipFactor(4.0, 1.0), 1e-6);          // norm 2
    }

    @Test
    void noopOptimizerCountsStepsAndLeavesEveryWeightAsItWas() {
        TextDataset data = TextDataset.of("to be, or not to be, that is the question. ".repeat(20), 0.1);
        ModelSpec spec = ModelSpec.llama(data.tokenizer().vocabSize(), 16, 2, 1, 2, 8);
        try (MeshDevice mesh = Backends.open("cpu", new MeshShape(1, 1),
                MeshOptions.defaults().withThreads(1));
             ReferenceTrainer noop = new ReferenceTrainer(spec, mesh.asSubmesh(), Parallelism.NONE, 7, OptimizerSpec.noop(),
                     LrSchedule.constant(0.1), 0, 1)) {
            Map<String, float[]> before = noop.weights();
            List<Batch> batch = List.of(data.trainBatch(7, 0, 2, 8));
            double first = noop.step(0, batch).loss();
            double second = noop.step(1, batch).loss();
            assertEquals(first, second, 0.0, "the same batch gives the same loss: nothing was updated");
            assertEquals(0.0, WeightDiff.compare(noop.weights(), before).maxRelative(), 0.0);
        }
    }

    @Test
    void charTokenizerRoundTripsAnyTextAndItsSavedVocabulary(@TempDir Path dir) throws Exception {
        String text = "Héllo, wörld!\n\t🙂 ok";
        CharTokenizer t = CharTokenizer.fromText(text);
        assertEquals(text, t.decode(t.encode(text)));
        Path f = dir.resolve("vocab.txt");
        t.save(f);
        assertEquals(t, CharTokenizer.load(f));
        assertFalse(t.canEncode("xyz"));
        assertThrows(IllegalArgumentException.class, () -> t.encode("Z"));
    }

    @Test
    void batchesAreAFunctionOfSeedAndPassAndTargetsAreShiftedInputs() {
        TextDataset d = TextDataset.of(ArithmeticCorpus.generate(1, 2000, 9), 0.1);
        Batch a = d.trainBatch(7, 3, 4, 16), b = d.trainBatch(7, 3, 4, 16), c = d.trainBatch(7, 4, 4, 16);
        assertArrayEquals(a.inputs(), b.inputs());
        assertFalse(Arrays.equals(a.inputs(), c.inputs()));
        for (int i = 0; i < 4; i++) {
            for (int t = 0; t + 1 < 16; t++) assertEquals(a.inputs()[i * 16 + t + 1], a.targets()[i * 16 + t]);
        }
        assertTrue(d.validationTokens() > 0 && d.trainTokens() > 9 * d.validationTokens() - 20);
    }

    @Test
    void arithmeticLinesAreCheckedForTheRightSum() {
        assertTrue(ArithmeticCorpus.isCorrect("7+8=15"));
        assertFalse(ArithmeticCorpus.isCorrect("7+8=16"));
        assertFalse(ArithmeticCorpus.isCorrect("7+8="));
        for (String line : ArithmeticCorpus.generate(3, 50, 9).split("\n")) assertTrue(ArithmeticCorpus.isCorrect(line), line);
    }
}
