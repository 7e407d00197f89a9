package dev.ttpipe.stages.independent;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A whole GPT-2, Llama or Qwen3 language model in fp64, forward and hand-written backward, as plain loops
 * over {@code double[]}. It shares no code with ttpipe (it imports nothing from it): it is written
 * from the math, so that the stages' gradients can be checked against something that was not
 * derived from them. The loss is the sum over the counted tokens of the cross-entropy.
 *
 * <p>The models, as ttpipe defines them:
 * <ul>
 *   <li>GPT-2: pre-LayerNorm blocks {@code x1 = x + attn(ln1(x))}, {@code out = x1 + mlp(ln2(x1))};
 *   learned token and position embeddings; q, v and output projections with biases, the key
 *   projection without (softmax ignores it); MLP {@code W2 gelu(W1 h + b1) + b2} with GELU's tanh
 *   approximation; a final LayerNorm and an LM head without bias.</li>
 *   <li>Llama: RMSNorm instead of LayerNorm, no position embedding and no biases; rotary
 *   positions on q and k, pairs (2i, 2i+1) of a head at position t turned by
 *   {@code t * theta^(-2i/hd)}, or by {@code t * invFreq[i]} when the caller gives the frequencies
 *   (a scaled RoPE, computed by the caller from its own formula); grouped-query attention (query head h reads key/value head
 *   {@code h / (H / Hkv)}); SwiGLU MLP {@code W2 (silu(W1 h) * W3 h)}.</li>
 *   <li>Qwen3: a Llama whose q and k, each head's hd values apart, go through an RMSNorm with gains
 *   {@code l.qn.g} and {@code l.kn.g} [hd] after the projection and before the rotary positions; its head
 *   size hd may differ from D / H (q is then H x hd wide, the output projection [D, H x hd]).</li>
 *   <li>Attention: causal softmax of {@code q . k / sqrt(hd)}; linear weights are [out, in].</li>
 * </ul>
 * Weight names: {@code tok_emb [V, D]}, {@code pos_emb [S, D]} (GPT-2), and per layer {@code l}:
 * {@code l.ln1.g}, {@code l.ln1.b}, {@code l.q.w}, {@code l.q.b}, {@code l.k.w}, {@code l.v.w},
 * {@code l.v.b}, {@code l.o.w}, {@code l.o.b}, {@code l.ln2.g}, {@code l.ln2.b}, {@code l.fc1.w},
 * {@code l.fc1.b}, {@code l.fc2.w}, {@code l.fc2.b}, {@code l.up.w} (Llama; fc1 is the gate), {@code l.qn.g},
 * {@code l.kn.g} (Qwen3), then
 * {@code lnf.g}, {@code lnf.b}, {@code lm.w [V, D]}. Llama has no {@code .b} entries.
 */
public final class PlainTransformer {
    private final boolean llama, qkNorm;
    private final int vocab, dim, heads, kvHeads, headDim, hidden, layers;
    private final double eps, theta;
    private final double[] invFreq;
    private final Map<String, double[]> w;

    /** The loss (sum over counted tokens) and dLoss/dweight for every weight, by name. */
    public record Result(double loss, Map<String, double[]> grads) {
    }

    public PlainTransformer(boolean llama, int vocab, int dim, int heads, int kvHeads, int hidden, int layers,
                            double eps, double theta, Map<String, double[]> weights) {
        this(llama, vocab, dim, heads, kvHeads, hidden, layers, eps, theta, null, weights);
    }

    /** A Llama whose rotary positions turn pair i by {@code t * invFreq[i]} ({@code invFreq} null: {@code theta^(-2i/hd)}). */
    public PlainTransformer(boolean llama, int vocab, int dim, int heads, int kvHeads, int hidden, int layers,
                            double eps, double theta, double[] invFreq, Map<String, double[]> weights) {
        this(llama, false, vocab, dim, heads, kvHeads, dim / heads, hidden, layers, eps, theta, invFreq, weights);
    }

