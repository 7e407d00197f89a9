/**
 * The sim backend: ops take the time {@link dev.ttpipe.device.SimCosts} models for them on an
 * asynchronous per-submesh queue, and do no math; memory accounting, layouts and errors are the
 * cpu backend's. Open it with {@link dev.ttpipe.device.sim.SimMeshDevice#open} or
 * {@code Backends.open("sim", ...)}.
 */
package dev.ttpipe.device.sim;
