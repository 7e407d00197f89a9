package dev.ttpipe.actors.telemetry;

import org.junit.jupiter.api.Test;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code top}'s loss history is kept by step: a recovery's redone steps replace what they supersede, and it is marked. */
class TopViewTest {
    private static Map<String, Object> status(int step, double loss, Map<String, Object> mark) {
        Map<String, Object> s = new HashMap<>();
        s.put("step", step);
        s.put("steps", 10);
        s.put("loss", loss);
        s.put("mark", mark);
        s.put("ranks", List.of());
        return s;
    }

    @Test
    void stepsRedoneAfterARecoveryReplaceTheSupersededOnesAndAreMarked() {
        TopView view = new TopView();
        for (int step = 1; step <= 5; step++) view.observe(status(step, 10 - step, null));   // 9, 8, 7, 6, 5
        assertEquals("█▆▅▃▁", view.sparkline(16));
        // the job failed in step 6 and went back to the checkpoint of step 2: steps 3.. are redone, higher this time
        Map<String, Object> recovery = Map.of("kind", "recovery", "from_step", 2);
        view.observe(status(3, 9.5, recovery));
        view.observe(status(4, 9.0, recovery));
        String spark = view.sparkline(16);
        assertEquals(5, spark.length(), "steps 1, 2, a bar, the redone 3 and 4 (not the superseded 3..5): " + spark);
        assertEquals('|', spark.charAt(2), spark);
        assertEquals("█", spark.substring(3, 4), "the redone step 3 (9.5) is the highest now: " + spark);
        String top = view.render("http://x", status(4, 9.0, recovery), 80);
        assertTrue(top.lines().skip(1).findFirst().orElseThrow().contains("| recovered @2"), top);
    }

    /**
     * 256 ranks on a 40-line terminal: rows of 8 consecutive ranks (how many run, wait, idle or do not answer, the
     * mean busy share, the largest memory and queue), every line within 80 columns and the screen within 39 lines;
     * without a height (--once) every rank has its own row.
     */
    @Test
    void manyRanksShareRowsToFitTheTerminal() {
        List<Map<String, Object>> ranks = new java.util.ArrayList<>();
        for (int r = 0; r < 256; r++) {
            Map<String, Object> m = new HashMap<>();
            m.put("rank", r);
            m.put("up", r != 5);
            if (r < 100) m.put("running", r + "F3");
            else if (r < 200) m.put("waiting_for", r + "RECV_F3");
            m.put("running_ms", 10);
            m.put("waiting_ms", 10);
            m.put("waiting_from_rank", r - 1);
            m.put("bubble", r < 8 ? 0.5 : 0.25);
            m.put("memory_bytes", (long) (r + 1) << 20);
            m.put("queue_depth", r % 3);
            ranks.add(m);
        }
        Map<String, Object> status = status(3, 2.0, null);
        status.put("ranks", ranks);
        String screen = new TopView().render("http://x", status, 80, 40);
        String[] lines = screen.split("\n");
        assertTrue(lines.length <= 39, lines.length + " lines:\n" + screen);
        for (String line : lines) assertTrue(line.length() <= 80, line);
        assertTrue(screen.contains("\n0-7       7 running, 1 no answer"), screen);
        assertTrue(screen.contains("[#######.......]  50%     8.0 MiB     2"), screen);
        assertTrue(screen.contains("\n96-103    4 running, 4 waiting"), screen);
        assertTrue(screen.contains("\n248-255   8 idle"), screen);
        assertTrue(screen.contains("(256 ranks in rows of 8 to fit the terminal; top --once lists every rank)"), screen);
        String once = new TopView().render("http://x", status, 80);
        assertEquals(3 + 256, once.split("\n").length, "every rank on its own row");
    }

    @Test
    void aResumeIsNamedAndItsFirstStepsDrawnAfterABar() {
        TopView view = new TopView();
        Map<String, Object> resume = Map.of("kind", "resume", "from_step", 125);
        view.observe(status(126, 2.0, resume));
        view.observe(status(127, 1.5, resume));
        String top = view.render("http://x", status(127, 1.5, resume), 80);
        assertTrue(top.contains("step 127/10 | loss 1.5000 █▁ | resumed @125"), top);
        for (String line : top.split("\n")) assertTrue(line.length() <= 80, line);
    }
}