    /** {@code qkNorm}: a Qwen3 (a Llama with per-head q/k RMSNorms); {@code headDim}: the head size hd. */
    public PlainTransformer(boolean llama, boolean qkNorm, int vocab, int dim, int heads, int kvHeads, int headDim, int hidden,
                            int layers, double eps, double theta, double[] invFreq, Map<String, double[]> weights) {
        this.invFreq = invFreq == null ? null : invFreq.clone();
        this.llama = llama;
        this.qkNorm = qkNorm;
        this.vocab = vocab;
        this.dim = dim;
        this.heads = heads;
        this.kvHeads = kvHeads;
        this.headDim = headDim;
        this.hidden = hidden;
        this.layers = layers;
        this.eps = eps;
        this.theta = theta;
        this.w = weights;
    }

    /**
     * Llama 3.1's rope scaling as Hugging Face's {@code _compute_llama3_parameters} writes it: base
     * frequencies {@code 1 / theta^(2i/hd)}; wavelength {@code 2 pi / f}; f / factor where the wavelength
     * exceeds {@code old / low}; where it lies in [old / high, old / low], {@code (1 - s) f / factor + s f}
     * with {@code s = (old / wavelength - low) / (high - low)}; f elsewhere.
     */
    public static double[] llama3InverseFrequencies(double theta, int hd, double factor, double low, double high, double old) {
        double[] out = new double[hd / 2];
        for (int i = 0; i < out.length; i++) {
            double f = 1.0 / Math.pow(theta, 2.0 * i / hd);
            double wavelength = 2 * Math.PI / f;
            double scaled = wavelength > old / low ? f / factor : f;
            double s = (old / wavelength - low) / (high - low);
            boolean medium = wavelength >= old / high && wavelength <= old / low;
            out[i] = medium ? (1 - s) * scaled / factor + s * scaled : scaled;
        }
        return out;
    }

    /** What a layer's forward keeps for its backward. */
    private static final class LayerCache {
        double[] x, h1, qRaw, kRaw, q, k, v, p, o, x1, h2, u1, u3, g;
    }

