package dev.ttpipe.stages.checkpoint;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.security.DigestOutputStream;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The safetensors format (Hugging Face's): an 8-byte little-endian header length, a JSON header
 * mapping each tensor name to {@code {"dtype", "shape", "data_offsets": [begin, end]}} (offsets into
 * the data that follows) plus an optional {@code "__metadata__"} map of strings, then the raw
 * little-endian data. ttpipe writes F32; it reads F32, BF16 and F16 (converted to float), memory
 * mapped, one tensor at a time.
 */
public final class SafeTensors {
    /** A header larger than this is not a safetensors file (the format's own reader caps it at 100 MB). */
    static final long MAX_HEADER = 100L << 20;

    private SafeTensors() {
    }

    /** One tensor to write: its shape and its values in row-major order. */
    public record Entry(long[] shape, float[] values) {
        public Entry {
            long n = 1;
            for (long d : shape) n *= d;
            if (n != values.length) {
                throw new IllegalArgumentException("shape " + Arrays.toString(shape) + " holds " + n + " values, given "
                        + values.length);
            }
        }
    }

    /**
     * Writes {@code tensors} (in this order) to {@code file} as F32, flushed to the disk; returns the
     * file's SHA-256 in hex.
     */
    public static String write(Path file, Map<String, Entry> tensors, Map<String, String> metadata) throws IOException {
        StringBuilder h = new StringBuilder("{");
        if (metadata != null && !metadata.isEmpty()) {
            h.append("\"__metadata__\":{");
            boolean first = true;
            for (Map.Entry<String, String> m : metadata.entrySet()) {
                h.append(first ? "" : ",").append(MiniJson.str(m.getKey())).append(':').append(MiniJson.str(m.getValue()));
                first = false;
            }
            h.append('}');
        }
        long offset = 0;
        for (Map.Entry<String, Entry> e : tensors.entrySet()) {
            long bytes = 4L * e.getValue().values().length;
            h.append(h.length() == 1 ? "" : ",").append(MiniJson.str(e.getKey())).append(":{\"dtype\":\"F32\",\"shape\":[");
            long[] shape = e.getValue().shape();
            for (int i = 0; i < shape.length; i++) h.append(i == 0 ? "" : ",").append(shape[i]);
            h.append("],\"data_offsets\":[").append(offset).append(',').append(offset + bytes).append("]}");
            offset += bytes;
        }
        h.append('}');
        byte[] header = h.toString().getBytes(StandardCharsets.UTF_8);
        int pad = (8 - header.length % 8) % 8;                 // align the data to 8 bytes, as the reference writer does
        byte[] padded = Arrays.copyOf(header, header.length + pad);
        Arrays.fill(padded, header.length, padded.length, (byte) ' ');
        MessageDigest sha = sha256();
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.CREATE, StandardOpenOption.TRUNCATE_EXISTING,
                StandardOpenOption.WRITE);
             OutputStream out = new DigestOutputStream(Channels.newOutputStream(ch), sha)) {
            ByteBuffer len = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(padded.length);
            out.write(len.array());
            out.write(padded);
            ByteBuffer buf = ByteBuffer.allocate(1 << 20).order(ByteOrder.LITTLE_ENDIAN);
            for (Entry e : tensors.values()) {
                float[] v = e.values();
                for (int i = 0; i < v.length; ) {
                    int n = Math.min(v.length - i, buf.capacity() / 4);
                    buf.clear();
                    buf.asFloatBuffer().put(v, i, n);
                    out.write(buf.array(), 0, n * 4);
                    i += n;
                }
            }
            out.flush();
            ch.force(true);
        }
        return HexFormat.of().formatHex(sha.digest());
    }

    /** The SHA-256 of a file, hex. */
    public static String sha256(Path file) throws IOException {
        MessageDigest sha = sha256();
        try (var in = Files.newInputStream(file)) {
            byte[] b = new byte[1 << 20];
            for (int n; (n = in.read(b)) > 0; ) sha.update(b, 0, n);
        }
        return HexFormat.of().formatHex(sha.digest());
    }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** One tensor's entry in a file's header. */
    public record Info(String name, String dtype, long[] shape, long begin, long end) {
        public long elements() {
            long n = 1;
            for (long d : shape) n *= d;
            return n;
        }
    }

    /** A safetensors file opened for reading: its header parsed and checked, its data memory mapped. */
    public static final class Reader implements AutoCloseable {
        private final Path file;
        private final FileChannel channel;
        private final long dataStart;
        private final Map<String, Info> tensors = new LinkedHashMap<>();
        private final Map<String, String> metadata = new LinkedHashMap<>();

        /** @throws CheckpointException naming the file and what is wrong with it */
        public Reader(Path file) {
            this.file = file;
            try {
                this.channel = FileChannel.open(file, StandardOpenOption.READ);
            } catch (IOException e) {
                throw new CheckpointException(file + ": cannot be read (" + e.getMessage() + ")");
            }
            try {
                long size = channel.size();
                if (size < 8) throw bad("the file has " + size + " bytes, fewer than the 8-byte header length");
                ByteBuffer len = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
                readFully(len, 0);
                long headerLength = len.flip().getLong();
                if (headerLength < 2 || headerLength > MAX_HEADER || 8 + headerLength > size) {
                    throw bad("header length " + headerLength + " does not fit the file's " + size + " bytes (truncated or not a"
                            + " safetensors file)");
                }
                ByteBuffer hb = ByteBuffer.allocate((int) headerLength);
                readFully(hb, 8);
                String json = new String(hb.array(), StandardCharsets.UTF_8);
                Object parsed;
                try {
                    parsed = MiniJson.parse(json);
                } catch (IllegalArgumentException e) {
                    throw bad("header is not valid JSON (" + e.getMessage() + ")");
                }
                if (!(parsed instanceof Map<?, ?> header)) throw bad("header is not a JSON object");
                this.dataStart = 8 + headerLength;
                long dataLength = size - dataStart;
                for (Map.Entry<?, ?> e : header.entrySet()) {
                    String name = (String) e.getKey();
                    if (name.equals("__metadata__")) {
                        if (e.getValue() instanceof Map<?, ?> m) m.forEach((k, v) -> metadata.put((String) k, String.valueOf(v)));
                        continue;
                    }
                    tensors.put(name, info(name, e.getValue(), dataLength));
                }
            } catch (CheckpointException e) {
                close();
                throw e;
            } catch (IOException | RuntimeException e) {
                close();
                throw bad("cannot be read (" + e.getMessage() + ")");
            }
        }

        private Info info(String name, Object value, long dataLength) {
            if (!(value instanceof Map<?, ?> m)) throw bad("tensor " + name + ": its entry is not an object");
            Object dtype = m.get("dtype");
            Object shape = m.get("shape");
            Object offsets = m.get("data_offsets");
            if (!(dtype instanceof String d) || !(shape instanceof List<?> s) || !(offsets instanceof List<?> o) || o.size() != 2) {
                throw bad("tensor " + name + ": expected dtype, shape and data_offsets [begin, end]");
            }
            int width = switch (d) {
                case "F32" -> 4;
                case "BF16", "F16" -> 2;
                default -> throw bad("tensor " + name + ": dtype " + d + " is not supported, expected F32, BF16 or F16");
            };
            long[] dims = new long[s.size()];
            long n = 1;
            for (int i = 0; i < dims.length; i++) {
                dims[i] = ((Number) s.get(i)).longValue();
                if (dims[i] < 0) throw bad("tensor " + name + ": negative dimension " + dims[i]);
                n *= dims[i];
            }
            long begin = ((Number) o.get(0)).longValue(), end = ((Number) o.get(1)).longValue();
            if (begin < 0 || end < begin || end > dataLength) {
                throw bad("tensor " + name + ": data_offsets [" + begin + ", " + end + "] outside the file's " + dataLength
                        + " data bytes (truncated?)");
            }
            if (end - begin != n * width) {
                throw bad("tensor " + name + ": " + (end - begin) + " bytes for " + n + " " + d + " values, expected " + n * width);
            }
            return new Info(name, d, dims, begin, end);
        }

        private void readFully(ByteBuffer b, long position) throws IOException {
            while (b.hasRemaining()) {
                int n = channel.read(b, position + b.position());
                if (n < 0) throw new IOException("unexpected end of file");
            }
        }

        private CheckpointException bad(String what) {
            return new CheckpointException(file + ": " + what);
        }

        public Path file() {
            return file;
        }

        public Map<String, Info> tensors() {
            return tensors;
        }

        public Map<String, String> metadata() {
            return metadata;
        }

        /** The tensor's values as floats (BF16 and F16 widened). */
        public float[] read(String name) {
            Info info = tensors.get(name);
            if (info == null) throw bad("no tensor " + name);
            long n = info.elements();
            if (n > Integer.MAX_VALUE) throw bad("tensor " + name + " has " + n + " elements, more than one array holds");
            float[] out = new float[(int) n];
            try {
                MappedByteBuffer map = channel.map(FileChannel.MapMode.READ_ONLY, dataStart + info.begin(), info.end() - info.begin());
                map.order(ByteOrder.LITTLE_ENDIAN);
                switch (info.dtype()) {
                    case "F32" -> {
                        FloatBuffer fb = map.asFloatBuffer();
                        fb.get(out);
                    }
                    case "BF16" -> {
                        for (int i = 0; i < out.length; i++) out[i] = Float.intBitsToFloat((map.getShort() & 0xffff) << 16);
                    }
                    default -> {
                        for (int i = 0; i < out.length; i++) out[i] = halfToFloat(map.getShort());
                    }
                }
            } catch (IOException e) {
                throw bad("tensor " + name + " cannot be read (" + e.getMessage() + ")");
            }
            return out;
        }

        @Override
        public void close() {
            try {
                if (channel != null) channel.close();
            } catch (IOException ignored) {
                // read-only
            }
        }
    }

    /** IEEE half precision to float (Float.float16ToFloat is JDK 20+; ttpipe targets 17). */
    static float halfToFloat(short h) {
        int bits = h & 0xffff;
        int sign = (bits & 0x8000) << 16;
        int exp = (bits >>> 10) & 0x1f;
        int mant = bits & 0x3ff;
        if (exp == 0x1f) return Float.intBitsToFloat(sign | 0x7f800000 | (mant << 13));      // inf, NaN
        if (exp == 0) {
            if (mant == 0) return Float.intBitsToFloat(sign);                                 // +-0
            float v = mant / 1024f / 16384f;                                                   // subnormal: mant x 2^-24
            return sign != 0 ? -v : v;
        }
        return Float.intBitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
    }
}
