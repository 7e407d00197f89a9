package dev.ttpipe.stages.data;

import java.util.ArrayList;
import java.util.List;

/**
 * A {@code tokenizer.json} post-processor, for encoding with special tokens: {@code TemplateProcessing}'s
 * {@code single} template (Llama 2's BOS {@code <s>}), {@code BertProcessing}/{@code RobertaProcessing} (cls and
 * sep around the text), {@code ByteLevel} (offsets only: the ids stay) and a {@code Sequence} of them.
 */
@FunctionalInterface
interface HfPostProcessor {
    String SUPPORTED = "the post-processors TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel and Sequence";
    HfPostProcessor NONE = ids -> ids;

    int[] addSpecialTokens(int[] ids);

    static HfPostProcessor of(TokenizerJson p) {
        return switch (p.type()) {
            case "ByteLevel" -> NONE;
            case "TemplateProcessing" -> template(p);
            case "BertProcessing", "RobertaProcessing" -> {
                int cls = idOf(p, "cls"), sep = idOf(p, "sep");
                yield ids -> concat(List.of(new int[]{cls}, ids, new int[]{sep}));
            }
            case "Sequence" -> {
                List<HfPostProcessor> steps = p.objects("processors").stream().map(HfPostProcessor::of).toList();
                yield ids -> {
                    for (HfPostProcessor s : steps) ids = s.addSpecialTokens(ids);
                    return ids;
                };
            }
            default -> throw p.unsupported(SUPPORTED);
        };
    }

    /** A {@code ["token", id]} pair's id. */
    private static int idOf(TokenizerJson p, String key) {
        if (p.list(key).size() != 2 || !(p.list(key).get(1) instanceof Long id) || id < 0) throw p.bad(key, "[\"token\", id]");
        return (int) (long) id;
    }

    /** The {@code single} template: each {@code SpecialToken} item's ids from {@code special_tokens}, the text at {@code Sequence A}. */
    private static HfPostProcessor template(TokenizerJson p) {
        TokenizerJson specials = p.object("special_tokens");
        List<int[]> parts = new ArrayList<>();                 // null: the text
        List<TokenizerJson> items = p.objects("single");
        for (TokenizerJson item : items) {
            if (item.has("Sequence")) {
                TokenizerJson seq = item.object("Sequence");
                if (!"A".equals(seq.get("id"))) throw seq.bad("id", "A (a single text)");
                parts.add(null);
            } else if (item.has("SpecialToken")) {
                TokenizerJson st = item.object("SpecialToken");
                String name = st.string("id");
                if (!specials.has(name)) throw st.bad("id", "a key of " + specials.path());
                List<?> ids = specials.object(name).list("ids");
                int[] part = new int[ids.size()];
                for (int i = 0; i < part.length; i++) {
                    if (!(ids.get(i) instanceof Long id) || id < 0) throw specials.object(name).bad("ids", "token ids");
                    part[i] = (int) (long) id;
                }
                parts.add(part);
            } else {
                throw p.at(item.path(), item.map(), "{\"SpecialToken\": ...} or {\"Sequence\": ...}");
            }
        }
        return ids -> {
            List<int[]> all = new ArrayList<>(parts.size());
            for (int[] part : parts) all.add(part == null ? ids : part);
            return concat(all);
        };
    }

    private static int[] concat(List<int[]> parts) {
        int n = 0;
        for (int[] p : parts) n += p.length;
        int[] out = new int[n];
        int k = 0;
        for (int[] p : parts) {
            System.arraycopy(p, 0, out, k, p.length);
            k += p.length;
        }
        return out;
    }
}
