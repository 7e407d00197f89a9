package dev.ttpipe.actors.train;

import dev.ttpipe.actors.config.ConfigException;
import dev.ttpipe.actors.config.HfShape;
import dev.ttpipe.actors.config.TtpipeConfig;
import dev.ttpipe.stages.checkpoint.CheckpointException;
import dev.ttpipe.stages.checkpoint.HfModel;

import java.nio.file.Path;

/**
 * {@code training_config.init_from} (TTML's {@code model_path}): the weights a job starts from, a
 * Hugging Face model directory or a ttpipe checkpoint (its model shape: {@link dev.ttpipe.actors.config.HfShape}).
 */
public final class InitFrom {
    /** The key the user wrote: init_from, or TTML's model_path. */
    static String key(TtpipeConfig cfg) {
        return HfShape.key(cfg);
    }

    private InitFrom() {
    }

    /** The directory to load: a Hugging Face model directory, or the checkpoint that the path names (its latest). */
    public static Path resolve(TtpipeConfig cfg) {
        String where = cfg.training.initFrom;
        if (where == null) return null;
        Path p = Path.of(where);
        if (HfModel.isHfDir(p)) return p;
        try {
            return Checkpoints.find(where, Path.of(cfg.training.runsDir)).dir();
        } catch (CheckpointException e) {
            String nowhere = cfg.origins.notFound(key(cfg), "a Hugging Face model directory or a ttpipe checkpoint");
            if (nowhere != null) throw new ConfigException(nowhere);
            throw new ConfigException(cfg.origins.where(key(cfg)) + ": '" + where + "' is neither a Hugging Face model directory"
                    + " (config.json with model.safetensors or model.safetensors.index.json) nor a ttpipe checkpoint (" + e.getMessage() + ")");
        }
    }

}
