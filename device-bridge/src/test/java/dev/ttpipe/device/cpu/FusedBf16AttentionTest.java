package dev.ttpipe.device.cpu;

import dev.ttpipe.device.BFloat16;
import dev.ttpipe.device.DeviceException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The fused native bf16 attention of ttpipe's own GEMM engines ({@code ttpipe_cpu_attention_forward_bf16} and
 * {@code _backward_bf16}: K and V packed once a (batch, head) pair, outputs rounded by the kernel) against the tile path
 * it replaces (one engine call per block product, the row kernels and roundings between them): the same bits of o, the
 * log-sum-exp, dq, dk and dv. The shapes reach the edges: causal and not, fewer and more keys than queries, rows that
 * see no key, more than one block of 384 keys, and blocks with an odd number of keys short of all of them (where the dot
 * engine's packed V and K cannot be reused and are packed again).
 */
class FusedBf16AttentionTest {
    private static Parallel par;
    private static Gemm blas;

    @BeforeAll
    static void kernels() {
        par = new Parallel(2);
        blas = BlasGemm.tryLoad(par);
    }

    @AfterAll
    static void close() {
        par.close();
    }

    @ParameterizedTest(name = "{0}: causal={1} T={2} Tk={3} hd={4}")
    @CsvSource({"fma,true,256,256,64", "dot,true,256,256,64", "fma,true,67,67,24", "dot,true,67,67,24",
            "fma,false,45,131,40", "dot,false,45,131,40", "fma,true,131,45,16", "dot,true,131,45,16",
            "fma,true,130,131,24", "dot,true,130,131,24", "fma,true,150,20,8", "dot,true,150,20,8",
            "fma,false,40,400,16", "dot,false,40,400,16", "fma,true,70,397,8", "dot,true,70,397,8"})
    void givesTheBitsOfTheTilePath(String engine, boolean causal, int t, int tk, int hd) {
        Bf16Gemm gemm = engine(engine);
        if (gemm == null) return;
        assertEquals(engine.equals("dot") ? 1 : 0, gemm.ownEngine());
        int n = 5;
        float scale = (float) (1 / Math.sqrt(hd));
        Random rnd = new Random(31L * t + tk + hd);
        List<NativeBuffer> all = new ArrayList<>();
        try {
            NativeBuffer q = bf16(all, rnd, n * t * hd), k = bf16(all, rnd, n * tk * hd), v = bf16(all, rnd, n * tk * hd);
            NativeBuffer dO = bf16(all, rnd, n * t * hd);
            NativeBuffer[] tiles = outputs(all, n, t, tk, hd), fused = outputs(all, n, t, tk, hd);
            for (boolean fuse : new boolean[]{false, true}) {
                NativeBuffer[] out = fuse ? fused : tiles;
                FlashAttention.forwardBf16(par, gemm, out[0], out[1], q, k, v, n, t, tk, hd, scale, causal, fuse);
                FlashAttention.backwardBf16(par, gemm, out[2], out[3], out[4], q, k, v, out[0], out[1], dO, n, t, tk, hd,
                        scale, causal, fuse);
            }
            String[] names = {"o", "log-sum-exp", "dq", "dk", "dv"};
            int[] sizes = {n * t * hd, n * t, n * t * hd, n * tk * hd, n * tk * hd};
            for (int o = 0; o < names.length; o++) {
                int nonzero = 0;
                for (int i = 0; i < sizes[o]; i++) {
                    int a = o == 1 ? tiles[o].ints.get(i) : tiles[o].shorts.get(i);
                    int b = o == 1 ? fused[o].ints.get(i) : fused[o].shorts.get(i);
                    if (a != b) {
                        float x = o == 1 ? Float.intBitsToFloat(a) : BFloat16.toFloat((short) a);
                        float y = o == 1 ? Float.intBitsToFloat(b) : BFloat16.toFloat((short) b);
                        throw new AssertionError(names[o] + " element " + i + ": the tile path gives " + x + ", fused " + y);
                    }
                    if (a != 0 && o != 1) nonzero++;
                }
                if (o != 1) assertTrue(nonzero > sizes[o] / 20, names[o] + ": " + nonzero + " of " + sizes[o] + " nonzero");
            }
        } finally {
            all.forEach(NativeBuffer::free);
        }
    }

    /**
     * A block that sees an odd number of keys, short of all of them, reads no key past its last: with an infinity in the
     * key just past block 0's 65 (T 130, Tk 131, causal), block 0's rows of o stay finite, as the tile path has them. The
     * dot engine packs keys in pairs, so its panel of all the keys holds that infinity beside block 0's last key.
     */
    @ParameterizedTest(name = "{0}")
    @CsvSource({"fma", "dot"})
    void aBlockReadsNoKeyPastItsLast(String engine) {
        Bf16Gemm gemm = engine(engine);
        if (gemm == null) return;
        int n = 1, t = 130, tk = 131, hd = 16;
        Random rnd = new Random(5);
        List<NativeBuffer> all = new ArrayList<>();
        try {
            NativeBuffer q = bf16(all, rnd, n * t * hd), k = bf16(all, rnd, n * tk * hd), v = bf16(all, rnd, n * tk * hd);
            for (int e = 0; e < hd; e++) v.shorts.put(65 * hd + e, BFloat16.fromFloat(Float.POSITIVE_INFINITY));
            NativeBuffer[] out = outputs(all, n, t, tk, hd);
            FlashAttention.forwardBf16(par, gemm, out[0], out[1], q, k, v, n, t, tk, hd, 0.25f, true, true);
            for (int i = 0; i < FlashAttention.BLOCK * hd; i++) {
                float x = BFloat16.toFloat(out[0].shorts.get(i));
                assertTrue(Float.isFinite(x), "o element " + i + " of block 0 is " + x);
            }
        } finally {
            all.forEach(NativeBuffer::free);
        }
    }

    /** The engine asked for by name; null, after checking that asking for it is refused, where it does not run here. */
    private static Bf16Gemm engine(String engine) {
        Assumptions.assumeTrue(CpuNative.active(), "the native kernels do not load here: " + CpuNative.describe());
        Assumptions.assumeTrue(blas != null, "OpenBLAS does not load here");
        boolean runs = engine.equals("fma") ? Bf16Gemm.fmaKernel() != null : MachinePeak.hasBf16Dot() && Bf16Gemm.dotKernel();
        if (runs) return Bf16Gemm.choose(blas, par, Map.of("TTPIPE_BF16_GEMM", engine)::get);
        assertThrows(DeviceException.class, () -> Bf16Gemm.choose(blas, par, Map.of("TTPIPE_BF16_GEMM", engine)::get));
        return null;
    }

    /** o, lse, dq, dk, dv, filled with a pattern the passes must overwrite. */
    private static NativeBuffer[] outputs(List<NativeBuffer> all, int n, int t, int tk, int hd) {
        int[] bytes = {2 * n * t * hd, 4 * n * t, 2 * n * t * hd, 2 * n * tk * hd, 2 * n * tk * hd};
        NativeBuffer[] out = new NativeBuffer[bytes.length];
        for (int i = 0; i < out.length; i++) {
            out[i] = NativeBuffer.malloc(bytes[i]);
            all.add(out[i]);
            for (int j = 0; j < bytes[i]; j++) out[i].bytes.put(j, (byte) 0x7f);
        }
        return out;
    }

    private static NativeBuffer bf16(List<NativeBuffer> all, Random rnd, int count) {
        NativeBuffer b = NativeBuffer.malloc(2 * count);
        all.add(b);
        for (int i = 0; i < count; i++) b.shorts.put(i, BFloat16.fromFloat((float) rnd.nextGaussian()));
        return b;
    }
}
