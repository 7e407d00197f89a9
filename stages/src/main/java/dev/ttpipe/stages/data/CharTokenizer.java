package dev.ttpipe.stages.data;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeSet;
import java.util.stream.IntStream;

/**
 * Character-level tokenizer: the vocabulary is the sorted set of Unicode code points in a text.
 * Saved with a run as one code point per line in hex ({@code vocab.txt}), so any character,
 * newline included, round-trips.
 */
public final class CharTokenizer implements Tokenizer {
    private final int[] codePoints;
    private final Map<Integer, Integer> ids = new HashMap<>();

    private CharTokenizer(int[] codePoints) {
        this.codePoints = codePoints;
        for (int i = 0; i < codePoints.length; i++) ids.put(codePoints[i], i);
    }

    /** The tokenizer of these (distinct, sorted) code points. */
    public static CharTokenizer fromCodePoints(int[] sortedCodePoints) {
        return new CharTokenizer(sortedCodePoints.clone());
    }

    public static CharTokenizer fromText(String text) {
        TreeSet<Integer> set = new TreeSet<>();
        text.codePoints().forEach(set::add);
        return new CharTokenizer(set.stream().mapToInt(Integer::intValue).toArray());
    }

    @Override
    public String name() {
        return "char";
    }

    @Override
    public String vocabulary() {
        return decode(IntStream.range(0, vocabSize()).toArray());
    }

    @Override
    public int vocabSize() {
        return codePoints.length;
    }

    @Override
    public int[] encode(String text) {
        return text.codePoints().map(cp -> {
            Integer id = ids.get(cp);
            if (id == null) {
                throw new IllegalArgumentException("character '" + new String(Character.toChars(cp))
                        + "' (U+" + Integer.toHexString(cp).toUpperCase() + ") is not in the vocabulary of " + vocabSize() + " characters");
            }
            return id;
        }).toArray();
    }

    @Override
    public boolean canEncode(String text) {
        return text.codePoints().allMatch(ids::containsKey);
    }

    @Override
    public String decode(int[] tokens) {
        StringBuilder sb = new StringBuilder();
        for (int t : tokens) sb.appendCodePoint(codePoints[t]);
        return sb.toString();
    }

    @Override
    public String decode(int token) {
        return new String(Character.toChars(codePoints[token]));
    }

    @Override
    public void save(Path file) throws IOException {
        StringBuilder sb = new StringBuilder();
        for (int cp : codePoints) sb.append(Integer.toHexString(cp)).append('\n');
        Files.writeString(file, sb.toString(), StandardCharsets.UTF_8);
    }

    public static CharTokenizer load(Path file) throws IOException {
        return new CharTokenizer(Files.readAllLines(file, StandardCharsets.UTF_8).stream()
                .filter(l -> !l.isBlank()).mapToInt(l -> Integer.parseInt(l.trim(), 16)).toArray());
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof CharTokenizer t && Arrays.equals(codePoints, t.codePoints);
    }

    @Override
    public int hashCode() {
        return Arrays.hashCode(codePoints);
    }
}
