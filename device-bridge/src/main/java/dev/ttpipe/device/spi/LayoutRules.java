package dev.ttpipe.device.spi;

import dev.ttpipe.device.DeviceException;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Placement;
import dev.ttpipe.device.Placement.Partial;
import dev.ttpipe.device.Placement.Replicate;
import dev.ttpipe.device.Placement.Shard;
import dev.ttpipe.device.Shape;

/**
 * How an op's output layout follows from its inputs' layouts, per mesh axis, shared by every
 * backend so that an SPMD program is accepted or rejected the same way everywhere. Each rule
 * returns the output {@link Layout} or throws {@link DeviceException} naming the op, the layouts
 * and the shapes. The rules are exactly those under which every device can compute its local
 * piece from its local inputs alone:
 * <ul>
 *   <li>elementwise: equal layouts; a broadcast operand (trailing dims) follows the dims it
 *       covers (a bias [N] is R where x is R or S(non-last), S(0) where x is S(last)); a sum of
 *       Partials is Partial; a product may have one Partial factor times a Replicate one;</li>
 *   <li>matmul: S(batch or M) x R -> S(same); R x S(N) -> S(last); S(K) x S(K) -> Partial;
 *       Partial x R and R x Partial -> Partial; R x R -> R; anything else is an error;</li>
 *   <li>row-wise ops (norms, softmax, cross-entropy) need their last dim whole, and nonlinear
 *       ops (gelu, silu, softmax, norms, dropout) reject Partial;</li>
 *   <li>reductions over a sharded dim give Partial on that axis; reshape keeps a shard when the
 *       product of the dims before the sharded one is preserved; permute moves the shard;</li>
 *   <li>collectives: all_gather S(dim) -> R, reduce_scatter P -> S(dim), all_reduce P or R -> R,
 *       on one mesh axis, the other axis unchanged.</li>
 * </ul>
 */
public final class LayoutRules {
    private LayoutRules() {
    }

    // ---- validation ------------------------------------------------------------------------------

    /**
     * Checks that {@code layout} can hold a tensor of {@code shape} on {@code mesh} (shard dims in
     * range and divisible by the axis size, not both axes on one dim) and returns it with shard
     * dims made non-negative.
     */
    public static Layout normalize(String op, Shape shape, Layout layout, MeshShape mesh) {
        if (layout == null) throw new DeviceException(op + ": layout is null");
        Placement p0 = normalize(op, shape, layout.axis0(), 0, mesh);
        Placement p1 = normalize(op, shape, layout.axis1(), 1, mesh);
        if (p0 instanceof Shard s0 && p1 instanceof Shard s1 && s0.dim() == s1.dim()) {
            throw new DeviceException(op + ": layout " + layout + " shards dim " + s0.dim() + " of " + shape
                    + " on both mesh axes; shard different dims");
        }
        return p0 == layout.axis0() && p1 == layout.axis1() ? layout : Layout.of(p0, p1);
    }

    private static Placement normalize(String op, Shape shape, Placement p, int axis, MeshShape mesh) {
        if (p == null) throw new DeviceException(op + ": placement on mesh axis " + axis + " is null");
        if (!(p instanceof Shard s)) return p;
        int rank = shape.rank();
        int d = s.dim() < 0 ? rank + s.dim() : s.dim();
        if (d < 0 || d >= rank) {
            throw new DeviceException(op + ": " + s + " on mesh axis " + axis + " is out of range for shape " + shape);
        }
        int n = mesh.axisSize(axis);
        if (shape.dim(d) % n != 0) {
            throw new DeviceException(op + ": dim " + d + " of shape " + shape + " (size " + shape.dim(d)
                    + ") is not divisible by mesh axis " + axis + " size " + n);
        }
        return d == s.dim() ? s : Placement.shard(d);
    }

    /** Rejects a Partial layout: nonlinear ops need the summed value. */
    public static void requireNoPartial(String op, Layout layout) {
        if (layout.hasPartial()) {
            throw new DeviceException(op + ": input layout " + layout + " is Partial and " + op
                    + " is not linear; all_reduce (or reduce_scatter) it first");
        }
    }

    /** Rejects a sharded last dim: row-wise ops (norms, softmax, cross-entropy) need whole rows. */
    public static void requireWholeLastDim(String op, Shape shape, Layout layout) {
        int last = shape.rank() - 1;
        int axis = layout.axisSharding(last);
        if (axis >= 0) {
            throw new DeviceException(op + ": the last dim of " + shape + " is sharded on mesh axis " + axis
                    + " (layout " + layout + "); " + op + " needs whole rows: all_gather it first");
        }
    }

