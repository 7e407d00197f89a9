package dev.ttpipe.device.cpu;

import com.sun.jna.Memory;
import com.sun.jna.Pointer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.LongAdder;

/**
 * oneDNN's matmul primitive for one tile of a product with a bf16 result: {@code out = op(A) @ op(B) (+ out)
 * (+ bias[j] on every row)}, A and B bf16, the sums in fp32, then the bias and the earlier {@code out} added in
 * fp32 (in that order) and the result rounded to bf16 once, in the primitive's epilogue. That is the arithmetic of
 * {@code dnnl_gemm_bf16bf16f32} into fp32 followed by {@link Convert#tileToBf16}, without the fp32 tile going through
 * memory and back; the order of the sums over k is the primitive's, so a product may differ from the GEMM's in the
 * last bit of some elements.
 *
 * <p>A primitive is made once per tile shape (sizes, strides, bias, accumulation) and reused; it runs on its caller's
 * thread ({@code OMP_NUM_THREADS=1}, {@link Dnnl}), so its bits are a function of the shape. Each run takes an
 * execution context (a stream, its memory objects, a scratchpad: user scratchpad mode, so runs on two threads never
 * share one) from a pool and gives it back. A shape oneDNN cannot make a primitive for is remembered and the caller
 * falls back to the GEMM. Thread-safe.
 */
final class DnnlMatmul {
    private static final Logger LOG = LoggerFactory.getLogger(DnnlMatmul.class);
    private static final int CPU = 1;                       // dnnl_cpu
    private static final int IN_ORDER = 1;                  // dnnl_stream_in_order
    private static final int BF16 = 2, F32 = 3;             // dnnl_data_type_t
    private static final int SCRATCHPAD_USER = 1;           // dnnl_scratchpad_mode_user
    private static final int ARG_SRC = 1, ARG_DST = 17, ARG_WEIGHTS = 33, ARG_BIAS = 41, ARG_SCRATCHPAD = 80;
    private static final int QUERY_IMPL = 8, QUERY_SCRATCHPAD_MD = 136;
    private static final long ALLOCATE = -1L;               // DNNL_MEMORY_ALLOCATE
    /** Rows of a tile; the most a primitive runs. */
    static final int TILE_M = 256;
    /** A tile of fewer rows runs a primitive when its rows are a multiple of this (a microbatch of 192 tokens). */
    static final int ROW_STEP = 64;
    /** The most columns of a tile: a result as wide runs in one tile per row band. */
    static final int TILE_N = 4096;

    /** A tile's shape: what its primitive depends on. */
    record Shape(boolean ta, boolean tb, int m, int n, int k, int lda, int ldb, int ldo, boolean bias,
                         boolean accumulate) {
    }

    private static final ConcurrentHashMap<Shape, Optional<Primitive>> PRIMITIVES = new ConcurrentHashMap<>();
    private static long engine;

    private DnnlMatmul() {
    }

    /**
     * Rows per tile of C: exactly {@value #TILE_M} (the last tile has the rest); all of them for a small product.
     * Only a tile whose rows are a multiple of {@value #ROW_STEP} goes to a primitive ({@link #runs}), so at most
     * {@code TILE_M / ROW_STEP} primitives are made per width of the model, whatever the lengths of its sequences.
     */
    static int tileRows(int m, int n, int k) {
        return (long) m * n * k < BlasGemm.SMALL_FLOPS ? m : TILE_M;
    }

    /**
     * Columns per tile: all of them up to {@value #TILE_N}, so a tile's rows of the result are contiguous (for such a
     * tile the primitive runs its brgemm kernel; a tile with strided rows gets a slower GEMM through an fp32 scratch).
     */
    static int tileCols(int m, int n, int k) {
        return (long) m * n * k < BlasGemm.SMALL_FLOPS ? n : Math.min(n, TILE_N);
    }

    /** Whether a tile of {@code rows} goes to a primitive (a function of the tile's shape, so of the product's). */
    static boolean runs(int rows) {
        return rows % ROW_STEP == 0;
    }

