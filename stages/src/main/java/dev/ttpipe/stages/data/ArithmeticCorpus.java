package dev.ttpipe.stages.data;

import java.util.Random;

/**
 * A corpus ttpipe makes itself, so {@code ttpipe train} needs no data file: lines of two-digit
 * additions such as {@code 37+45=82}, shuffled from the seed. Whether samples end in the right sum
 * shows at a glance whether the model learned.
 */
public final class ArithmeticCorpus {
    private ArithmeticCorpus() {
    }

    /** {@code lines} lines "a+b=c\n" with a, b in [0, maxOperand]. */
    public static String generate(long seed, int lines, int maxOperand) {
        Random rng = new Random(seed);
        StringBuilder sb = new StringBuilder(lines * 10);
        for (int i = 0; i < lines; i++) {
            int a = rng.nextInt(maxOperand + 1), b = rng.nextInt(maxOperand + 1);
            sb.append(a).append('+').append(b).append('=').append(a + b).append('\n');
        }
        return sb.toString();
    }

    /** Checks a completed line "a+b=c": true when c is the right sum. */
    public static boolean isCorrect(String line) {
        int plus = line.indexOf('+'), eq = line.indexOf('=');
        if (plus < 1 || eq < plus + 2 || eq == line.length() - 1) return false;
        try {
            int a = Integer.parseInt(line.substring(0, plus));
            int b = Integer.parseInt(line.substring(plus + 1, eq));
            int c = Integer.parseInt(line.substring(eq + 1).trim());
            return a + b == c;
        } catch (NumberFormatException e) {
            return false;
        }
    }
}