    /** Rejects any layout but fully replicated (parameters of row-wise ops: gamma, beta). */
    public static void requireReplicated(String op, String what, Shape shape, Layout layout) {
        if (!layout.isReplicated()) {
            throw new DeviceException(op + ": " + what + " " + shape + " must be replicated, got layout " + layout);
        }
    }

    // ---- elementwise -------------------------------------------------------------------------------

    /** Same-shape elementwise ops: the layouts must be equal; the output has that layout. */
    public static Layout same(String op, Shape sa, Layout a, Shape sb, Layout b) {
        if (!a.equals(b)) {
            throw new DeviceException(op + ": layouts " + a + " and " + b + " differ (shapes " + sa + " and " + sb
                    + "); elementwise ops need equal layouts");
        }
        return a;
    }

    /**
     * {@code a (op) b} where b has a's shape or a's trailing dims. On each axis b must be sharded
     * like the dims of a it covers and replicated where a is sharded on a dim it does not cover. A
     * Partial a needs a Partial b for a sum ({@code product = false}) and a Replicate b for a
     * product. The output has a's layout.
     */
    public static Layout broadcast(String op, Shape sa, Layout a, Shape sb, Layout b, boolean product) {
        int offset = sa.rank() - sb.rank();
        for (int axis = 0; axis < 2; axis++) {
            Placement pa = a.on(axis);
            Placement expected;
            if (pa instanceof Shard s) {
                expected = s.dim() < offset ? Placement.REPLICATE : Placement.shard(s.dim() - offset);
            } else if (pa instanceof Partial) {
                expected = product ? Placement.REPLICATE : Placement.PARTIAL;
            } else {
                expected = Placement.REPLICATE;
            }
            if (!expected.equals(b.on(axis))) {
                throw new DeviceException(op + ": layouts " + a + " and " + b + " do not fit (shapes " + sa + " and "
                        + sb + "): where a is " + pa + " on mesh axis " + axis + ", b must be " + expected + ", got "
                        + b.on(axis));
            }
        }
        return a;
    }

    // ---- matmul ------------------------------------------------------------------------------------

    /**
     * The layout of {@code op(a) @ op(b)} (shapes as stored, before the optional transposes; b is
     * 2D or has a's rank). The output has a's rank: [..., M, N].
     */
    public static Layout matmul(String op, Shape a, Layout la, boolean ta, Shape b, Layout lb, boolean tb) {
        int ra = a.rank();
        int rb = b.rank();
        int aM = ta ? ra - 1 : ra - 2;
        int bK = tb ? rb - 1 : rb - 2;
        int bN = tb ? rb - 2 : rb - 1;
        Placement[] out = new Placement[2];
        for (int axis = 0; axis < 2; axis++) {
            Placement pa = la.on(axis);
            Placement pb = lb.on(axis);
            Placement r = null;
            boolean aR = pa instanceof Replicate;
            boolean bR = pb instanceof Replicate;
            if (aR && bR) {
                r = Placement.REPLICATE;
            } else if ((pa instanceof Partial && bR) || (aR && pb instanceof Partial)) {
                r = Placement.PARTIAL;
            } else if (pa instanceof Shard sa) {
                if (sa.dim() < ra - 2) {
                    boolean sameBatch = pb instanceof Shard sb && rb == ra && sb.dim() == sa.dim();
                    if (bR && rb == 2 || sameBatch) r = sa;
                } else if (sa.dim() == aM) {
                    if (bR) r = Placement.shard(ra - 2);
                } else if (pb instanceof Shard sb && sb.dim() == bK) {
                    r = Placement.PARTIAL;
                }
            } else if (aR && pb instanceof Shard sb && sb.dim() == bN) {
                r = Placement.shard(ra - 1);
            }
            if (r == null) {
                throw new DeviceException(op + ": layouts " + la + " x " + lb + " (shapes " + a + (ta ? "^T" : "")
                        + " x " + b + (tb ? "^T" : "") + ") have no SPMD result on mesh axis " + axis + ": a is "
                        + role(pa, ra, aM, false) + ", b is " + role(pb, rb, bN, true)
                        + "; supported: S(batch|M) x R, R x S(N), S(K) x S(K) -> Partial, Partial x R, R x R");
            }
            out[axis] = r;
        }
        if (out[0] instanceof Shard s0 && out[1] instanceof Shard s1 && s0.dim() == s1.dim()) {
            throw new DeviceException(op + ": layouts " + la + " x " + lb + " would shard output dim " + s0.dim()
                    + " on both mesh axes");
        }
        return Layout.of(out[0], out[1]);
    }

