/**
 * ttpipe transport: moving tensors between pipeline ranks. {@link dev.ttpipe.transport.Transport} is
 * the contract; {@link dev.ttpipe.transport.LocalTransport} hands tensor objects over inside one JVM,
 * {@link dev.ttpipe.transport.AeronTransport} sends them as checked, chunked frames over Aeron IPC (ranks
 * of one process) or UDP (ranks elsewhere), and {@link dev.ttpipe.transport.TransportBenchmark} measures
 * them ({@code ttpipe bench transport}).
 */
package dev.ttpipe.transport;
