package dev.ttpipe.actors;

import com.tngtech.archunit.core.domain.JavaClasses;
import com.tngtech.archunit.core.importer.ClassFileImporter;
import com.tngtech.archunit.core.importer.ImportOption;
import com.tngtech.archunit.core.domain.Dependency;
import com.tngtech.archunit.core.domain.JavaClass;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noClasses;
import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noFields;
import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noMethods;
import static com.tngtech.archunit.library.Architectures.layeredArchitecture;

/**
 * The architecture as tests (ArchUnit over the production classes of every module): data flows one way
 * (schedules and the device bridge at the bottom, stages and transport over the bridge, actors over all of
 * them; examples, on top, are not on this module's class path); Pekko stays in actors; picocli stays in the CLI; and no new dependency cycle
 * between packages: the packages that depend on each other in a ring (a strongly connected component of the
 * package graph) are exactly the ones listed in {@link #KNOWN_CYCLES}, which only shrinks as they are broken.
 */
class ArchitectureTest {
    static JavaClasses classes;

    @BeforeAll
    static void importClasses() {
        classes = new ClassFileImporter().withImportOption(ImportOption.Predefined.DO_NOT_INCLUDE_TESTS)
                .importPackages("dev.ttpipe");
    }

    @Test
    void modulesDependOnlyDownwards() {
        layeredArchitecture().consideringOnlyDependenciesInLayers().withOptionalLayers(true)
                .layer("schedules").definedBy("dev.ttpipe.schedules..")
                .layer("device").definedBy("dev.ttpipe.device..")
                .layer("stages").definedBy("dev.ttpipe.stages..")
                .layer("transport").definedBy("dev.ttpipe.transport..")
                .layer("actors").definedBy("dev.ttpipe.actors..")
                .layer("examples").definedBy("dev.ttpipe.examples..")
                .whereLayer("examples").mayNotBeAccessedByAnyLayer()
                .whereLayer("actors").mayOnlyBeAccessedByLayers("examples")
                .whereLayer("stages").mayOnlyBeAccessedByLayers("actors", "examples")
                .whereLayer("transport").mayOnlyBeAccessedByLayers("actors", "examples")
                .whereLayer("device").mayOnlyBeAccessedByLayers("stages", "transport", "actors", "examples")
                .whereLayer("schedules").mayOnlyBeAccessedByLayers("actors", "examples")
                .check(classes);
    }

    @Test
    void nothingBelowActorsDependsOnPekko() {
        noClasses().that().resideOutsideOfPackages("dev.ttpipe.actors..", "dev.ttpipe.examples..")
                .should().dependOnClassesThat().resideInAPackage("org.apache.pekko..")
                .check(classes);
    }

    @Test
    void onlyTheCliDependsOnPicocli() {
        noClasses().that().resideOutsideOfPackage("dev.ttpipe.actors.cli..")
                .should().dependOnClassesThat().resideInAPackage("picocli..")
                .check(classes);
    }

    /** A rank's row interpreter and its state are plain Java: they are tested without actors. */
    @Test
    void theRankExecutorAndRankStateDoNotDependOnPekko() {
        noClasses().that().haveNameMatching("dev\\.ttpipe\\.actors\\.runtime\\.(RankExecutor|RankState)(\\$.*)?")
                .should().dependOnClassesThat().resideInAPackage("org.apache.pekko..")
                .check(classes);
    }

    /** Faults are injected by the test that wants them ({@code runtime.Faults}, {@code transport.FrameFault}), not switched on in production classes. */
    @Test
    void noTestHooksInProductionClasses() {
        noMethods().should().haveNameMatching("(?i).*for_?tests?").check(classes);
        noFields().should().haveNameMatching("(?i).*for_?tests?|test[A-Z].*").check(classes);
    }

    /**
     * The package cycles that exist today, each a set of packages (below dev.ttpipe) that reach each other. A cycle
     * added back or a package joining one fails {@link #noNewCycleBetweenPackages}; breaking one fails it too,
     * until the cycle is taken off this list.
     */
    static final List<Set<String>> KNOWN_CYCLES = List.of(
            Set.of("device", "device.cpu", "device.sim", "device.ttnn", "device.spi"),
            Set.of("stages", "stages.data", "stages.checkpoint"));

    @Test
    void noNewCycleBetweenPackages() {
        Map<String, Set<String>> graph = new TreeMap<>();
        for (JavaClass c : classes) {
            String from = c.getPackageName();
            graph.computeIfAbsent(from, k -> new TreeSet<>());
            for (Dependency d : c.getDirectDependenciesFromSelf()) {
                String to = d.getTargetClass().getBaseComponentType().getPackageName();
                if (to.startsWith("dev.ttpipe.") && !to.equals(from)) graph.get(from).add(to);
            }
        }
        List<Set<String>> cycles = new ArrayList<>();
        for (Set<String> scc : stronglyConnected(graph)) {
            if (scc.size() < 2) continue;
            Set<String> short_ = new TreeSet<>();
            for (String p : scc) short_.add(p.substring("dev.ttpipe.".length()));
            cycles.add(short_);
        }
        List<Set<String>> expected = new ArrayList<>();
        for (Set<String> k : KNOWN_CYCLES) expected.add(new TreeSet<>(k));
        cycles.sort(Comparator.comparing(Object::toString));
        expected.sort(Comparator.comparing(Object::toString));
        assertEquals(expected, cycles, "the packages that depend on each other in rings; a new ring or a package "
                + "joining one is a dependency the design does not allow (a ring broken: take it off KNOWN_CYCLES)");
    }

    /** Tarjan's strongly connected components of {@code graph}. */
    static List<Set<String>> stronglyConnected(Map<String, Set<String>> graph) {
        Map<String, Integer> index = new HashMap<>(), low = new HashMap<>();
        Deque<String> stack = new ArrayDeque<>();
        Set<String> onStack = new TreeSet<>();
        List<Set<String>> out = new ArrayList<>();
        int[] next = {0};
        for (String v : graph.keySet()) if (!index.containsKey(v)) connect(v, graph, index, low, stack, onStack, out, next);
        return out;
    }

    private static void connect(String v, Map<String, Set<String>> graph, Map<String, Integer> index, Map<String, Integer> low,
                                Deque<String> stack, Set<String> onStack, List<Set<String>> out, int[] next) {
        index.put(v, next[0]);
        low.put(v, next[0]++);
        stack.push(v);
        onStack.add(v);
        for (String w : graph.getOrDefault(v, Set.of())) {
            if (!index.containsKey(w)) {
                connect(w, graph, index, low, stack, onStack, out, next);
                low.put(v, Math.min(low.get(v), low.get(w)));
            } else if (onStack.contains(w)) {
                low.put(v, Math.min(low.get(v), index.get(w)));
            }
        }
        if (low.get(v).equals(index.get(v))) {
            Set<String> scc = new TreeSet<>();
            String w;
            do {
                w = stack.pop();
                onStack.remove(w);
                scc.add(w);
            } while (!w.equals(v));
            out.add(scc);
        }
    }

    @Test
    void theCycleFinderFindsARing() {
        Map<String, Set<String>> g = Map.of("a", Set.of("b"), "b", Set.of("c"), "c", Set.of("a"), "d", Set.of("a"));
        List<Set<String>> sccs = stronglyConnected(new TreeMap<>(g));
        assertTrue(sccs.contains(Set.of("a", "b", "c")), sccs.toString());
        assertTrue(sccs.contains(Set.of("d")), sccs.toString());
    }
}
