package dev.ttpipe.stages.data;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

/**
 * The {@code added_tokens} of a {@code tokenizer.json} found in a text, as Hugging Face's {@code AddedVocabulary}
 * splits them out: the longest token at the leftmost place, kept whole (never normalized, pre-tokenized or
 * merged), honouring {@code lstrip}/{@code rstrip} (the token takes the whitespace beside it) and
 * {@code single_word} (only where no word character touches it). Immutable, thread-safe.
 */
final class AddedTokens {
    /** One entry of {@code added_tokens}. */
    record Token(int id, String content, boolean special, boolean normalized, boolean lstrip, boolean rstrip, boolean singleWord) {
    }

    /** A piece of text between added tokens ({@code id} -1), or an added token ({@code text} its span of the text). */
    record Segment(String text, int id) {
    }

    static final AddedTokens NONE = new AddedTokens(List.of(), List.of());

    /** A token and what it is matched as: its content, or its content normalized. */
    private record Candidate(String pattern, Token token) {
    }

    private final Map<Character, List<Candidate>> byFirstChar = new HashMap<>();     // longest first
    private final boolean[] firstChars = new boolean[1 << 16];

    /** {@code patterns}: what each token is matched as (its content, or its normalized content). */
    AddedTokens(List<Token> tokens, List<String> patterns) {
        List<Candidate> all = new ArrayList<>();
        for (int i = 0; i < tokens.size(); i++) if (!patterns.get(i).isEmpty()) all.add(new Candidate(patterns.get(i), tokens.get(i)));
        all.sort(Comparator.comparingInt((Candidate c) -> -c.pattern().length()));
        for (Candidate c : all) {
            byFirstChar.computeIfAbsent(c.pattern().charAt(0), k -> new ArrayList<>()).add(c);
            firstChars[c.pattern().charAt(0)] = true;
        }
    }

    static List<Token> read(TokenizerJson root) {
        List<Token> out = new ArrayList<>();
        if (!root.has("added_tokens")) return out;
        for (TokenizerJson t : root.objects("added_tokens")) {
            int id = t.integer("id", -1);
            if (id < 0 || id > HfTokenizer.MAX_ID) throw t.bad("id", "a token id from 0 to " + HfTokenizer.MAX_ID);
            boolean special = t.bool("special", false);
            out.add(new Token(id, t.string("content"), special, t.bool("normalized", !special), t.bool("lstrip", false),
                    t.bool("rstrip", false), t.bool("single_word", false)));
        }
        return out;
    }

    boolean isEmpty() {
        return byFirstChar.isEmpty();
    }

    /**
     * Whether cutting {@code text} at {@code at} would change which added tokens it holds: one spans the cut, or one
     * that takes the whitespace before it ({@code lstrip}) starts there.
     */
    boolean crosses(CharSequence text, int at) {
        for (List<Candidate> cs : byFirstChar.values()) {
            for (Candidate c : cs) {
                String p = c.pattern();
                for (int from = Math.max(0, at - p.length() + 1); from < at && from + p.length() <= text.length(); from++) {
                    if (p.contentEquals(text.subSequence(from, from + p.length()))) return true;
                }
                if (c.token().lstrip() && at + p.length() <= text.length() && p.contentEquals(text.subSequence(at, at + p.length()))) {
                    return true;
                }
            }
        }
        return false;
    }

    /** Splits {@code text} into its added tokens and the text between them, in order; empty text between is left out. */
    void split(String text, Consumer<Segment> out) {
        if (byFirstChar.isEmpty()) {
            if (!text.isEmpty()) out.accept(new Segment(text, -1));
            return;
        }
        int done = 0;                                       // end of the last token taken
        for (int i = 0; i < text.length(); ) {
            if (!firstChars[text.charAt(i)]) {
                i++;
                continue;
            }
            Token t = null;
            int len = 0;
            for (Candidate c : byFirstChar.getOrDefault(text.charAt(i), List.of())) {
                if (text.startsWith(c.pattern(), i)) {
                    t = c.token();
                    len = c.pattern().length();
                    break;
                }
            }
            if (t == null) {
                i++;
                continue;
            }
            int start = i, stop = i + len;
            i = stop;                                       // a match not taken (single_word) is still passed over
            if (t.singleWord() && (start > 0 && isWordChar(text.codePointBefore(start))
                    || stop < text.length() && isWordChar(text.codePointAt(stop)))) {
                continue;
            }
            if (t.lstrip()) {
                while (start > done && UnicodeWhiteSpace.is(text.codePointBefore(start))) start -= Character.charCount(text.codePointBefore(start));
            }
            if (t.rstrip()) {
                while (stop < text.length() && UnicodeWhiteSpace.is(text.codePointAt(stop))) stop += Character.charCount(text.codePointAt(stop));
                i = stop;
            }
            if (start > done) out.accept(new Segment(text.substring(done, start), -1));
            out.accept(new Segment(text.substring(start, stop), t.id()));
            done = stop;
        }
        if (done < text.length()) out.accept(new Segment(text.substring(done), -1));
    }

    /** Rust regex's {@code \w}: letters, marks, decimal digits, connector punctuation. */
    private static boolean isWordChar(int cp) {
        int t = Character.getType(cp);
        return Character.isLetterOrDigit(cp) || t == Character.NON_SPACING_MARK || t == Character.COMBINING_SPACING_MARK
                || t == Character.ENCLOSING_MARK || t == Character.CONNECTOR_PUNCTUATION;
    }
}