    /** Loss and gradients for a batch of {@code batch} sequences of {@code seq} tokens; targets equal to {@code ignore} do not count. */
    public Result lossAndGradients(int[] ids, int[] targets, int batch, int seq, int ignore) {
        int n = batch * seq;
        Map<String, double[]> gr = new LinkedHashMap<>();
        for (Map.Entry<String, double[]> e : w.entrySet()) gr.put(e.getKey(), new double[e.getValue().length]);

        // ---- forward ----
        double[] x = new double[n * dim];
        for (int r = 0; r < n; r++) {
            for (int j = 0; j < dim; j++) {
                x[r * dim + j] = w.get("tok_emb")[ids[r] * dim + j] + (llama ? 0 : w.get("pos_emb")[(r % seq) * dim + j]);
            }
        }
        LayerCache[] cache = new LayerCache[layers];
        for (int l = 0; l < layers; l++) {
            LayerCache c = cache[l] = new LayerCache();
            c.x = x;
            c.h1 = norm(x, n, dim, "" + l + ".ln1");
            c.q = linear(c.h1, n, dim, heads * hd(), l + ".q");
            c.k = linear(c.h1, n, dim, kvHeads * hd(), l + ".k");
            c.v = linear(c.h1, n, dim, kvHeads * hd(), l + ".v");
            if (qkNorm) {                                // each head's hd values: rows of [n * heads, hd]
                c.qRaw = c.q;
                c.kRaw = c.k;
                c.q = norm(c.qRaw, n * heads, hd(), l + ".qn");
                c.k = norm(c.kRaw, n * kvHeads, hd(), l + ".kn");
            }
            if (llama) {
                rotate(c.q, n, seq, heads, false);
                rotate(c.k, n, seq, kvHeads, false);
            }
            c.p = new double[batch * heads * seq * seq];
            c.o = new double[n * heads * hd()];
            attend(c, batch, seq);
            double[] a = linear(c.o, n, heads * hd(), dim, l + ".o");
            c.x1 = add(x, a);
            c.h2 = norm(c.x1, n, dim, l + ".ln2");
            c.u1 = linear(c.h2, n, dim, hidden, l + ".fc1");
            c.g = new double[n * hidden];
            if (llama) {
                c.u3 = linear(c.h2, n, dim, hidden, l + ".up");
                for (int i = 0; i < c.g.length; i++) c.g[i] = c.u1[i] / (1 + Math.exp(-c.u1[i])) * c.u3[i];
            } else {
                for (int i = 0; i < c.g.length; i++) c.g[i] = gelu(c.u1[i]);
            }
            x = add(c.x1, linear(c.g, n, hidden, dim, l + ".fc2"));
        }
        double[] hf = norm(x, n, dim, "lnf");
        double[] logits = linear(hf, n, dim, vocab, "lm");
        double loss = 0;
        double[] dLogits = new double[n * vocab];
        for (int r = 0; r < n; r++) {
            if (targets[r] == ignore) continue;
            double max = Double.NEGATIVE_INFINITY, z = 0;
            for (int j = 0; j < vocab; j++) max = Math.max(max, logits[r * vocab + j]);
            for (int j = 0; j < vocab; j++) z += Math.exp(logits[r * vocab + j] - max);
            loss += max + Math.log(z) - logits[r * vocab + targets[r]];
            for (int j = 0; j < vocab; j++) {
                dLogits[r * vocab + j] = Math.exp(logits[r * vocab + j] - max) / z - (j == targets[r] ? 1 : 0);
            }
        }

        // ---- backward ----
        double[] dHf = linearBack(dLogits, hf, n, dim, vocab, "lm", gr);
        double[] dx = normBack(dHf, x, n, dim, "lnf", gr);
        for (int l = layers - 1; l >= 0; l--) {
            LayerCache c = cache[l];
            // out = x1 + fc2(g)
            double[] dG = linearBack(dx, c.g, n, hidden, dim, l + ".fc2", gr);
            double[] dU1 = new double[n * hidden];
            double[] dU3 = llama ? new double[n * hidden] : null;
            for (int i = 0; i < dU1.length; i++) {
                if (llama) {
                    double s = 1 / (1 + Math.exp(-c.u1[i]));
                    dU3[i] = dG[i] * c.u1[i] * s;
                    dU1[i] = dG[i] * c.u3[i] * (s + c.u1[i] * s * (1 - s));
                } else {
                    dU1[i] = dG[i] * geluDerivative(c.u1[i]);
                }
            }
            double[] dH2 = linearBack(dU1, c.h2, n, dim, hidden, l + ".fc1", gr);
            if (llama) addInto(dH2, linearBack(dU3, c.h2, n, dim, hidden, l + ".up", gr));
            double[] dX1 = add(dx, normBack(dH2, c.x1, n, dim, l + ".ln2", gr));
            // x1 = x + o(attention(h1))
            double[] dO = linearBack(dX1, c.o, n, heads * hd(), dim, l + ".o", gr);
            double[] dQ = new double[c.q.length], dK = new double[c.k.length], dV = new double[c.v.length];
            attendBack(c, dO, dQ, dK, dV, batch, seq);
            if (llama) {
                rotate(dQ, n, seq, heads, true);
                rotate(dK, n, seq, kvHeads, true);
            }
            if (qkNorm) {
                dQ = normBack(dQ, c.qRaw, n * heads, hd(), l + ".qn", gr);
                dK = normBack(dK, c.kRaw, n * kvHeads, hd(), l + ".kn", gr);
            }
            double[] dH1 = linearBack(dQ, c.h1, n, dim, heads * hd(), l + ".q", gr);
            addInto(dH1, linearBack(dK, c.h1, n, dim, kvHeads * hd(), l + ".k", gr));
            addInto(dH1, linearBack(dV, c.h1, n, dim, kvHeads * hd(), l + ".v", gr));
            dx = add(dX1, normBack(dH1, c.x, n, dim, l + ".ln1", gr));
        }
        for (int r = 0; r < n; r++) {
            for (int j = 0; j < dim; j++) {
                gr.get("tok_emb")[ids[r] * dim + j] += dx[r * dim + j];
                if (!llama) gr.get("pos_emb")[(r % seq) * dim + j] += dx[r * dim + j];
            }
        }
        return new Result(loss, gr);
    }

    private int hd() {
        return headDim;
    }

    // ---- attention: per sequence b, query head h, query i, key j <= i ----