    private static String role(Placement p, int rank, int mOrN, boolean isB) {
        if (!(p instanceof Shard s)) return p.toString();
        String what;
        if (s.dim() < rank - 2) what = "batch dim";
        else if (s.dim() == mOrN) what = isB ? "N" : "M";
        else what = "K";
        return p + " (its " + what + ")";
    }

    // ---- reductions, views -------------------------------------------------------------------------

    /**
     * The layout of a per-column sum over all rows of x (sumRows, norm weight gradients, bias
     * gradients): [N], Partial where x shards a row dim, S(0) where x shards the last dim.
     */
    public static Layout sumRows(Shape x, Layout lx) {
        int last = x.rank() - 1;
        Placement[] out = new Placement[2];
        for (int axis = 0; axis < 2; axis++) {
            Placement p = lx.on(axis);
            if (p instanceof Shard s) out[axis] = s.dim() == last ? Placement.shard(0) : Placement.PARTIAL;
            else out[axis] = p;
        }
        return Layout.of(out[0], out[1]);
    }

    /** The layout of a sum over {@code dim}: Partial on the axis that shards it; later shard dims shift if the dim is dropped. */
    public static Layout reduceDim(Layout l, int dim, boolean keepDim) {
        Placement[] out = new Placement[2];
        for (int axis = 0; axis < 2; axis++) {
            Placement p = l.on(axis);
            if (p instanceof Shard s) {
                if (s.dim() == dim) out[axis] = Placement.PARTIAL;
                else out[axis] = !keepDim && s.dim() > dim ? Placement.shard(s.dim() - 1) : s;
            } else {
                out[axis] = p;
            }
        }
        return Layout.of(out[0], out[1]);
    }

    /** The layout of a tensor's statistics over its last dim (norm mean/rstd, per-token targets): same shards, last dim removed. */
    public static Layout dropLastDim(Layout l) {
        return l; // shard dims below the last keep their index; a sharded last dim is rejected before
    }

    /** The output layout of a permute: output dim i is input dim {@code dims[i]}. */
    public static Layout permute(Layout l, int[] dims) {
        Placement[] out = new Placement[2];
        for (int axis = 0; axis < 2; axis++) {
            Placement p = l.on(axis);
            out[axis] = p;
            if (p instanceof Shard s) {
                for (int i = 0; i < dims.length; i++) {
                    if (dims[i] == s.dim()) out[axis] = Placement.shard(i);
                }
            }
        }
        return Layout.of(out[0], out[1]);
    }

    /**
     * The layout of a reshape from {@code from} to {@code to}: a shard survives when some dim of
     * the new shape has the same product of preceding dims as the sharded one and a size the axis
     * divides (then every device's piece is the same memory, so the reshape is a local view).
     */
    public static Layout reshape(String op, Shape from, Layout l, Shape to, MeshShape mesh) {
        Placement[] out = new Placement[2];
        for (int axis = 0; axis < 2; axis++) {
            Placement p = l.on(axis);
            out[axis] = p;
            if (!(p instanceof Shard s)) continue;
            long prefix = 1;
            for (int i = 0; i < s.dim(); i++) prefix *= from.dim(i);
            int n = mesh.axisSize(axis);
            int chosen = -1;
            long q = 1;
            for (int i = 0; i < to.rank(); i++) {
                if (q == prefix && to.dim(i) % n == 0 && (chosen < 0 || to.dim(chosen) == 1 && to.dim(i) > 1)) {
                    chosen = i;
                }
                q *= to.dim(i);
                if (q > prefix && chosen >= 0) break;
            }
            if (chosen < 0) {
                throw new DeviceException(op + ": cannot reshape " + from + " with layout " + l + " to " + to
                        + ": sharded dim " + s.dim() + " (mesh axis " + axis + ", size " + n
                        + ") has no counterpart in the new shape (same product of preceding dims, divisible by " + n
                        + "); all_gather it first");
            }
            out[axis] = Placement.shard(chosen);
        }
        if (out[0] instanceof Shard s0 && out[1] instanceof Shard s1 && s0.dim() == s1.dim()) {
            throw new DeviceException(op + ": cannot reshape " + from + " with layout " + l + " to " + to
                    + ": both shards would land on dim " + s0.dim());
        }
        return Layout.of(out[0], out[1]);
    }

