package dev.ttpipe.schedules;

import org.junit.jupiter.api.Test;

import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class GreedyZeroBubbleTest {

    @Test
    void matchesZbH1WhenFIAndWCostTheSame() {
        CostModel costs = CostModel.uniform(1, 2, 1, 1, 0);
        for (int p = 2; p <= 8; p += 2) {
            SimResult greedy = Simulator.simulate(Schedules.generate("zb-greedy", p, 2 * p, 1, costs), costs);
            SimResult h1 = Simulator.simulate(Schedules.generate("zb-h1", p, 2 * p, 1, null), costs);
            assertEquals(h1.makespan(), greedy.makespan(), 1e-9, "P=" + p);
        }
    }

    @Test
    void neverLosesToOneFOneBOrZbH1OnRandomCosts() {
        Random random = new Random(7);
        for (int trial = 0; trial < 40; trial++) {
            int p = 2 + random.nextInt(7);
            int m = p + random.nextInt(3 * p);
            CostModel costs = SchedulePropertyTest.randomCosts(random, p, p);
            double greedy = Simulator.simulate(Schedules.generate("zb-greedy", p, m, 1, costs), costs).makespan();
            double oneF = Simulator.simulate(Schedules.generate("1f1b", p, m, 1, null), costs).makespan();
            assertTrue(greedy <= oneF + 1e-9, "trial " + trial + ": " + greedy + " vs 1f1b " + oneF);
        }
    }

    @Test
    void moreMemoryBuysAShorterScheduleWhenWeightPassesAreCheap() {
        int p = 8;
        CostModel costs = CostModel.builder().forward(1).backwardInput(1).backwardWeight(0.5).build();
        double oneP = Simulator.simulate(Schedules.generate("zb-greedy", p, 32, 1, costs), costs).makespan();
        CostModel twoP = costs.toBuilder().memoryLimitMicrobatches(2 * p).build();
        SimResult r = Simulator.simulate(Schedules.generate("zb-greedy", p, 32, 1, twoP), twoP);
        assertTrue(r.makespan() < oneP, r.makespan() + " vs " + oneP);
        double h2 = Simulator.simulate(Schedules.generate("zb-h2", p, 32, 1, null), costs).makespan();
        assertTrue(r.makespan() <= h2, r.makespan() + " vs zb-h2 " + h2);
    }

    @Test
    void followsUnevenStageCosts() {
        CostModel costs = CostModel.builder().forward(1, 1, 2, 1).backwardInput(1, 1, 2, 1).backwardWeight(1, 1, 2, 1).build();
        Schedule s = Schedules.generate("zb-greedy", 4, 12, 1, costs);
        Validator.validate(s);
        assertTrue(Simulator.simulate(s, costs).makespan() <= Simulator.simulate(Schedules.generate("zb-h1", 4, 12, 1, null), costs).makespan());
        assertThrows(ScheduleException.class, () -> Schedules.generate("zb-greedy", 3, 12, 1, costs));
    }
}