    private void attend(LayerCache c, int batch, int seq) {
        int hd = hd(), group = heads / kvHeads;
        double scale = 1 / Math.sqrt(hd);
        for (int b = 0; b < batch; b++) {
            for (int h = 0; h < heads; h++) {
                int kvh = h / group;
                for (int i = 0; i < seq; i++) {
                    double[] s = new double[i + 1];
                    double max = Double.NEGATIVE_INFINITY, z = 0;
                    for (int j = 0; j <= i; j++) {
                        double dot = 0;
                        for (int e = 0; e < hd; e++) {
                            dot += c.q[((b * seq + i) * heads + h) * hd + e] * c.k[((b * seq + j) * kvHeads + kvh) * hd + e];
                        }
                        s[j] = dot * scale;
                        max = Math.max(max, s[j]);
                    }
                    for (int j = 0; j <= i; j++) z += Math.exp(s[j] - max);
                    for (int j = 0; j <= i; j++) {
                        double p = Math.exp(s[j] - max) / z;
                        c.p[((b * heads + h) * seq + i) * seq + j] = p;
                        for (int e = 0; e < hd; e++) {
                            c.o[((b * seq + i) * heads + h) * hd + e] += p * c.v[((b * seq + j) * kvHeads + kvh) * hd + e];
                        }
                    }
                }
            }
        }
    }

    /** The softmax's backward through its Jacobian dp_j/ds_m = p_j (delta_jm - p_m). */
    private void attendBack(LayerCache c, double[] dO, double[] dQ, double[] dK, double[] dV, int batch, int seq) {
        int hd = hd(), group = heads / kvHeads;
        double scale = 1 / Math.sqrt(hd);
        for (int b = 0; b < batch; b++) {
            for (int h = 0; h < heads; h++) {
                int kvh = h / group;
                for (int i = 0; i < seq; i++) {
                    int qi = ((b * seq + i) * heads + h) * hd;
                    double[] dP = new double[i + 1];
                    for (int j = 0; j <= i; j++) {
                        int vj = ((b * seq + j) * kvHeads + kvh) * hd;
                        double p = c.p[((b * heads + h) * seq + i) * seq + j];
                        for (int e = 0; e < hd; e++) {
                            dP[j] += dO[qi + e] * c.v[vj + e];
                            dV[vj + e] += p * dO[qi + e];
                        }
                    }
                    for (int m = 0; m <= i; m++) {
                        double dS = 0;
                        double pm = c.p[((b * heads + h) * seq + i) * seq + m];
                        for (int j = 0; j <= i; j++) {
                            double pj = c.p[((b * heads + h) * seq + i) * seq + j];
                            dS += dP[j] * pj * ((j == m ? 1 : 0) - pm);
                        }
                        int km = ((b * seq + m) * kvHeads + kvh) * hd;
                        for (int e = 0; e < hd; e++) {
                            dQ[qi + e] += scale * dS * c.k[km + e];
                            dK[km + e] += scale * dS * c.q[qi + e];
                        }
                    }
                }
            }
        }
    }

    /** Rotary positions in place on [n, nh, hd] rows of position r % seq; {@code transpose}: R(t)^T, the backward. */
    private void rotate(double[] t, int n, int seq, int nh, boolean transpose) {
        int hd = hd();
        for (int r = 0; r < n; r++) {
            int pos = r % seq;
            for (int h = 0; h < nh; h++) {
                for (int i = 0; i < hd / 2; i++) {
                    double angle = pos * (invFreq != null ? invFreq[i] : Math.pow(theta, -2.0 * i / hd));
                    double cs = Math.cos(angle), sn = Math.sin(angle);
                    int a = (r * nh + h) * hd + 2 * i;
                    double x0 = t[a], x1 = t[a + 1];
                    if (!transpose) {
                        t[a] = cs * x0 - sn * x1;
                        t[a + 1] = sn * x0 + cs * x1;
                    } else {
                        t[a] = cs * x0 + sn * x1;
                        t[a + 1] = -sn * x0 + cs * x1;
                    }
                }
            }
        }
    }

    // ---- norms: LayerNorm (GPT-2) or RMSNorm (Llama) over rows of width (dim, or hd for Qwen3's q/k norms) ----

    private double[] norm(double[] x, int n, int width, String name) {
        double[] y = new double[x.length];
        for (int r = 0; r < n; r++) {
            double[] xhat = normalized(x, r, width);
            for (int j = 0; j < width; j++) {
                y[r * width + j] = xhat[j] * w.get(name + ".g")[j] + (llama ? 0 : w.get(name + ".b")[j]);
            }
        }
        return y;
    }

