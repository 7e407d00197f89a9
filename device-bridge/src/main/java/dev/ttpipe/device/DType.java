package dev.ttpipe.device;

/** Element types a tensor can be stored in. Compute is fp32; bf16 is a storage format. */
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
