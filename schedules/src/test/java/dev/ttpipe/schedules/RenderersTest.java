package dev.ttpipe.schedules;

import org.junit.jupiter.api.Test;
import org.w3c.dom.Document;
import org.w3c.dom.Element;
import org.w3c.dom.NodeList;

import javax.xml.parsers.DocumentBuilderFactory;
import java.io.ByteArrayInputStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

class RenderersTest {
    private static final CostModel COSTS = CostModel.uniform(1, 2, 1, 1, 0);

    @Test
    void asciiTimelineShowsEachRanksIdleSlotsAsDots() {
        int p = 4;
        int m = 8;
        SimResult r = Simulator.simulate(Schedules.generate("1f1b", p, m, 1, null), COSTS);
        List<String> lines = AsciiGrid.render(r).lines().toList();
        assertEquals(p + 2, lines.size(), String.join("\n", lines));
        for (int rank = 0; rank < p; rank++) {
            String line = lines.get(1 + rank);
            assertTrue(line.startsWith("rank " + rank + " |"), line);
            String cells = line.substring(line.indexOf('|') + 1);
            long idleSlots = cells.chars().filter(c -> c == '.').count();
            assertEquals(Math.round(r.makespan() - r.busy(rank)), idleSlots, line);
            for (int mb = 0; mb < m; mb++) assertTrue(cells.contains("F" + mb) && cells.contains("B" + mb), line);
        }
        assertTrue(lines.get(4).startsWith("rank 3 |.  .  .  F0 B0"), lines.get(4));
    }

    @Test
    void asciiTimelineStaysReadableForEightRanksAndSixteenMicrobatches() {
        SimResult r = Simulator.simulate(Schedules.generate("1f1b", 8, 16, 1, null), COSTS);
        String grid = AsciiGrid.render(r);
        for (String line : grid.lines().toList()) assertTrue(line.length() <= 4 * 69 + 12, line.length() + ": " + line);
        assertTrue(grid.contains("rank 7 |.   .   .   .   .   .   .   F0  B0      F1  B1"), grid);
    }

    @Test
    void aTimelineFoldedToEightyColumnsKeepsEveryActionInBandsThatFit() {
        SimResult r = Simulator.simulate(Schedules.generate("1f1b", 8, 32, 1, null), COSTS);
        String wide = AsciiGrid.render(r);
        String folded = AsciiGrid.render(r, 80);
        assertTrue(wide.lines().anyMatch(l -> l.length() > 400), "unfolded, P=8 M=32 is hundreds of columns wide");
        for (String line : folded.lines().toList()) assertTrue(line.length() <= 80, line.length() + ": " + line);
        assertTrue(folded.lines().filter(l -> l.startsWith("time   |")).count() >= 5, folded);
        for (int rank = 0; rank < 8; rank++) {
            assertEquals(cells(wide, rank), cells(folded, rank), "rank " + rank + "'s actions and idle slots, in order");
            for (int mb = 0; mb < 32; mb++) {
                assertTrue(cells(folded, rank).contains("F" + mb) && cells(folded, rank).contains("B" + mb), rank + " " + mb);
            }
        }
        assertTrue(folded.lines().anyMatch(l -> l.startsWith("time   |18      20")), "each band has its own time axis: " + folded);
    }

    @Test
    void aStepGridFoldsToo() {
        Schedule lowered = Lowering.lower(Schedules.generate("zb-h1", 4, 16, 1, null));
        String wide = AsciiGrid.render(lowered);
        String folded = AsciiGrid.render(lowered, 60);
        for (String line : folded.lines().toList()) assertTrue(line.length() <= 60, line.length() + ": " + line);
        for (int rank = 0; rank < 4; rank++) assertEquals(cells(wide, rank), cells(folded, rank), "rank " + rank);
        assertTrue(folded.lines().filter(l -> l.startsWith("step   |")).count() > 1, folded);
    }

    /** The cells of {@code rank}'s rows, band after band, as words. */
    private static List<String> cells(String grid, int rank) {
        return grid.lines().filter(l -> l.startsWith("rank " + rank + " |"))
                .flatMap(l -> java.util.Arrays.stream(l.substring(l.indexOf('|') + 1).trim().split(" +")))
                .filter(c -> !c.isEmpty()).toList();
    }

    @Test
    void stepGridShowsCommunicationOfLoweredSchedulesAndStagesOfVirtualOnes() {
        String lowered = AsciiGrid.render(Lowering.lower(Schedules.generate("1f1b", 2, 2, 1, null)));
        assertTrue(lowered.contains("rank 0 |F0  sF0 F1  sF1 rB0 B0  rB1 B1"), lowered);
        assertTrue(lowered.contains("rank 1 |rF0 F0  B0  sB0 rF1 F1  B1  sB1"), lowered);
        String interleaved = AsciiGrid.render(Schedules.generate("interleaved", 2, 2, 2, null));
        assertTrue(interleaved.contains("rank 1 |1F0 1F1 3F0"), interleaved);
    }

