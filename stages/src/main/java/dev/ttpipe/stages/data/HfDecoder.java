package dev.ttpipe.stages.data;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A {@code tokenizer.json} decoder: the tokens' strings to text, a chain of steps each taking the list of strings
 * to a new list ({@code ByteLevel}, {@code Metaspace}, {@code Replace}, {@code ByteFallback}, {@code Fuse},
 * {@code Strip}, {@code Sequence}); the text is the last list joined.
 */
@FunctionalInterface
interface HfDecoder {
    String SUPPORTED = "the decoders ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and Sequence";
    /** No decoder: the tokens joined with spaces, as Hugging Face does. */
    HfDecoder NONE = tokens -> List.of(String.join(" ", tokens));

    List<String> decode(List<String> tokens);

    static HfDecoder of(TokenizerJson d) {
        return switch (d.type()) {
            case "ByteLevel" -> HfDecoder::byteLevel;
            case "Metaspace" -> {
                String replacement = d.string("replacement");
                boolean dropFirst = HfPreTokenizer.Prepend.of(d) != HfPreTokenizer.Prepend.NEVER;
                yield tokens -> {
                    List<String> out = new ArrayList<>(tokens.size());
                    for (int i = 0; i < tokens.size(); i++) out.add(tokens.get(i).replace(replacement, i == 0 && dropFirst ? "" : " "));
                    return out;
                };
            }
            case "Replace" -> {
                Pattern pattern = d.pattern("pattern");
                String content = Matcher.quoteReplacement(d.string("content"));
                yield tokens -> tokens.stream().map(t -> pattern.matcher(t).replaceAll(content)).toList();
            }
            case "ByteFallback" -> HfDecoder::byteFallback;
            case "Fuse" -> tokens -> List.of(String.join("", tokens));
            case "Strip" -> {
                String content = d.string("content");
                if (content.length() != 1) throw d.bad("content", "one character");
                int start = d.integer("start", 0), stop = d.integer("stop", 0);
                yield tokens -> tokens.stream().map(t -> strip(t, content.charAt(0), start, stop)).toList();
            }
            case "Sequence" -> {
                List<HfDecoder> steps = d.objects("decoders").stream().map(HfDecoder::of).toList();
                yield tokens -> {
                    for (HfDecoder s : steps) tokens = s.decode(tokens);
                    return tokens;
                };
            }
            default -> throw d.unsupported(SUPPORTED);
        };
    }

    /** GPT-2's byte characters back to bytes (a token spelled otherwise, an added token, as its own UTF-8), as one text. */
    private static List<String> byteLevel(List<String> tokens) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        for (String t : tokens) {
            byte[] b = ByteLevelSpelling.bytes(t);
            if (b == null) b = t.getBytes(StandardCharsets.UTF_8);
            bytes.write(b, 0, b.length);
        }
        return List.of(bytes.toString(StandardCharsets.UTF_8));
    }

    /** Runs of {@code <0xNN>} tokens to the text their bytes spell, or one U+FFFD per byte where they are not UTF-8. */
    private static List<String> byteFallback(List<String> tokens) {
        List<String> out = new ArrayList<>(tokens.size());
        ByteArrayOutputStream run = new ByteArrayOutputStream();
        for (String t : tokens) {
            if (t.length() == 6 && t.startsWith("<0x") && t.endsWith(">") && isHex(t.charAt(3)) && isHex(t.charAt(4))) {
                run.write(Integer.parseInt(t.substring(3, 5), 16));
                continue;
            }
            flush(run, out);
            out.add(t);
        }
        flush(run, out);
        return out;
    }

    private static boolean isHex(char c) {
        return Character.digit(c, 16) >= 0;
    }

    private static void flush(ByteArrayOutputStream run, List<String> out) {
        if (run.size() == 0) return;
        try {
            out.add(StandardCharsets.UTF_8.newDecoder().decode(ByteBuffer.wrap(run.toByteArray())).toString());
        } catch (CharacterCodingException e) {
            out.add("\uFFFD".repeat(run.size()));
        }
        run.reset();
    }

    /** Up to {@code start} of {@code c} off the front and {@code stop} off the end. */
    private static String strip(String t, char c, int start, int stop) {
        int from = 0, to = t.length();
        while (from < start && from < to && t.charAt(from) == c) from++;
        while (t.length() - to < stop && to > from && t.charAt(to - 1) == c) to--;
        return t.substring(from, to);
    }
}
