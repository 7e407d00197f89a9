package dev.ttpipe.device.ttnn;

import com.sun.jna.Function;
import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;

import java.io.IOException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.CodeSource;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.function.UnaryOperator;

/**
 * Finds, checks and binds the native bridge library (the C ABI of
 * {@code device-bridge/native/ttpipe_bridge.h}): the reference build from Maven or a TTNN build.
 *
 * <p>Search order, first match wins:
 * <ol>
 *   <li>{@link dev.ttpipe.device.MeshOptions#bridgeLibrary()}, when set: only that path;</li>
 *   <li>the system property {@value #PROPERTY}, when set: only that path;</li>
 *   <li>the environment variable {@value #ENV}, when set: only that path;</li>
 *   <li>next to the device-bridge code: beside its jar ({@code <jar dir>/libttpipe_bridge_ref.so},
 *       {@code <jar dir>/native/libttpipe_bridge_ref.so}), or for a Maven classes directory
 *       {@code target/classes}, the build's {@code target/native/libttpipe_bridge_ref.so};</li>
 *   <li>the build tree: {@code device-bridge/target/native/libttpipe_bridge_ref.so} under the
 *       working directory and each of its parents (so any module of the repository finds it).</li>
 * </ol>
 *
 * <p>Loading checks {@code ttpipe_abi_version()} against {@link #ABI_VERSION} before anything is
 * bound, then that every function of the binding exists, then binds with JNA direct mapping
 * ({@code Native.register}). Each failure is a {@link BridgeLoadException} naming the path and the
 * function. Direct mapping binds one library per JVM: the first one loaded stays; asking for
 * another path afterwards is an error. Thread-safe.
 */
public final class BridgeLibrary {
    /** The ABI version this ttpipe speaks (TTPIPE_ABI_VERSION of ttpipe_bridge.h). */
    public static final int ABI_VERSION = 1;
    public static final String REFERENCE_FILE = "libttpipe_bridge_ref.so";
    public static final String PROPERTY = "ttpipe.bridge.library";
    public static final String ENV = "TTPIPE_BRIDGE_LIBRARY";

    static final String HOW_TO_BUILD = "Build the reference library with 'mvn -pl device-bridge package' (needs gcc or "
            + "cc), or, on a machine with Tenstorrent hardware, the TTNN one with 'cmake -S device-bridge/native/ttnn "
            + "-B build/ttnn -DCMAKE_BUILD_TYPE=Release && cmake --build build/ttnn' (TT_METAL_HOME set to a tt-metal "
            + "build) and pass its path as MeshOptions.bridgeLibrary, -D" + PROPERTY + " or " + ENV + ".";

    /**
     * The library bound in this JVM: where it was loaded from and what it says it is
     * ({@code ttpipe_implementation()}).
     */
    public record Loaded(Path path, String implementation) {
        /** The reference C emulation (fp32 on emulated devices in host memory), not a TTNN build. */
        public boolean reference() {
            return implementation.startsWith("reference");
        }

        /** {@code TTNN C++ shim} or {@code reference C emulation}. */
        public String kind() {
            return reference() ? "reference C emulation" : "TTNN C++ shim";
        }

        /** One line for a run's header: which library ran, what it says it is, and its path. */
        public String describe() {
            return reference()
                    ? "no TTNN library: backend ttnn runs the reference C emulation, " + implementation + ", " + path
                    : kind() + ", " + implementation + ", " + path;
        }
    }

    private static volatile Loaded loaded;

    private BridgeLibrary() {
    }

    /** The library this JVM uses, if one was loaded. */
    public static Optional<Path> loadedPath() {
        return loaded().map(Loaded::path);
    }

    /** The library this JVM uses and what it is, if one was loaded (a ttnn mesh was opened). */
    public static Optional<Loaded> loaded() {
        return Optional.ofNullable(loaded);
    }

    /** The first existing library of the default search (steps 2 to 5), if any: whether the ttnn backend can open. */
    public static Optional<Path> locate() {
        Loaded l = loaded;
        if (l != null) return Optional.of(l.path());
        for (Path p : candidates(null)) if (Files.isRegularFile(p)) return Optional.of(p);
        return Optional.empty();
    }

    /** The paths tried, in order, for {@code explicit} (null: the default search). */
    public static List<Path> candidates(String explicit) {
        return candidates(explicit, System::getenv);
    }

    /** As {@link #candidates(String)} with {@value #ENV} read by {@code getenv} (a mesh's MeshOptions.getenv). */
    static List<Path> candidates(String explicit, UnaryOperator<String> getenv) {
        List<Path> out = new ArrayList<>();
        if (explicit != null) {
            out.add(Paths.get(explicit).toAbsolutePath());
            return out;
        }
        String prop = System.getProperty(PROPERTY);
        if (prop != null && !prop.isBlank()) {
            out.add(Paths.get(prop).toAbsolutePath());
            return out;
        }
        String env = getenv.apply(ENV);
        if (env != null && !env.isBlank()) {
            out.add(Paths.get(env).toAbsolutePath());
            return out;
        }
        Path code = codeLocation();
        if (code != null) {
            if (Files.isDirectory(code)) {
                Path parent = code.getParent();
                if (parent != null) out.add(parent.resolve("native").resolve(REFERENCE_FILE));
            } else if (code.getParent() != null) {
                out.add(code.getParent().resolve(REFERENCE_FILE));
                out.add(code.getParent().resolve("native").resolve(REFERENCE_FILE));
            }
        }
        for (Path dir = Paths.get("").toAbsolutePath(); dir != null; dir = dir.getParent()) {
            Path p = dir.resolve("device-bridge").resolve("target").resolve("native").resolve(REFERENCE_FILE);
            if (!out.contains(p)) out.add(p);
        }
        return out;
    }