    @Test
    void svgTimelineDrawsOneBoxPerActionColouredByKind() throws Exception {
        int p = 4;
        int m = 6;
        SimResult r = Simulator.simulate(Schedules.generate("zb-h1", p, m, 1, null), COSTS);
        String svg = SvgTimeline.render(r, "zb-h1 <test>");
        Document doc = DocumentBuilderFactory.newInstance().newDocumentBuilder()
                .parse(new ByteArrayInputStream(svg.getBytes(StandardCharsets.UTF_8)));
        NodeList rects = doc.getElementsByTagName("rect");
        Map<String, Integer> byColour = new HashMap<>();
        for (int i = 0; i < rects.getLength(); i++) {
            byColour.merge(((Element) rects.item(i)).getAttribute("fill"), 1, Integer::sum);
        }
        // one box per action, plus one legend square per kind
        assertEquals(p * m + 1, byColour.get(SvgTimeline.color(ActionKind.F)));
        assertEquals(p * m + 1, byColour.get(SvgTimeline.color(ActionKind.I)));
        assertEquals(p * m + 1, byColour.get(SvgTimeline.color(ActionKind.W)));
        String title = doc.getElementsByTagName("text").item(0).getTextContent();
        assertTrue(title.startsWith("zb-h1 <test> \u2014 P=4, M=6, makespan 21, bubble 14.3%"), title);
        assertTrue(svg.contains(">time</text>") && svg.contains(">idle</text>") && svg.contains(">rank 3</text>"));
    }

    /**
     * 128 ranks and 512 microbatches: 131,072 compute actions, more than {@link SvgTimeline#MAX_BOXES}, so every 4th
     * rank (and the last) is drawn, without comm bars, and the heading says so; the page stays a few MB.
     */
    @Test
    void aLargeTimelineIsDrawnThinnedAndSaysSo() throws Exception {
        int p = 128;
        SimResult r = Simulator.simulate(Lowering.lower(Schedules.generate("1f1b", p, 512, 1, null)),
                CostModel.uniform(1, 2, 1, 1, 0.1));
        assertEquals(4, SvgTimeline.rankStride(r));
        String svg = SvgTimeline.render(r, "1f1b");
        assertTrue(svg.length() < 15_000_000, svg.length() + " characters");
        Document doc = DocumentBuilderFactory.newInstance().newDocumentBuilder()
                .parse(new ByteArrayInputStream(svg.getBytes(StandardCharsets.UTF_8)));
        String title = doc.getElementsByTagName("text").item(0).getTextContent();
        assertTrue(title.endsWith("; drawn: every 4th rank (33 of 128), no comm bars"), title);
        Map<String, Integer> byColour = new HashMap<>();
        NodeList rects = doc.getElementsByTagName("rect");
        for (int i = 0; i < rects.getLength(); i++) byColour.merge(((Element) rects.item(i)).getAttribute("fill"), 1, Integer::sum);
        assertEquals(33 * 512 + 1, byColour.get(SvgTimeline.color(ActionKind.F)), "every drawn rank's forwards, and the legend's");
        assertEquals(1, byColour.get(SvgTimeline.color(ActionKind.SEND_F)), "the legend's comm square only");
        assertTrue(svg.contains(">rank 124</text>") && svg.contains(">rank 127</text>") && !svg.contains(">rank 125</text>"));
        SimResult small = Simulator.simulate(Schedules.generate("1f1b", 8, 32, 1, null), COSTS);
        assertEquals(1, SvgTimeline.rankStride(small));
        assertFalse(SvgTimeline.render(small, "1f1b").contains("drawn:"));
        // 16 ranks x 1024 microbatches, lowered: 32,768 compute actions and 65,536 comm: every rank, no comm bars
        SimResult wide = Simulator.simulate(Lowering.lower(Schedules.generate("1f1b", 16, 1024, 1, null)),
                CostModel.uniform(1, 2, 1, 1, 0.1));
        assertEquals(1, SvgTimeline.rankStride(wide));
        String wideSvg = SvgTimeline.render(wide, "1f1b");
        assertTrue(wideSvg.contains("; drawn: no comm bars</text>"), wideSvg.substring(0, 600));
        assertFalse(wideSvg.contains("fill=\"" + SvgTimeline.color(ActionKind.SEND_F) + "\" stroke"), "no comm bar drawn");
    }

