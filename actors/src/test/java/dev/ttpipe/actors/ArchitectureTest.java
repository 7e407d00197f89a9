package dev.ttpipe.actors;

import com.tngtech.archunit.core.domain.JavaClasses;
import com.tngtech.archunit.core.importer.ClassFileImporter;
import com.tngtech.archunit.core.importer.ImportOption;
import com.tngtech.archunit.lang.ArchRule;
import com.tngtech.archunit.library.freeze.FreezingArchRule;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noClasses;
import static com.tngtech.archunit.library.Architectures.layeredArchitecture;
import static com.tngtech.archunit.library.dependencies.SlicesRuleDefinition.slices;

/**
 * The architecture as tests (ArchUnit over the production classes of every module): data flows one way
 * (schedules and the device bridge at the bottom, stages and transport over the bridge, actors over all of
 * them; examples, on top, are not on this module's class path); Pekko stays in actors; picocli stays in the CLI; and no new dependency cycle
 * between packages. The cycles that exist in actors today are recorded, one line each, in
 * {@code src/test/resources/archunit_store} (ArchUnit's freezing store): a cycle not in the store fails,
 * and a recorded one that is broken leaves the store.
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

    @Test
    void noNewCycleBetweenPackages() {
        ArchRule rule = slices().matching("dev.ttpipe.(**)").should().beFreeOfCycles();
        FreezingArchRule.freeze(rule).check(classes);
    }
}
