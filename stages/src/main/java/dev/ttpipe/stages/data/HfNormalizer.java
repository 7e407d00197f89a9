package dev.ttpipe.stages.data;

import java.text.Normalizer;
import java.util.List;
import java.util.Locale;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** A {@code tokenizer.json} normalizer: text to text, applied to each piece between added tokens before pre-tokenization. */
@FunctionalInterface
interface HfNormalizer {
    String SUPPORTED = "the normalizers NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents, Prepend, Replace and Sequence";

    String normalize(String text, PieceStart start);

    static HfNormalizer of(TokenizerJson n) {
        return switch (n.type()) {
            case "NFC" -> unicode(Normalizer.Form.NFC);
            case "NFD" -> unicode(Normalizer.Form.NFD);
            case "NFKC" -> unicode(Normalizer.Form.NFKC);
            case "NFKD" -> unicode(Normalizer.Form.NFKD);
            case "Lowercase" -> (text, start) -> lowercase(text);
            case "Strip" -> strip(n.bool("strip_left", true), n.bool("strip_right", true));
            case "StripAccents" -> (text, start) -> stripAccents(text);
            case "Prepend" -> prepend(n.string("prepend"));
            case "Replace" -> replace(n.pattern("pattern"), n.string("content"));
            case "Sequence" -> {
                List<HfNormalizer> steps = n.objects("normalizers").stream().map(HfNormalizer::of).toList();
                yield (text, start) -> {
                    for (HfNormalizer s : steps) text = s.normalize(text, start);
                    return text;
                };
            }
            default -> throw n.unsupported(SUPPORTED);
        };
    }

    private static HfNormalizer unicode(Normalizer.Form form) {
        return (text, start) -> Normalizer.normalize(text, form);
    }

    /** Each character on its own, as Rust's {@code char::to_lowercase} (no final-sigma rule). */
    private static String lowercase(String text) {
        StringBuilder sb = new StringBuilder(text.length());
        text.codePoints().forEach(cp -> {
            if (cp < 128) sb.append((char) (cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
            else sb.append(new String(Character.toChars(cp)).toLowerCase(Locale.ROOT));
        });
        return sb.toString();
    }

    private static HfNormalizer strip(boolean left, boolean right) {
        return (text, start) -> {
            int from = 0, to = text.length();
            while (left && from < to && UnicodeWhiteSpace.is(text.codePointAt(from))) from += Character.charCount(text.codePointAt(from));
            while (right && to > from && UnicodeWhiteSpace.is(text.codePointBefore(to))) to -= Character.charCount(text.codePointBefore(to));
            return text.substring(from, to);
        };
    }

    /** Drops combining marks (Unicode categories Mn, Mc, Me): with NFD first, "café" becomes "cafe". */
    private static String stripAccents(String text) {
        StringBuilder sb = new StringBuilder(text.length());
        text.codePoints().forEach(cp -> {
            int t = Character.getType(cp);
            if (t != Character.NON_SPACING_MARK && t != Character.COMBINING_SPACING_MARK && t != Character.ENCLOSING_MARK) {
                sb.appendCodePoint(cp);
            }
        });
        return sb.toString();
    }

    /** SentencePiece's leading "▁", on every piece that is not empty; not on a chunk that continues a text. */
    private static HfNormalizer prepend(String prefix) {
        return (text, start) -> text.isEmpty() || start == PieceStart.CHUNK ? text : prefix + text;
    }

    private static HfNormalizer replace(Pattern pattern, String content) {
        String replacement = Matcher.quoteReplacement(content);
        return (text, start) -> pattern.matcher(text).replaceAll(replacement);
    }
}