    /**
     * One tile into bf16 {@code out} (row stride {@code ldo}): A and B bf16 (addresses of op(A)'s and op(B)'s first
     * element, strides {@code lda}, {@code ldb} as for {@link Dnnl#gemmBf16}), {@code bias} the address of n floats
     * or 0, {@code accumulate} adds the bf16 values already in {@code out}. False, having written nothing, where no
     * primitive runs this shape; oneDNN must be loaded ({@link Dnnl#load}).
     */
    static boolean tileToBf16(boolean ta, boolean tb, int m, int n, int k, long a, int lda, long b, int ldb, long out,
                              int ldo, long bias, boolean accumulate) {
        Optional<Primitive> p = primitive(new Shape(ta, tb, m, n, k, lda, ldb, ldo, bias != 0, accumulate));
        if (p.isEmpty()) return false;
        p.get().run(a, b, out, bias);
        return true;
    }

    /** The primitive for tiles of shape {@code s}, made on first use; empty where none runs it. */
    private static Optional<Primitive> primitive(Shape s) {
        return PRIMITIVES.computeIfAbsent(s, DnnlMatmul::make);
    }

    /** oneDNN's name for the implementation that runs tiles of shape {@code s} ("brg:avx512_core_bf16"), or null. */
    static String implementation(Shape s) {
        return primitive(s).map(p -> p.implementation).orElse(null);
    }

    /** How many tiles of shape {@code s} have run on its primitive, over the life of the process (for tests). */
    static long tilesRun(Shape s) {
        return primitive(s).map(p -> p.tilesRun.sum()).orElse(0L);
    }

    private static synchronized long engine() {
        if (engine == 0) {
            long[] e = new long[1];
            Dnnl.check(Dnnl.dnnl_engine_create(e, CPU, 0), "dnnl_engine_create");
            engine = e[0];
        }
        return engine;
    }

    /** The primitive for tiles of shape {@code s}, or empty where oneDNN has none but its reference loops. */
    private static Optional<Primitive> make(Shape s) {
        long[] out = new long[1];
        long[] mds = new long[4];                           // A, B, the result, the bias (0 when none)
        long attr = 0, postOps = 0, pd = 0;
        Primitive made = null;
        try {
            mds[0] = md(s.m, s.k, BF16, s.ta ? 1 : s.lda, s.ta ? s.lda : 1);
            mds[1] = md(s.k, s.n, BF16, s.tb ? 1 : s.ldb, s.tb ? s.ldb : 1);
            mds[2] = md(s.m, s.n, BF16, s.ldo, 1);
            if (s.bias) mds[3] = md(1, s.n, F32, s.n, 1);
            Dnnl.check(Dnnl.dnnl_primitive_attr_create(out), "dnnl_primitive_attr_create");
            attr = out[0];
            Dnnl.check(Dnnl.dnnl_primitive_attr_set_scratchpad_mode(attr, SCRATCHPAD_USER),
                    "dnnl_primitive_attr_set_scratchpad_mode");
            if (s.accumulate) {
                Dnnl.check(Dnnl.dnnl_post_ops_create(out), "dnnl_post_ops_create");
                postOps = out[0];
                Dnnl.check(Dnnl.dnnl_post_ops_append_sum(postOps, 1f, 0, 0), "dnnl_post_ops_append_sum");
                Dnnl.check(Dnnl.dnnl_primitive_attr_set_post_ops(attr, postOps), "dnnl_primitive_attr_set_post_ops");
            }
            Dnnl.check(Dnnl.dnnl_matmul_primitive_desc_create(out, engine(), mds[0], mds[1], mds[3], mds[2], attr),
                    "dnnl_matmul_primitive_desc_create");
            pd = out[0];
            Dnnl.check(Dnnl.dnnl_primitive_desc_query(pd, QUERY_IMPL, 0, out), "dnnl_primitive_desc_query");
            String impl = out[0] == 0 ? "?" : new Pointer(out[0]).getString(0);
            if (impl.startsWith("ref")) {                   // oneDNN's reference loops: far slower than the GEMM
                LOG.debug("oneDNN's matmul primitive for {} is its reference implementation ({}): the GEMM runs it", s,
                        impl);
                return Optional.empty();
            }
            Dnnl.check(Dnnl.dnnl_primitive_create(out, pd), "dnnl_primitive_create");
            made = new Primitive(out[0], pd, mds, impl);
            return Optional.of(made);
        } catch (RuntimeException e) {
            LOG.debug("no oneDNN matmul primitive for {}: the GEMM runs it", s, e);
            return Optional.empty();
        } finally {
            if (postOps != 0) Dnnl.dnnl_post_ops_destroy(postOps);
            if (attr != 0) Dnnl.dnnl_primitive_attr_destroy(attr);
            if (made == null) {
                if (pd != 0) Dnnl.dnnl_primitive_desc_destroy(pd);
                for (long md : mds) if (md != 0) Dnnl.dnnl_memory_desc_destroy(md);
            }
        }
    }

