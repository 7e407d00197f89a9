package dev.ttpipe.actors.runtime;

/**
 * One forward pass's data as host token ids, split into microbatches: what the Coordinator sends
 * to the rank of the first stage (inputs) and of the last stage (targets and the loss scale).
 * Arrays are row-major [microbatchSize, seqLen] and never modified after sending.
 */
public record MicrobatchData(int microbatchSize, int seqLen, int[][] inputs, int[][] targets, float lossScale) {
}