    @Test
    void svgTimelineIsAsWideAsItsActionsNeedSoEveryMicrobatchIsLabelled() throws Exception {
        SimResult r = Simulator.simulate(Schedules.generate("1f1b", 8, 32, 1, null), COSTS);
        Document doc = DocumentBuilderFactory.newInstance().newDocumentBuilder()
                .parse(new ByteArrayInputStream(SvgTimeline.render(r, "1f1b").getBytes(StandardCharsets.UTF_8)));
        int width = Integer.parseInt(doc.getDocumentElement().getAttribute("width"));
        assertTrue(width > 1290, "wider than the old fixed 1,290 px: " + width);
        Map<String, Integer> labels = new HashMap<>();
        NodeList texts = doc.getElementsByTagName("text");
        for (int i = 0; i < texts.getLength(); i++) {
            Element t = (Element) texts.item(i);
            if ("white".equals(t.getAttribute("fill"))) labels.merge(t.getTextContent(), 1, Integer::sum);
        }
        for (int mb = 0; mb < 32; mb++) assertEquals(2 * 8, labels.get(Integer.toString(mb)), "F and B of microbatch " + mb + " on 8 ranks");
        SimResult twice = Simulator.simulate(Schedules.generate("1f1b", 8, 64, 1, null), COSTS);
        int wider = SvgTimeline.plotWidth(twice, false);
        assertTrue(wider > 1.7 * SvgTimeline.plotWidth(r, false), "twice the microbatches, about twice as wide: " + wider);
        SimResult few = Simulator.simulate(Schedules.generate("1f1b", 2, 2, 1, null), COSTS);
        assertEquals(SvgTimeline.MIN_PLOT_WIDTH, SvgTimeline.plotWidth(few, false));
        SimResult many = Simulator.simulate(Schedules.generate("1f1b", 4, 4096, 1, null), COSTS);
        assertEquals(SvgTimeline.MAX_PLOT_WIDTH, SvgTimeline.plotWidth(many, false));
    }

    @Test
    void chromeTraceHasAProcessPerRankCompleteEventsAndFlowArrows() {
        int p = 3;
        int m = 4;
        for (Schedule s : List.of(Schedules.generate("1f1b", p, m, 1, null), Lowering.lower(Schedules.generate("1f1b", p, m, 1, null)))) {
            SimResult r = Simulator.simulate(s, CostModel.uniform(1, 2, 1, 1, 0.5));
            @SuppressWarnings("unchecked")
            Map<String, Object> trace = (Map<String, Object>) MiniJson.parse(ChromeTrace.render(r));
            @SuppressWarnings("unchecked")
            List<Map<String, Object>> events = (List<Map<String, Object>>) trace.get("traceEvents");
            int complete = 0;
            Map<Double, Map<String, Object>> flowStarts = new HashMap<>();
            Map<Double, Map<String, Object>> flowEnds = new HashMap<>();
            for (Map<String, Object> e : events) {
                switch ((String) e.get("ph")) {
                    case "M" -> {
                        if (e.get("name").equals("process_name")) {
                            int pid = ((Double) e.get("pid")).intValue();
                            assertEquals("rank " + pid, ((Map<?, ?>) e.get("args")).get("name"));
                        }
                    }
                    case "X" -> {
                        complete++;
                        if (e.get("name").equals("1F2")) {
                            assertEquals(1000.0, e.get("dur"));
                            assertEquals(1.0, e.get("pid"));
                        }
                    }
                    case "s" -> flowStarts.put((Double) e.get("id"), e);
                    case "f" -> {
                        assertEquals("e", e.get("bp"));
                        flowEnds.put((Double) e.get("id"), e);
                    }
                    default -> throw new AssertionError("unexpected event " + e);
                }
            }
            assertEquals(s.size(), complete);
            assertEquals(2 * (p - 1) * m, flowStarts.size(), "one arrow per activation and per gradient crossing ranks");
            assertEquals(flowStarts.keySet(), flowEnds.keySet());
            for (Map.Entry<Double, Map<String, Object>> start : flowStarts.entrySet()) {
                Map<String, Object> end = flowEnds.get(start.getKey());
                assertTrue((Double) start.getValue().get("ts") < (Double) end.get("ts"), "data arrives after it is sent");
                assertTrue(!start.getValue().get("pid").equals(end.get("pid")));
            }
        }
    }

    @Test
    void chromeTraceEscapesTheScheduleName() {
        Schedule s = ScheduleCsv.read("0F0,0B0\n", "we\"ird\\name.csv");
        Object parsed = MiniJson.parse(ChromeTrace.render(Simulator.simulate(s, COSTS)));
        assertEquals("we\"ird\\name.csv", ((Map<?, ?>) ((Map<?, ?>) parsed).get("otherData")).get("schedule"));
    }
}