    /** A 2-D memory descriptor of rows x cols with the given strides. */
    private static long md(int rows, int cols, int type, long rowStride, long colStride) {
        long[] out = new long[1];
        Dnnl.check(Dnnl.dnnl_memory_desc_create_with_strides(out, 2, new long[] {rows, cols}, type,
                new long[] {rowStride, colStride}), "dnnl_memory_desc_create_with_strides");
        return out[0];
    }

    /** One shape's primitive (kept for the life of the process: a model has a few dozen tile shapes). */
    private static final class Primitive {
        final long primitive;
        final long pd;
        /** Memory descriptors of A, B, the result and the bias (0 when none). */
        final long[] mds;
        final String implementation;
        final ConcurrentLinkedQueue<Context> idle = new ConcurrentLinkedQueue<>();
        final LongAdder tilesRun = new LongAdder();

        Primitive(long primitive, long pd, long[] mds, String implementation) {
            this.primitive = primitive;
            this.pd = pd;
            this.mds = mds;
            this.implementation = implementation;
        }

        void run(long a, long b, long out, long bias) {
            Context c = idle.poll();
            if (c == null) c = new Context(this);
            try {
                Dnnl.check(Dnnl.dnnl_memory_set_data_handle(c.a, a), "dnnl_memory_set_data_handle");
                Dnnl.check(Dnnl.dnnl_memory_set_data_handle(c.b, b), "dnnl_memory_set_data_handle");
                Dnnl.check(Dnnl.dnnl_memory_set_data_handle(c.out, out), "dnnl_memory_set_data_handle");
                if (c.bias != 0) Dnnl.check(Dnnl.dnnl_memory_set_data_handle(c.bias, bias), "dnnl_memory_set_data_handle");
                Dnnl.check(Dnnl.dnnl_primitive_execute(primitive, c.stream, c.nargs, Pointer.nativeValue(c.args)),
                        "dnnl_primitive_execute (matmul)");
                Dnnl.check(Dnnl.dnnl_stream_wait(c.stream), "dnnl_stream_wait");
                tilesRun.increment();
            } finally {
                idle.add(c);
            }
        }
    }

    /** What one run at a time needs: a stream, memory objects whose data handles each run sets, a scratchpad. */
    private static final class Context {
        final long stream, a, b, out, bias, scratchpad;
        final Memory args = new Memory(5 * 16);
        final int nargs;

        Context(Primitive p) {
            long e = engine();
            long[] h = new long[1];
            Dnnl.check(Dnnl.dnnl_stream_create(h, e, IN_ORDER), "dnnl_stream_create");
            stream = h[0];
            a = memory(p.mds[0], e, 0);
            b = memory(p.mds[1], e, 0);
            out = memory(p.mds[2], e, 0);
            bias = p.mds[3] == 0 ? 0 : memory(p.mds[3], e, 0);
            long spMd = Dnnl.dnnl_primitive_desc_query_md(p.pd, QUERY_SCRATCHPAD_MD, 0);
            scratchpad = spMd == 0 || Dnnl.dnnl_memory_desc_get_size(spMd) == 0 ? 0 : memory(spMd, e, ALLOCATE);
            int n = 0;
            n = arg(n, ARG_SRC, a);
            n = arg(n, ARG_WEIGHTS, b);
            n = arg(n, ARG_DST, out);
            if (bias != 0) n = arg(n, ARG_BIAS, bias);
            if (scratchpad != 0) n = arg(n, ARG_SCRATCHPAD, scratchpad);
            nargs = n;
        }

        private int arg(int i, int what, long memory) {
            args.setInt(16L * i, what);
            args.setLong(16L * i + 8, memory);
            return i + 1;
        }

        private static long memory(long md, long engine, long handle) {
            long[] m = new long[1];
            Dnnl.check(Dnnl.dnnl_memory_create(m, md, engine, handle), "dnnl_memory_create");
            return m[0];
        }
    }
}
