package dev.ttpipe.device;

/**
 * Element types a tensor can be stored in. Kernels compute in fp32 and round a BF16 result once, when
 * it is stored; a matmul with a BF16 operand multiplies in bf16 (an FP32 operand is rounded to bf16)
 * and sums the products in fp32, as a Tenstorrent device does.
 */
public enum DType {
    FP32(4),
    /** bfloat16 storage: the upper 16 bits of an fp32, converted with round-to-nearest-even. */
    BF16(2),
    /** Token ids and other indices. */
    INT32(4);

    private final int bytes;

    DType(int bytes) {
        this.bytes = bytes;
    }

    public int bytes() {
        return bytes;
    }
}
