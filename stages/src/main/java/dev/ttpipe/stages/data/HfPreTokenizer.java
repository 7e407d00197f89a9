package dev.ttpipe.stages.data;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A {@code tokenizer.json} pre-tokenizer: splits normalized text into the pieces that BPE encodes one by one
 * ({@code ByteLevel}, {@code Split}, {@code Metaspace} and a {@code Sequence} of them).
 */
@FunctionalInterface
interface HfPreTokenizer {
    String SUPPORTED = "the pre-tokenizers ByteLevel, Split, Metaspace and Sequence";
    /** GPT-2's split pattern, which {@code ByteLevel} with {@code use_regex} uses. */
    String GPT2_PATTERN = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
    /** None: the whole normalized text is one piece (Llama 2's SentencePiece-style files). */
    HfPreTokenizer NONE = (pieces, start) -> pieces;

    /** {@code start}: where the first piece begins; the others begin a piece. Empty pieces are dropped. */
    List<String> split(List<String> pieces, PieceStart start);

    /** Whether the first piece may have changed its start (a split): then a chunk's first piece is a whole piece. */
    default boolean splits() {
        return true;
    }

    /** {@code Split}'s behaviours: what becomes of the pattern's matches. */
    enum Behavior { REMOVED, ISOLATED, MERGED_WITH_PREVIOUS, MERGED_WITH_NEXT, CONTIGUOUS }

