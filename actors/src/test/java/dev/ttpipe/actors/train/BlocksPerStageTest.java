package dev.ttpipe.actors.train;

import org.junit.jupiter.api.Test;

import java.util.Arrays;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The banner's {@code blocks per stage}: the list while it fits, runs for a long split. */
class BlocksPerStageTest {

    @Test
    void aShortSplitIsTheList() {
        assertEquals("[2, 1, 1]", TrainingJob.blocksPerStage(new int[]{2, 1, 1}, 62));
    }

    @Test
    void twoHundredFiftySixStagesAreSummarisedByRuns() {
        int[] blocks = new int[256];
        Arrays.fill(blocks, 1);
        Arrays.fill(blocks, 0, 6, 2);
        blocks[255] = 3;
        assertEquals("2 (stages 0-5), 1 (stages 6-254), 3 (stage 255)", TrainingJob.blocksPerStage(blocks, 62));
    }

    @Test
    void aSplitWithoutRunsStaysTheListWhereRunsWouldBeLonger() {
        int[] blocks = new int[40];
        for (int s = 0; s < blocks.length; s++) blocks[s] = 1 + s % 2;
        String list = TrainingJob.blocksPerStage(blocks, 62);
        assertEquals('[', list.charAt(0));
        assertEquals(blocks.length * 3, list.length(), list);
    }
}
