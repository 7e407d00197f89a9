/**
 * {@code ttpipe eval} and {@code ttpipe generate} on a pipeline: {@link dev.ttpipe.actors.inference.PipelinedModel}
 * runs a trained model's stages as the training job runs them (a StageActor per rank, activations over the
 * transport) in forward-only passes: scored batches for eval, one token at a time against each rank's
 * key/value caches for generate.
 */
package dev.ttpipe.actors.inference;
