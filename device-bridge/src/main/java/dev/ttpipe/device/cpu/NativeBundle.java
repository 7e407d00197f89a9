package dev.ttpipe.device.cpu;

import java.io.IOException;
import java.io.InputStream;
import java.net.URL;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.Locale;
import java.util.Properties;

/**
 * Native libraries shipped inside an {@code org.bytedeco} jar (OpenBLAS, oneDNN): extracted once into a
 * directory under {@code java.io.tmpdir} named by the artifact's version and the main library's size
 * (each file written under a temporary name, then moved atomically, so concurrent JVMs are safe), so
 * the libraries find each other there by their RUNPATH ($ORIGIN) and are loaded by absolute path.
 */
final class NativeBundle {
    private NativeBundle() {
    }

    /** True on linux x86_64, the one platform whose bundled libraries ttpipe carries. */
    static boolean supportedPlatform() {
        String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
        String arch = System.getProperty("os.arch", "");
        return os.contains("linux") && (arch.equals("amd64") || arch.equals("x86_64"));
    }

    /**
     * Extracts {@code files} (resource paths, the main library last) into a directory named
     * {@code name-<artifact version>-<main library size>}; returns the directory, or null when the main
     * library is not on the class path.
     */
    static Path extract(String name, String pomProperties, List<String> files) throws IOException {
        URL main = NativeBundle.class.getClassLoader().getResource(files.get(files.size() - 1));
        if (main == null) return null;
        Path dir = Paths.get(System.getProperty("java.io.tmpdir"), "ttpipe-native",
                name + "-" + version(pomProperties) + "-" + main.openConnection().getContentLengthLong());
        Files.createDirectories(dir);
        for (String resource : files) copy(resource, dir.resolve(resource.substring(resource.lastIndexOf('/') + 1)));
        return dir;
    }

    private static String version(String pomProperties) {
        try (InputStream in = NativeBundle.class.getClassLoader().getResourceAsStream(pomProperties)) {
            if (in == null) return "unknown";
            Properties p = new Properties();
            p.load(in);
            return p.getProperty("version", "unknown");
        } catch (IOException e) {
            return "unknown";
        }
    }

    /** Copies a resource to {@code target} unless a file of the same size is already there. */
    private static void copy(String resource, Path target) throws IOException {
        URL url = NativeBundle.class.getClassLoader().getResource(resource);
        if (url == null) throw new IOException("resource " + resource + " not found");
        long size = url.openConnection().getContentLengthLong();
        if (Files.isRegularFile(target) && Files.size(target) == size) return;
        Path tmp = Files.createTempFile(target.getParent(), target.getFileName().toString(), ".tmp");
        try {
            try (InputStream in = url.openStream()) {
                Files.copy(in, tmp, StandardCopyOption.REPLACE_EXISTING);
            }
            Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } finally {
            Files.deleteIfExists(tmp);
        }
    }
}
