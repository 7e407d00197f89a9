package dev.ttpipe.stages.checkpoint;

import java.nio.file.InvalidPathException;
import java.nio.file.Path;

/**
 * A file that a checkpoint's trainer_state.json or a model's index names: a relative path that stays inside its
 * folder. An absolute path, a {@code ..} step or a drive letter is refused, so that a checkpoint or a downloaded model
 * cannot make ttpipe read (or checksum) a file outside it.
 */
public final class ListedFile {
    private ListedFile() {
    }

    /**
     * {@code name} resolved in {@code dir}.
     *
     * @param listedIn the file and key that list it, for the error ("trainer_state.json: 'files'")
     * @throws CheckpointException one line naming {@code listedIn}, the name and what is expected
     */
    public static Path resolve(Path dir, String name, String listedIn) {
        Path p;
        try {
            p = Path.of(name);
        } catch (InvalidPathException e) {
            throw refuse(listedIn, name);
        }
        if (name.isEmpty() || p.isAbsolute() || p.getRoot() != null || name.contains(":")) throw refuse(listedIn, name);
        for (Path part : p) {
            if (part.toString().equals("..")) throw refuse(listedIn, name);
        }
        Path resolved = dir.resolve(p).normalize();
        if (!resolved.startsWith(dir.normalize())) throw refuse(listedIn, name);
        return resolved;
    }

    private static CheckpointException refuse(String listedIn, String name) {
        return new CheckpointException(listedIn + ": '" + name + "' given, expected a file name inside the folder (no absolute path,"
                + " no '..')");
    }
}
