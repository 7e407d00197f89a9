package dev.ttpipe.stages.data;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The {@code BPE} model of a {@code tokenizer.json}: its vocabulary and merges, with {@code byte_fallback}
 * ({@code <0xNN>} tokens for a character the vocabulary lacks), {@code unk_token} and {@code fuse_unk},
 * {@code ignore_merges}, {@code continuing_subword_prefix} and {@code end_of_word_suffix}.
 *
 * <p>A piece encodes as Hugging Face's {@code Word::merge_all}: one symbol per character, then the pair with the
 * lowest merge rank (leftmost among equals) merges until none is left, from a heap, so a long piece (Llama 2 has no
 * pre-tokenizer: a whole line is one piece) takes n log n. Thread-safe; the ids of short pieces are remembered.
 */
final class BpeModel {
    private static final int[] NONE = new int[0];
    private static final int CACHE_MAX_CHARS = 256;
    private static final int CACHE_PIECES = 1 << 18;

    private final String file;
    private final Map<String, Integer> vocab;
    private final MergeTable merges;
    private final int[] charIds = new int[1 << 16];        // a single BMP character's id, -1 if none (no prefix or suffix)
    private final int[] byteIds;                           // <0xNN>'s id per byte; null without byte_fallback
    private final int unk;                                 // -1: no unk_token
    private final boolean fuseUnk;
    private final boolean ignoreMerges;
    private final String prefix;
    private final String suffix;
    private final Map<String, int[]> cache = new ConcurrentHashMap<>();

    private BpeModel(String file, Map<String, Integer> vocab, MergeTable merges, int[] byteIds, int unk, boolean fuseUnk,
                     boolean ignoreMerges, String prefix, String suffix) {
        this.file = file;
        this.vocab = vocab;
        this.merges = merges;
        this.byteIds = byteIds;
        this.unk = unk;
        this.fuseUnk = fuseUnk;
        this.ignoreMerges = ignoreMerges;
        this.prefix = prefix;
        this.suffix = suffix;
        Arrays.fill(charIds, -1);
        if (prefix.isEmpty() && suffix.isEmpty()) vocab.forEach((k, id) -> {
            if (k.length() == 1) charIds[k.charAt(0)] = id;
        });
    }

    static BpeModel of(TokenizerJson m) {
        if (m.get("dropout") instanceof Number d && d.doubleValue() > 0) {
            throw m.bad("dropout", "null (BPE dropout is for training; ttpipe encodes deterministically)");
        }
        TokenizerJson v = m.object("vocab");
        Map<String, Integer> vocab = new HashMap<>(v.map().size() * 2);
        v.map().forEach((k, id) -> {
            if (!(id instanceof Long n) || n < 0 || n > HfTokenizer.MAX_ID) {
                throw v.at(v.where((String) k), id, "a token id from 0 to " + HfTokenizer.MAX_ID);
            }
            vocab.put((String) k, (int) (long) n);
        });
        String prefix = m.string("continuing_subword_prefix", "");
        String suffix = m.string("end_of_word_suffix", "");
        List<?> list = m.list("merges");
        MergeTable merges = new MergeTable(list.size());
        for (int rank = 0; rank < list.size(); rank++) {
            Object e = list.get(rank);
            String a, b;
            if (e instanceof String s && s.indexOf(' ') > 0 && s.indexOf(' ') == s.lastIndexOf(' ')) {
                a = s.substring(0, s.indexOf(' '));
                b = s.substring(s.indexOf(' ') + 1);
            } else if (e instanceof List<?> two && two.size() == 2 && two.get(0) instanceof String x && two.get(1) instanceof String y) {
                a = x;
                b = y;
            } else {
                throw m.at(m.where("merges") + "[" + rank + "]", e, "\"a b\" or [\"a\", \"b\"]");
            }
            String merged = a + b.substring(Math.min(prefix.length(), b.length()));
            for (String t : new String[]{a, b, merged}) {
                if (!vocab.containsKey(t)) {
                    throw m.at(m.where("merges") + "[" + rank + "]", e, "tokens of model.vocab ('" + t + "' is not one)");
                }
            }
            merges.put(vocab.get(a), vocab.get(b), rank, vocab.get(merged));    // a pair listed twice: the later rank, as Hugging Face
        }
        int[] byteIds = null;
        if (m.bool("byte_fallback", false)) {
            byteIds = new int[256];
            for (int b = 0; b < 256; b++) byteIds[b] = vocab.getOrDefault(String.format(Locale.ROOT, "<0x%02X>", b), -1);
        }
        int unk = -1;
        if (m.has("unk_token")) {
            Integer id = vocab.get(m.string("unk_token"));
            if (id == null) throw m.bad("unk_token", "a token of model.vocab");
            unk = id;
        }
        return new BpeModel(m.file().toString(), vocab, merges, byteIds, unk, m.bool("fuse_unk", false), m.bool("ignore_merges", false),
                prefix, suffix);
    }

