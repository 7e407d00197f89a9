/** A per-op-kind profile of any backend's {@link dev.ttpipe.device.Ops}: a decorating submesh that times each op. */
package dev.ttpipe.device.profile;