    static HfPreTokenizer of(TokenizerJson p) {
        return switch (p.type()) {
            case "ByteLevel" -> byteLevel(p.bool("add_prefix_space", false), p.bool("use_regex", true));
            case "Split" -> {
                Pattern pattern = p.pattern("pattern");
                Behavior behavior = switch (p.string("behavior")) {
                    case "Removed" -> Behavior.REMOVED;
                    case "Isolated" -> Behavior.ISOLATED;
                    case "MergedWithPrevious" -> Behavior.MERGED_WITH_PREVIOUS;
                    case "MergedWithNext" -> Behavior.MERGED_WITH_NEXT;
                    case "Contiguous" -> Behavior.CONTIGUOUS;
                    default -> throw p.bad("behavior", "Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
                };
                boolean invert = p.bool("invert", false);
                yield (pieces, start) -> {
                    List<String> out = new ArrayList<>(pieces.size() * 4);
                    for (String piece : pieces) split(piece, pattern, behavior, invert, out);
                    return out;
                };
            }
            case "Metaspace" -> {
                String replacement = p.string("replacement");
                if (replacement.codePointCount(0, replacement.length()) != 1) throw p.bad("replacement", "one character");
                yield metaspace(replacement, Prepend.of(p), p.bool("split", true));
            }
            case "Sequence" -> sequence(p.objects("pretokenizers").stream().map(HfPreTokenizer::of).toList());
            default -> throw p.unsupported(SUPPORTED);
        };
    }

    private static HfPreTokenizer sequence(List<HfPreTokenizer> steps) {
        return (pieces, start) -> {
            for (HfPreTokenizer s : steps) {
                pieces = s.split(pieces, start);
                if (s.splits()) start = start.afterSplit();
            }
            return pieces;
        };
    }

    /** GPT-2's: an optional space before each piece, GPT-2's pattern, then each UTF-8 byte spelled as one character. */
    private static HfPreTokenizer byteLevel(boolean addPrefixSpace, boolean useRegex) {
        Pattern gpt2 = Pattern.compile(GPT2_PATTERN, Pattern.UNICODE_CHARACTER_CLASS);
        return new HfPreTokenizer() {
            @Override
            public List<String> split(List<String> pieces, PieceStart start) {
                List<String> out = new ArrayList<>(useRegex ? pieces.size() * 4 : pieces.size());
                for (int i = 0; i < pieces.size(); i++) {
                    String piece = pieces.get(i);
                    if (addPrefixSpace && !piece.startsWith(" ") && !(i == 0 && start == PieceStart.CHUNK)) piece = " " + piece;
                    int from = out.size();
                    if (useRegex) HfPreTokenizer.split(piece, gpt2, Behavior.ISOLATED, false, out);
                    else if (!piece.isEmpty()) out.add(piece);
                    for (int k = from; k < out.size(); k++) out.set(k, ByteLevelSpelling.spell(out.get(k)));
                }
                return out;
            }

            @Override
            public boolean splits() {
                return useRegex;
            }
        };
    }

    /** When {@code Metaspace} puts its replacement character before a piece. */
    enum Prepend {
        ALWAYS, FIRST, NEVER;

        static Prepend of(TokenizerJson p) {
            if (!p.has("prepend_scheme")) return p.bool("add_prefix_space", true) ? ALWAYS : NEVER;     // files before tokenizers 0.19
            return switch (p.string("prepend_scheme")) {
                case "always" -> ALWAYS;
                case "first" -> FIRST;
                case "never" -> NEVER;
                default -> throw p.bad("prepend_scheme", "always, first or never");
            };
        }

        boolean prepends(PieceStart start) {
            return this == ALWAYS ? start != PieceStart.CHUNK : this == FIRST && start == PieceStart.TEXT;
        }
    }

    /** SentencePiece's: spaces become the replacement ("▁"), which also starts the text, and pieces start at each one. */
    private static HfPreTokenizer metaspace(String replacement, Prepend prepend, boolean split) {
        Pattern at = Pattern.compile(Pattern.quote(replacement));
        return new HfPreTokenizer() {
            @Override
            public List<String> split(List<String> pieces, PieceStart start) {
                List<String> out = new ArrayList<>(pieces.size());
                for (int i = 0; i < pieces.size(); i++) {
                    String piece = pieces.get(i).replace(" ", replacement);
                    if (!piece.startsWith(replacement) && prepend.prepends(i == 0 ? start : PieceStart.PIECE)) piece = replacement + piece;
                    if (split) HfPreTokenizer.split(piece, at, Behavior.MERGED_WITH_NEXT, false, out);
                    else if (!piece.isEmpty()) out.add(piece);
                }
                return out;
            }

            @Override
            public boolean splits() {
                return split;
            }
        };
    }

    /** Hugging Face's {@code NormalizedString::split}: the pattern's matches and the text between, joined as the behaviour says. */
    static void split(String text, Pattern pattern, Behavior behavior, boolean invert, List<String> out) {
        if (text.isEmpty()) return;
        if (behavior == Behavior.ISOLATED) {                      // the common case, without the span list
            Matcher m = pattern.matcher(text);
            int prev = 0;
            while (m.find()) {
                if (m.start() > prev) out.add(text.substring(prev, m.start()));
                if (m.end() > m.start()) out.add(m.group());
                prev = m.end();
            }
            if (prev < text.length()) out.add(text.substring(prev));
            return;
        }
        List<int[]> spans = new ArrayList<>();                  // {start, end, 1 if a match}
        Matcher m = pattern.matcher(text);
        int prev = 0;
        while (m.find()) {
            if (m.start() > prev) spans.add(new int[]{prev, m.start(), invert ? 1 : 0});
            spans.add(new int[]{m.start(), m.end(), invert ? 0 : 1});
            prev = m.end();
        }
        if (prev < text.length()) spans.add(new int[]{prev, text.length(), invert ? 1 : 0});
        List<int[]> joined = switch (behavior) {
            case ISOLATED -> spans;                                // handled above
            case REMOVED -> spans.stream().filter(s -> s[2] == 0).toList();
            case CONTIGUOUS, MERGED_WITH_PREVIOUS -> {
                List<int[]> acc = new ArrayList<>();
                boolean previousMatch = false;
                for (int[] s : spans) {
                    boolean match = s[2] == 1;
                    boolean join = behavior == Behavior.CONTIGUOUS ? match == previousMatch : match && !previousMatch;
                    if (join && !acc.isEmpty()) acc.get(acc.size() - 1)[1] = s[1];
                    else acc.add(s);
                    previousMatch = match;
                }
                yield acc;
            }
            case MERGED_WITH_NEXT -> {
                List<int[]> acc = new ArrayList<>();
                boolean previousMatch = false;
                for (int i = spans.size() - 1; i >= 0; i--) {
                    int[] s = spans.get(i);
                    boolean match = s[2] == 1;
                    if (match && !previousMatch && !acc.isEmpty()) acc.get(acc.size() - 1)[0] = s[0];
                    else acc.add(s);
                    previousMatch = match;
                }
                Collections.reverse(acc);
                yield acc;
            }
        };
        for (int[] s : joined) if (s[1] > s[0]) out.add(text.substring(s[0], s[1]));
    }
}
