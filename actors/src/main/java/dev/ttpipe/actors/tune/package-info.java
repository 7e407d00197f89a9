/**
 * {@code ttpipe simulate} and {@code ttpipe tune}: schedules played against a cost model, and the pick of the
 * schedule, microbatches, split and recompute of a job from costs fitted to the model.
 * {@link dev.ttpipe.actors.tune.SimulateRun} is one simulate from its settings to the grid, the figures and the
 * files written. For tune, {@link dev.ttpipe.actors.tune.Calibration} fits {@link dev.ttpipe.actors.tune.LayerCosts}
 * (real steps through the runtime, earlier runs' metrics, or a device cost model);
 * {@link dev.ttpipe.actors.tune.Search} predicts every {@link dev.ttpipe.actors.tune.Candidate} with the
 * schedules module's simulator under each rank's memory; {@link dev.ttpipe.actors.tune.Trial} runs real
 * steps of configs, stepped in turn, for calibration and for checking predictions;
 * {@link dev.ttpipe.actors.tune.Tuning} turns candidates into configs `ttpipe train` loads;
 * {@link dev.ttpipe.actors.tune.TuneRun} is one tune from its settings to the pick, the written config and the
 * ranking printed.
 */
package dev.ttpipe.actors.tune;
