/**
 * The ttnn backend: {@link dev.ttpipe.device.ttnn.TtnnMeshDevice} implements the device API over
 * the C ABI of {@code device-bridge/native/ttpipe_bridge.h}, bound with JNA direct mapping. The
 * library is the TTNN implementation ({@code native/ttnn}, built with CMake against tt-metal) on
 * Tenstorrent hardware, or the reference implementation ({@code native/reference}, plain C, built by
 * Maven) everywhere, so this path is exercised in every build.
 * {@link dev.ttpipe.device.ttnn.BridgeLibrary} finds, checks (ABI version, every function) and
 * binds the library; failures are {@link dev.ttpipe.device.ttnn.BridgeLoadException} and
 * {@link dev.ttpipe.device.ttnn.BridgeException}, never a crash.
 * {@link dev.ttpipe.device.ttnn.BridgeBenchmark} measures what a call into the library costs.
 */
package dev.ttpipe.device.ttnn;