    /** The layout of {@code x.repeatInterleave(dim)} or {@code sumGroups(dim)}: unchanged (a sharded dim repeats locally). */
    public static Layout repeatInterleave(Layout l) {
        return l;
    }

    // ---- embedding ---------------------------------------------------------------------------------

    /**
     * The layout of {@code table[ids]}: ids R or S(d) with a replicated table; R ids with a table
     * sharded on D (-> S(last)) or on V (vocab-parallel: each device fills the rows it holds ->
     * Partial).
     */
    public static Layout embedding(String op, Shape ids, Layout lids, Shape table, Layout lt) {
        Placement[] out = new Placement[2];
        for (int axis = 0; axis < 2; axis++) {
            Placement pi = lids.on(axis);
            Placement pt = lt.on(axis);
            Placement r = null;
            if (pt instanceof Replicate && !(pi instanceof Partial)) {
                r = pi;
            } else if (pi instanceof Replicate && pt instanceof Shard st) {
                r = st.dim() == 1 ? Placement.shard(ids.rank()) : Placement.PARTIAL;
            }
            if (r == null) {
                throw new DeviceException(op + ": ids " + ids + " layout " + lids + " and table " + table + " layout "
                        + lt + " do not fit on mesh axis " + axis
                        + "; supported: ids R or S(d) with table R, ids R with table S(0) or S(1)");
            }
            out[axis] = r;
        }
        return Layout.of(out[0], out[1]);
    }

    /**
     * Checks the layouts of an embedding backward: per axis (ids, dOut, dTable) is one of (R, R, R),
     * (S(d), S(d), Partial), (R, S(last), S(1)), (R, R, S(0)).
     */
    public static void embeddingBackward(String op, Shape ids, Layout lids, Layout ldOut, Layout ldTable) {
        for (int axis = 0; axis < 2; axis++) {
            Placement pi = lids.on(axis);
            Placement po = ldOut.on(axis);
            Placement pt = ldTable.on(axis);
            boolean ok;
            if (pi instanceof Shard) ok = po.equals(pi) && pt instanceof Partial;
            else if (pi instanceof Replicate && po instanceof Replicate) ok = pt instanceof Replicate || pt.equals(Placement.shard(0));
            else if (pi instanceof Replicate && po instanceof Shard so) ok = so.dim() == ids.rank() && pt.equals(Placement.shard(1));
            else ok = false;
            if (!ok) {
                throw new DeviceException(op + ": layouts ids " + lids + ", dOut " + ldOut + ", dTable " + ldTable
                        + " do not fit on mesh axis " + axis
                        + "; supported per axis (ids, dOut, dTable): (R, R, R), (S(d), S(d), P), (R, S(last), S(1)), (R, R, S(0))");
            }
        }
    }

    // ---- collectives -------------------------------------------------------------------------------

    /** all_gather on {@code axis}: the tensor must be S(dim) there; becomes R. */
    public static Layout allGather(String op, Shape shape, Layout l, int dim, int axis) {
        if (!Placement.shard(dim).equals(l.on(axis))) {
            throw new DeviceException(op + ": gathers dim " + dim + " on mesh axis " + axis + " but the tensor " + shape
                    + " has layout " + l + " (expected S(" + dim + ") on that axis)");
        }
        return l.with(axis, Placement.REPLICATE);
    }

    /** reduce_scatter on {@code axis}: the tensor must be Partial there; becomes S(dim). */
    public static Layout reduceScatter(String op, Shape shape, Layout l, int dim, int axis, MeshShape mesh) {
        if (!(l.on(axis) instanceof Partial)) {
            throw new DeviceException(op + ": the tensor " + shape + " has layout " + l + ", expected Partial on mesh axis "
                    + axis);
        }
        return normalize(op, shape, l.with(axis, Placement.shard(dim)), mesh);
    }

    /** all_reduce on {@code axis}: the tensor must be Partial or Replicate there; becomes R. */
    public static Layout allReduce(String op, Shape shape, Layout l, int axis) {
        if (l.on(axis) instanceof Shard) {
            throw new DeviceException(op + ": the tensor " + shape + " has layout " + l + ", sharded on mesh axis " + axis
                    + "; all_reduce needs Partial (or Replicate) there, all_gather gathers shards");
        }
        return l.with(axis, Placement.REPLICATE);
    }
}