    private static Path codeLocation() {
        try {
            CodeSource cs = BridgeLibrary.class.getProtectionDomain().getCodeSource();
            return cs == null || cs.getLocation() == null ? null : Paths.get(cs.getLocation().toURI()).toAbsolutePath();
        } catch (URISyntaxException | RuntimeException e) {
            return null;
        }
    }

    /**
     * Binds the library for {@code explicit} (null: the default search) unless one is bound, and
     * returns the bound one. Throws {@link BridgeLoadException} when it cannot.
     */
    static Loaded ensureLoaded(String explicit) {
        return ensureLoaded(explicit, System::getenv);
    }

    /** As {@link #ensureLoaded(String)}, the search reading {@value #ENV} through {@code getenv}. */
    static Loaded ensureLoaded(String explicit, UnaryOperator<String> getenv) {
        Loaded l = loaded;
        if (l != null && explicit == null) return l;
        synchronized (BridgeLibrary.class) {
            l = loaded;
            List<Path> tried = candidates(explicit, getenv);
            if (l != null) {
                Path wanted = tried.get(0).normalize();
                if (!sameFile(wanted, l.path())) {
                    throw new BridgeLoadException("ttnn backend: this JVM already uses the bridge library " + l.path()
                            + "; it cannot also load " + wanted + " (JNA direct mapping binds one library per JVM)",
                            null, List.of(wanted.toString()), null);
                }
                return l;
            }
            Path found = find(explicit, getenv);
            bind(NativeBridge.class, found, ABI_VERSION, tried.stream().map(Path::toString).toList());
            l = new Loaded(found, NativeBridge.ttpipe_implementation());
            loaded = l;
            return l;
        }
    }

    /**
     * The first existing library of {@link #candidates}; else a {@link BridgeLoadException} listing
     * every path tried and how to build the library.
     */
    static Path find(String explicit) {
        return find(explicit, System::getenv);
    }

    private static Path find(String explicit, UnaryOperator<String> getenv) {
        List<Path> tried = candidates(explicit, getenv);
        for (Path p : tried) if (Files.isRegularFile(p)) return p.normalize();
        List<String> names = tried.stream().map(Path::toString).toList();
        throw new BridgeLoadException("ttnn backend: no bridge library found; tried " + String.join(", ", names) + ". "
                + HOW_TO_BUILD, null, names, null);
    }

    private static boolean sameFile(Path a, Path b) {
        try {
            return Files.isSameFile(a, b);
        } catch (IOException e) {
            return a.equals(b);
        }
    }

    /**
     * Opens {@code path}, checks its ABI version against {@code expectedAbi} and that it has every
     * native method of {@code binding}, then registers {@code binding} with it (direct mapping).
     * Nothing is registered unless every check passes.
     */
    static void bind(Class<?> binding, Path path, int expectedAbi, List<String> tried) {
        NativeLibrary lib;
        try {
            lib = NativeLibrary.getInstance(path.toString());
        } catch (UnsatisfiedLinkError e) {
            throw new BridgeLoadException("ttnn backend: cannot load the bridge library " + path + ": " + e.getMessage()
                    + ". " + HOW_TO_BUILD, null, tried, e);
        }
        int version;
        try {
            Function f = lib.getFunction("ttpipe_abi_version");
            version = f.invokeInt(new Object[0]);
        } catch (UnsatisfiedLinkError e) {
            throw new BridgeLoadException("ttnn backend: " + path + " has no function ttpipe_abi_version: it is not a "
                    + "ttpipe bridge library", "ttpipe_abi_version", tried, e);
        }
        if (version != expectedAbi) {
            throw new BridgeLoadException("ttnn backend: ttpipe_abi_version() of " + path + " is " + version
                    + ", this ttpipe needs ABI version " + expectedAbi + "; rebuild the library from this checkout's "
                    + "device-bridge/native. " + HOW_TO_BUILD, "ttpipe_abi_version", tried, null);
        }
        for (Method m : binding.getDeclaredMethods()) {
            if (!Modifier.isNative(m.getModifiers())) continue;
            try {
                lib.getFunction(m.getName());
            } catch (UnsatisfiedLinkError e) {
                throw new BridgeLoadException("ttnn backend: the bridge library " + path + " (ABI " + version
                        + ") has no function " + m.getName() + "; it was built from another version of ttpipe_bridge.h "
                        + "or without that entry. " + HOW_TO_BUILD, m.getName(), tried, e);
            }
        }
        try {
            Native.register(binding, lib);
        } catch (RuntimeException | UnsatisfiedLinkError e) {
            throw new BridgeLoadException("ttnn backend: binding " + path + " failed: " + e.getMessage(), null, tried, e);
        }
    }
}