    Map<String, Integer> vocab() {
        return vocab;
    }

    /**
     * The ids of one pre-tokenized piece (the array may be shared: never change it).
     *
     * @throws IllegalArgumentException for a character the vocabulary lacks, with neither byte fallback nor an unk token
     */
    int[] encode(String piece) {
        if (piece.isEmpty()) return NONE;
        boolean remember = piece.length() <= CACHE_MAX_CHARS;
        int[] ids = remember ? cache.get(piece) : null;
        if (ids != null) return ids;
        Integer whole = ignoreMerges ? vocab.get(piece) : null;
        ids = whole != null ? new int[]{whole} : merge(symbols(piece));
        if (remember && cache.size() < CACHE_PIECES) cache.put(piece, ids);
        return ids;
    }

    /** One symbol per character: its id, else its UTF-8 bytes' {@code <0xNN>} ids, else unk; {@code [0]} holds the count. */
    private int[] symbols(String piece) {
        int[] out = new int[piece.length() + 2];
        int n = 0;
        boolean pendingUnk = false;
        for (int i = 0; i < piece.length(); ) {
            int cp = piece.codePointAt(i);
            int end = i + Character.charCount(cp);
            String spelled = null;
            int id;
            if (cp < charIds.length && charIds[cp] >= 0) {
                id = charIds[cp];
            } else {
                spelled = (i > 0 ? prefix : "") + piece.substring(i, end) + (end == piece.length() ? suffix : "");
                id = vocab.getOrDefault(spelled, -1);
            }
            i = end;
            if (out.length < n + 16) out = Arrays.copyOf(out, 2 * out.length + 16);
            if (id >= 0) {
                if (pendingUnk) out[++n] = unk;
                pendingUnk = false;
                out[++n] = id;
                continue;
            }
            byte[] bytes = spelled.getBytes(StandardCharsets.UTF_8);
            if (byteIds != null && allKnown(bytes)) {
                if (out.length < n + bytes.length + 2) out = Arrays.copyOf(out, 2 * out.length + bytes.length);
                for (byte b : bytes) out[++n] = byteIds[b & 0xff];     // an unk before stays pending, as in Hugging Face
            } else if (unk >= 0) {
                if (pendingUnk && !fuseUnk) out[++n] = unk;
                pendingUnk = true;
            } else {
                throw new IllegalArgumentException("'" + new String(Character.toChars(cp)) + "' (U+" + Integer.toHexString(cp).toUpperCase(Locale.ROOT)
                        + ") is not in " + file + "'s vocabulary, which has no byte fallback and no unk_token");
            }
        }
        if (pendingUnk) out[++n] = unk;
        out[0] = n;
        return out;
    }

    private boolean allKnown(byte[] bytes) {
        for (byte b : bytes) if (byteIds[b & 0xff] < 0) return false;
        return true;
    }

