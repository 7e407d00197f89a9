/**
 * Microbatch schedules for pipeline parallelism: the IR, generators, validation, simulation and
 * rendering. Pure Java, no dependencies.
 *
 * <ul>
 * <li>IR: an {@link dev.ttpipe.schedules.Action} is (stage, {@link dev.ttpipe.schedules.ActionKind},
 *     microbatch), written {@code 2F0}; a {@link dev.ttpipe.schedules.Schedule} is one ordered row of
 *     actions per rank. {@link dev.ttpipe.schedules.ScheduleCsv} reads and writes torch-style CSVs.</li>
 * <li>Generators: {@link dev.ttpipe.schedules.Schedules#generate} (gpipe, 1f1b, interleaved, zb-h1,
 *     zb-h2, zb-greedy, dualpipev). {@link dev.ttpipe.schedules.Lowering} inserts SEND/RECV.</li>
 * <li>{@link dev.ttpipe.schedules.Validator} proves dependencies and freedom from deadlock;
 *     {@link dev.ttpipe.schedules.Simulator} plays a schedule against a
 *     {@link dev.ttpipe.schedules.CostModel} into a {@link dev.ttpipe.schedules.SimResult}, which
 *     measured timelines can be turned into as well.</li>
 * <li>Renderers: {@link dev.ttpipe.schedules.AsciiGrid}, {@link dev.ttpipe.schedules.SvgTimeline},
 *     {@link dev.ttpipe.schedules.ChromeTrace}. {@link dev.ttpipe.schedules.ScheduleBenchmark} prints
 *     timings.</li>
 * </ul>
 * User-caused problems are {@link dev.ttpipe.schedules.ScheduleException}s.
 */
package dev.ttpipe.schedules;
