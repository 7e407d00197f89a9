package dev.ttpipe.stages.data;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.PathMatcher;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * Token files, memory mapped (never read whole into the heap), one after the other as one
 * {@link TokenSource}. Two formats, told apart by the header:
 * <ul>
 *   <li>llm.c: 256 little-endian int32 (1024 bytes): magic and version, token count; then the tokens. Magic
 *   20240520 version 1 holds uint16 tokens (GPT-2's), magic 20240801 version 7 uint32 tokens (Llama 3's);
 *   20240520 version 2, uint32, is what ttpipe wrote before it followed llm.c there.</li>
 *   <li>nanoGPT: raw little-endian uint16 tokens, no header ({@code np.memmap(..., dtype=np.uint16)}).</li>
 * </ul>
 * Immutable after opening; reads are thread-safe (absolute gets on read-only mappings).
 */
public final class TokenFiles implements TokenSource {
    /** llm.c's magic for uint16 tokens (version 1). */
    public static final int MAGIC = 20240520;
    /** llm.c's magic for uint32 tokens (version 7). */
    public static final int MAGIC_UINT32 = 20240801;
    public static final int VERSION_UINT16 = 1;
    public static final int VERSION_UINT32 = 7;
    public static final int HEADER_INTS = 256;
    public static final int HEADER_BYTES = 4 * HEADER_INTS;
    private static final long CHUNK = 1L << 30;           // bytes per mapping (a MappedByteBuffer holds < 2 GiB)

    /** One mapped file. */
    record Shard(Path file, long dataStart, int width, long tokens, MappedByteBuffer[] chunks, String format) {
        int get(long index) {
            long pos = index * width;                       // from dataStart; CHUNK is a multiple of both widths
            MappedByteBuffer b = chunks[(int) (pos / CHUNK)];
            int at = (int) (pos % CHUNK);
            return width == 2 ? b.getShort(at) & 0xffff : b.getInt(at);
        }
    }

    private final List<Shard> shards;
    private final long[] starts;                           // first token index of each shard
    private final long size;

    private TokenFiles(List<Shard> shards) {
        this.shards = List.copyOf(shards);
        this.starts = new long[shards.size()];
        long n = 0;
        for (int i = 0; i < shards.size(); i++) {
            starts[i] = n;
            n += shards.get(i).tokens();
        }
        this.size = n;
    }

    /** True for a name that holds tokens rather than text: a {@code .bin} file, a directory or a glob. */
    public static boolean isTokenPath(String path) {
        return path.endsWith(".bin") || isGlob(path) || Files.isDirectory(Path.of(path));
    }

    static boolean isGlob(String path) {
        return path.indexOf('*') >= 0 || path.indexOf('?') >= 0 || path.indexOf('[') >= 0;
    }