    /** Row r of x normalised: (x - mean) / sqrt(var + eps), or x / sqrt(mean(x^2) + eps). */
    private double[] normalized(double[] x, int r, int width) {
        double mean = 0, sq = 0;
        if (!llama) {
            for (int j = 0; j < width; j++) mean += x[r * width + j] / width;
        }
        for (int j = 0; j < width; j++) sq += (x[r * width + j] - mean) * (x[r * width + j] - mean) / width;
        double inv = 1 / Math.sqrt(sq + eps);
        double[] out = new double[width];
        for (int j = 0; j < width; j++) out[j] = (x[r * width + j] - mean) * inv;
        return out;
    }

    /**
     * Through the full Jacobian of the normalisation: d xhat_k / d x_j = inv (delta_kj - [LN] 1/D)
     * - xhat_k xhat_j inv / D (the same expression for RMSNorm, without the mean term), D the width.
     */
    private double[] normBack(double[] dy, double[] x, int n, int width, String name, Map<String, double[]> gr) {
        double[] dx = new double[x.length];
        double[] g = w.get(name + ".g");
        for (int r = 0; r < n; r++) {
            double[] xhat = normalized(x, r, width);
            double mean = 0, sq = 0;
            if (!llama) {
                for (int j = 0; j < width; j++) mean += x[r * width + j] / width;
            }
            for (int j = 0; j < width; j++) sq += (x[r * width + j] - mean) * (x[r * width + j] - mean) / width;
            double inv = 1 / Math.sqrt(sq + eps);
            for (int k = 0; k < width; k++) {
                gr.get(name + ".g")[k] += dy[r * width + k] * xhat[k];
                if (!llama) gr.get(name + ".b")[k] += dy[r * width + k];
            }
            for (int j = 0; j < width; j++) {
                double s = 0;
                for (int k = 0; k < width; k++) {
                    double jac = inv * ((k == j ? 1 : 0) - (llama ? 0 : 1.0 / width)) - xhat[k] * xhat[j] * inv / width;
                    s += dy[r * width + k] * g[k] * jac;
                }
                dx[r * width + j] = s;
            }
        }
        return dx;
    }

    // ---- linear layers y = x W^T (+ b), W [out, in] ----

    private double[] linear(double[] x, int n, int in, int out, String name) {
        double[] wt = w.get(name + ".w"), b = w.get(name + ".b");
        double[] y = new double[n * out];
        for (int r = 0; r < n; r++) {
            for (int o = 0; o < out; o++) {
                double s = b == null ? 0 : b[o];
                for (int i = 0; i < in; i++) s += x[r * in + i] * wt[o * in + i];
                y[r * out + o] = s;
            }
        }
        return y;
    }

    /** Accumulates dW (and db) into {@code gr}; returns dx. */
    private double[] linearBack(double[] dy, double[] x, int n, int in, int out, String name, Map<String, double[]> gr) {
        double[] wt = w.get(name + ".w"), dw = gr.get(name + ".w"), db = gr.get(name + ".b");
        double[] dx = new double[n * in];
        for (int r = 0; r < n; r++) {
            for (int o = 0; o < out; o++) {
                double d = dy[r * out + o];
                if (db != null) db[o] += d;
                for (int i = 0; i < in; i++) {
                    dw[o * in + i] += d * x[r * in + i];
                    dx[r * in + i] += d * wt[o * in + i];
                }
            }
        }
        return dx;
    }

    // ---- GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) ----

    private static double gelu(double x) {
        return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
    }

    private static double geluDerivative(double x) {
        double u = Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x);
        double du = Math.sqrt(2 / Math.PI) * (1 + 3 * 0.044715 * x * x);
        double sech2 = 1 / (Math.cosh(u) * Math.cosh(u));
        return 0.5 * (1 + Math.tanh(u)) + 0.5 * x * sech2 * du;
    }

    private static double[] add(double[] a, double[] b) {
        double[] out = a.clone();
        addInto(out, b);
        return out;
    }

    private static void addInto(double[] a, double[] b) {
        for (int i = 0; i < a.length; i++) a[i] += b[i];
    }
}
