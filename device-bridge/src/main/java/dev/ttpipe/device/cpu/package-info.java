/**
 * The cpu backend: every device of a mesh emulated in this JVM, with its own memory accounting
 * and caching allocator of native memory; matmul on OpenBLAS through JNA (or a pure-JVM
 * fallback), the other kernels in Java over the native buffers, multi-threaded. Open it with
 * {@link dev.ttpipe.device.cpu.CpuMeshDevice#open} or {@code Backends.open("cpu", ...)}.
 * {@link dev.ttpipe.device.cpu.MatmulBenchmark} measures the matmul kernel against the machine's
 * measured fp32 FMA peak ({@link dev.ttpipe.device.cpu.MachinePeak}).
 */
package dev.ttpipe.device.cpu;