    /**
     * The files a data path names: itself, the {@code .bin} files of a directory, or a glob's matches
     * (sorted by name). In a directory, {@code validation} picks the files whose name says {@code val}
     * (nanoGPT's {@code val.bin}, llm.c's {@code *_val_*.bin}); otherwise the others.
     *
     * @throws DataException naming the path when nothing matches
     */
    public static List<Path> resolve(String path, boolean validation) {
        List<Path> out = new ArrayList<>();
        Path p = Path.of(path);
        try {
            if (isGlob(path)) {
                Path dir = p.getParent() == null ? Path.of(".") : p.getParent();
                if (isGlob(dir.toString())) throw new DataException(path + ": a glob only in the file name is supported (such as data/*_train_*.bin)");
                PathMatcher m = FileSystems.getDefault().getPathMatcher("glob:" + p.getFileName());
                try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir)) {
                    for (Path f : ds) if (m.matches(f.getFileName()) && Files.isRegularFile(f)) out.add(f);
                }
            } else if (Files.isDirectory(p)) {
                try (DirectoryStream<Path> ds = Files.newDirectoryStream(p, "*.bin")) {
                    for (Path f : ds) if (isValidationName(f) == validation) out.add(f);
                }
            } else if (Files.isRegularFile(p)) {
                out.add(p);
            } else {
                throw new DataException(path + ": no such file or directory");
            }
        } catch (IOException e) {
            throw new DataException(path + ": cannot be listed (" + e.getMessage() + ")");
        }
        out.sort(null);
        return out;
    }

    static boolean isValidationName(Path f) {
        String n = f.getFileName().toString().toLowerCase(Locale.ROOT);
        return n.equals("val.bin") || n.contains("_val") || n.startsWith("val_") || n.contains("validation");
    }

    /** Opens and maps the files, checking each one's size against its format. */
    public static TokenFiles open(List<Path> files) {
        List<Shard> shards = new ArrayList<>();
        for (Path f : files) shards.add(openShard(f));
        return new TokenFiles(shards);
    }

    private static Shard openShard(Path file) {
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
            long size = ch.size();
            ByteBuffer head = ByteBuffer.allocate((int) Math.min(size, 12)).order(ByteOrder.LITTLE_ENDIAN);
            while (head.hasRemaining() && ch.read(head, head.position()) > 0) {
                // read the first ints
            }
            head.flip();
            int magic = head.remaining() >= 4 ? head.getInt(0) : 0;
            int version = head.remaining() >= 8 ? head.getInt(4) : 0;
            long count = head.remaining() >= 12 ? head.getInt(8) & 0xffffffffL : -1;
            int width = width(magic, version);
            if (magic == MAGIC || magic == MAGIC_UINT32) {
                if (width == 0) {
                    throw new DataException(file + ": byte offset 4: llm.c token file version " + version + " with magic " + magic
                            + ", expected " + MAGIC + " version 1 (uint16 tokens) or " + MAGIC_UINT32 + " version 7 (uint32 tokens)");
                }
                long expected = HEADER_BYTES + count * width;
                if (size != expected) {
                    throw new DataException(file + ": " + size + " bytes, but its llm.c header (byte offset 8) says " + count
                            + " tokens of " + width + " bytes: expected " + expected + " bytes (truncated?)");
                }
                return new Shard(file, HEADER_BYTES, width, count, map(ch, HEADER_BYTES, size - HEADER_BYTES),
                        "llm.c " + (width == 2 ? "uint16" : "uint32"));
            }
            for (int w : new int[]{2, 4}) {
                if (size >= HEADER_BYTES && (version == VERSION_UINT16 || version == VERSION_UINT32 || version == 2)
                        && HEADER_BYTES + count * w == size) {
                    throw new DataException(file + ": byte offset 0: magic " + magic + ", expected " + MAGIC + " or " + MAGIC_UINT32
                            + " (the rest of the header is llm.c's; a damaged file?)");
                }
            }
            if (size % 2 != 0) {
                throw new DataException(file + ": " + size + " bytes, an odd size: a nanoGPT token file is uint16 tokens,"
                        + " 2 bytes each, and its last token at byte offset " + (size - 1) + " is cut (expected an even size, or"
                        + " an llm.c header with magic " + MAGIC + " or " + MAGIC_UINT32 + ")");
            }
            return new Shard(file, 0, 2, size / 2, map(ch, 0, size), "nanoGPT uint16");
        } catch (IOException e) {
            throw new DataException(file + ": cannot be read (" + e.getMessage() + ")");
        }
    }

    /** Bytes per token for an llm.c magic and version; 0 for none. */
    static int width(int magic, int version) {
        if (magic == MAGIC && version == VERSION_UINT16) return 2;
        if (magic == MAGIC_UINT32 && version == VERSION_UINT32 || magic == MAGIC && version == 2) return 4;
        return 0;
    }

    private static MappedByteBuffer[] map(FileChannel ch, long start, long length) throws IOException {
        int n = (int) ((length + CHUNK - 1) / CHUNK);
        MappedByteBuffer[] out = new MappedByteBuffer[n];
        for (int i = 0; i < n; i++) {
            long from = i * CHUNK;
            out[i] = ch.map(FileChannel.MapMode.READ_ONLY, start + from, Math.min(CHUNK, length - from));
            out[i].order(ByteOrder.LITTLE_ENDIAN);
        }
        return out;
    }

    /**
     * Checks every token is below {@code vocab}, streaming over the mappings.
     *
     * @throws DataException naming the file, the token's byte offset and its value
     */
    public TokenFiles checkVocabulary(int vocab) {
        for (Shard s : shards) {
            if (s.width() == 2 && vocab >= 65536) continue;
            for (long i = 0; i < s.tokens(); i++) {
                int t = s.get(i);
                if (t < 0 || t >= vocab) {
                    throw new DataException(s.file() + ": byte offset " + (s.dataStart() + i * s.width()) + " (token " + i + "): id "
                            + Integer.toUnsignedString(t) + " is beyond the vocabulary of " + vocab
                            + " ids, expected ids below " + vocab + " (a file made with another tokenizer?)");
                }
            }
        }
        return this;
    }

    public List<Path> files() {
        return shards.stream().map(Shard::file).toList();
    }

    /** "nanoGPT uint16", "llm.c uint16" or "llm.c uint32": the first file's format. */
    public String format() {
        return shards.isEmpty() ? "none" : shards.get(0).format();
    }

    @Override
    public long size() {
        return size;
    }

    @Override
    public int get(long index) {
        int s = shard(index);
        return shards.get(s).get(index - starts[s]);
    }

    @Override
    public String where(long index) {
        int s = shard(index);
        Shard sh = shards.get(s);
        return sh.file() + ", byte offset " + (sh.dataStart() + (index - starts[s]) * sh.width());
    }

    private int shard(long index) {
        if (index < 0 || index >= size) throw new IndexOutOfBoundsException("token " + index + " of " + size);
        int i = Arrays.binarySearch(starts, index);
        if (i < 0) i = -i - 2;
        while (i + 1 < starts.length && starts[i + 1] == index) i++;   // skip empty shards
        return i;
    }
}
