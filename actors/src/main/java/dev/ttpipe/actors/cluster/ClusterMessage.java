package dev.ttpipe.actors.cluster;

/**
 * Marks the messages that cross processes in a multi-host job (bound to the Kryo serializer in the
 * Pekko config). Tensors never travel in these: they go through the transport.
 */
public interface ClusterMessage {
}
