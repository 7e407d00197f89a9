package dev.ttpipe.transport;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.Shape;

/**
 * What travels with every tensor between stages: which job, step and microbatch it belongs to,
 * where it goes, and what it is (kind, dtype, logical shape, layout over the submesh, payload
 * length and checksum). A receiver checks all of it before it turns bytes into a tensor.
 *
 * @param pass          the forward pass number within the job (optimizer step x accumulation + index)
 * @param fromStage     producing stage
 * @param toStage       consuming stage
 * @param payloadBytes  bytes of the payload (all devices' local pieces, row-major device order)
 * @param checksum      CRC32C of the payload (0 for in-process hand-over, which moves no bytes)
 */
public record FrameHeader(long jobId, int pass, int fromStage, int toStage, int microbatch, TensorKind kind,
                          DType dtype, Shape shape, Layout layout, long payloadBytes, int checksum) {

    /** The schedule's notation for what this frame completes, e.g. {@code 2RECV_F3}; a link check's frame says so. */
    public String action() {
        return switch (kind) {
            case ACTIVATION -> toStage + "RECV_F" + microbatch;
            case GRADIENT -> toStage + "RECV_B" + microbatch;
            case PROBE, ECHO -> "link check " + kind.name().toLowerCase() + " " + microbatch;
        };
    }

    public FrameHeader withPayload(long bytes, int crc) {
        return new FrameHeader(jobId, pass, fromStage, toStage, microbatch, kind, dtype, shape, layout, bytes, crc);
    }

    @Override
    public String toString() {
        return "frame " + fromStage + "->" + toStage + " " + kind.name().toLowerCase() + " mb " + microbatch
                + " pass " + pass + " " + dtype + shape;
    }
}