    /** {@code symbols[1..symbols[0]]} merged; each heap entry is {@code rank << 32 | position} of a mergeable pair. */
    private int[] merge(int[] symbols) {
        int n = symbols[0];
        int[] ids = Arrays.copyOfRange(symbols, 1, n + 1);
        if (n < 2) return ids;
        int[] prev = new int[n];
        int[] next = new int[n];
        LongHeap heap = new LongHeap(n);
        for (int i = 0; i < n; i++) {
            prev[i] = i - 1;
            next[i] = i + 1;
            if (i + 1 < n) push(heap, ids[i], ids[i + 1], i);
        }
        int left = n;
        while (!heap.isEmpty()) {
            long top = heap.pop();
            int pos = (int) top;
            int nx = next[pos];
            if (ids[pos] < 0 || nx >= n) continue;
            long m = merges.get(ids[pos], ids[nx]);
            if (m < 0 || (m >>> 32) != (top >>> 32)) continue;       // stale: one of the two merged since
            ids[pos] = (int) m;
            ids[nx] = -1;
            left--;
            int after = next[nx];
            next[pos] = after;
            if (after < n) prev[after] = pos;
            if (prev[pos] >= 0) push(heap, ids[prev[pos]], ids[pos], prev[pos]);
            if (after < n) push(heap, ids[pos], ids[after], pos);
        }
        int[] out = new int[left];
        for (int i = 0, k = 0; i < n; i++) if (ids[i] >= 0) out[k++] = ids[i];
        return out;
    }

    private void push(LongHeap heap, int a, int b, int pos) {
        long m = merges.get(a, b);
        if (m >= 0) heap.push((m >>> 32) << 32 | pos);
    }

    /** Pair of ids to {@code rank << 32 | merged id}, open addressing on primitive longs (280k merges for Llama 3). */
    private static final class MergeTable {
        private final long[] keys;
        private final long[] values;
        private final int shift;

        MergeTable(int expected) {
            int bits = 64 - Long.numberOfLeadingZeros(Math.max(4L, 2L * expected));
            keys = new long[1 << bits];
            values = new long[1 << bits];
            Arrays.fill(keys, -1);
            shift = 64 - bits;
        }

        private int slot(long key) {
            int mask = keys.length - 1;
            int i = (int) ((key * 0x9E3779B97F4A7C15L) >>> shift);
            while (keys[i] != -1 && keys[i] != key) i = (i + 1) & mask;
            return i;
        }

        void put(int a, int b, int rank, int merged) {
            long key = (long) a << 32 | b;
            int i = slot(key);
            keys[i] = key;
            values[i] = (long) rank << 32 | merged;
        }

        /** {@code rank << 32 | merged id}, or -1 when the pair does not merge. */
        long get(int a, int b) {
            long key = (long) a << 32 | b;
            int i = slot(key);
            return keys[i] == key ? values[i] : -1;
        }
    }

    /** A binary min-heap of longs. */
    private static final class LongHeap {
        private long[] a;
        private int size;

        LongHeap(int capacity) {
            a = new long[Math.max(4, capacity)];
        }

        boolean isEmpty() {
            return size == 0;
        }

        void push(long v) {
            if (size == a.length) a = Arrays.copyOf(a, 2 * size);
            int i = size++;
            while (i > 0 && a[(i - 1) >>> 1] > v) {
                a[i] = a[(i - 1) >>> 1];
                i = (i - 1) >>> 1;
            }
            a[i] = v;
        }

        long pop() {
            long top = a[0];
            long last = a[--size];
            int i = 0;
            while (true) {
                int c = 2 * i + 1;
                if (c >= size) break;
                if (c + 1 < size && a[c + 1] < a[c]) c++;
                if (a[c] >= last) break;
                a[i] = a[c];
                i = c;
            }
            a[i] = last;
            return top;
        }
    }
}
