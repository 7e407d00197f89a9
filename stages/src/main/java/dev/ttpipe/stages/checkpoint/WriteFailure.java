package dev.ttpipe.stages.checkpoint;

import java.nio.file.AccessDeniedException;
import java.nio.file.FileSystemException;
import java.util.Locale;

/**
 * Why a checkpoint write failed, in one line, the user's words first (disk full, permission denied, a read-only file
 * system), then the system's: "disk full (No space left on device)". The caller names the file.
 */
public final class WriteFailure {
    private WriteFailure() {
    }

    /** {@code t} (an I/O failure, or anything that wraps one) described in one line, without the file. */
    public static String describe(Throwable t) {
        for (Throwable c = t; c != null; c = c.getCause()) {
            String system = reason(c);
            if (system == null) continue;
            String lower = system.toLowerCase(Locale.ROOT);
            if (c instanceof AccessDeniedException || lower.contains("permission denied")) return "permission denied (" + system + ")";
            if (lower.contains("no space left") || lower.contains("quota exceeded")) return "disk full (" + system + ")";
            if (lower.contains("read-only file system")) return "read-only file system (" + system + ")";
        }
        Throwable root = t;
        while (root.getCause() != null && root.getCause() != root) root = root.getCause();
        String r = reason(root);
        return r == null ? root.getClass().getSimpleName() : r;
    }

    /** The system's reason ("No space left on device"), without the file a file-system exception names. */
    private static String reason(Throwable t) {
        if (t instanceof AccessDeniedException a && a.getReason() == null) return "Permission denied";
        if (t instanceof FileSystemException f) return f.getReason() != null ? f.getReason() : f.getClass().getSimpleName();
        return t.getMessage();
    }
}
