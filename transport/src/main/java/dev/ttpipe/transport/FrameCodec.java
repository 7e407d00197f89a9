package dev.ttpipe.transport;

import dev.ttpipe.device.DType;
import dev.ttpipe.device.Layout;
import dev.ttpipe.device.MeshShape;
import dev.ttpipe.device.Placement;
import dev.ttpipe.device.Shape;
import org.agrona.DirectBuffer;
import org.agrona.MutableDirectBuffer;

import java.nio.ByteOrder;

/**
 * The header in front of every chunk of a tensor frame on an Aeron stream: a flyweight with fixed
 * offsets over a {@link DirectBuffer}, little-endian, {@value #LENGTH} bytes.
 *
 * <p>Why a hand-written flyweight and not Kryo (which the design card names for control messages):
 * the header is fixed-size and written once per chunk on the sender's hot path and read once per
 * chunk on the receive thread; a flyweight reads and writes it in place in Aeron's term buffer with
 * no allocation, no registration and no reflection, and its layout is the documentation of the wire
 * format below. Kryo stays for Pekko control messages, where shapes vary and speed does not matter.
 *
 * <pre>
 *   0  int    magic 'TTPF'              60  byte   kind (TensorKind ordinal)
 *   4  short  version                   61  byte   dtype (DType ordinal)
 *   6  short  header length             62  byte   placement on mesh axis 0: 0 R, 1 S, 2 P
 *   8  long   job id          -+        63  byte   its shard dim (-1 unless S)
 *  16  long   frame sequence   |        64  byte   placement on mesh axis 1
 *  24  long   payload length   |        65  byte   its shard dim
 *  32  int    from rank        | same   66  byte   shape rank (0..8)
 *  36  int    to rank          | in     67  byte   reserved
 *  40  int    pass             | every  68  short  sender's submesh rows
 *  44  int    from stage       | chunk  70  short  sender's submesh cols
 *  48  int    to stage         | of a   72  int[8] dims (unused ones 0)       -+
 *  52  int    microbatch       | frame 104  int    chunk index
 *  56  int    chunk count     -+       108  int    chunk length (payload bytes after this header)
 *                                      112  long   chunk offset in the payload
 *                                      120  int    CRC32C of payload bytes [0, offset + length)
 *                                      124  int    CRC32C of header bytes [0, 124)
 * </pre>
 *
 * The payload is every device's local piece of the tensor, back to back in row-major device order
 * (raw little-endian elements, see {@link dev.ttpipe.device.spi.LocalPieces}); a chunk never spans
 * two pieces. The running payload CRC in each chunk lets the receiver check as it goes; the last
 * chunk's is the whole payload's. Not thread-safe: one instance per thread.
 */
final class FrameCodec {
    static final int MAGIC = 0x46505454; // "TTPF" read as little-endian bytes
    static final short VERSION = 1;
    static final int LENGTH = 128;
    static final int MAX_RANK = 8;

    static final int MAGIC_OFFSET = 0;
    static final int VERSION_OFFSET = 4;
    static final int HEADER_LENGTH_OFFSET = 6;
    static final int JOB_ID_OFFSET = 8;
    static final int SEQUENCE_OFFSET = 16;
    static final int PAYLOAD_LENGTH_OFFSET = 24;
    static final int FROM_RANK_OFFSET = 32;
    static final int TO_RANK_OFFSET = 36;
    static final int PASS_OFFSET = 40;
    static final int FROM_STAGE_OFFSET = 44;
    static final int TO_STAGE_OFFSET = 48;
    static final int MICROBATCH_OFFSET = 52;
    static final int CHUNK_COUNT_OFFSET = 56;
    static final int KIND_OFFSET = 60;
    static final int DTYPE_OFFSET = 61;
    static final int PLACEMENT0_OFFSET = 62;
    static final int PLACEMENT1_OFFSET = 64;
    static final int RANK_OFFSET = 66;
    static final int MESH_ROWS_OFFSET = 68;
    static final int MESH_COLS_OFFSET = 70;
    static final int DIMS_OFFSET = 72;
    static final int CHUNK_INDEX_OFFSET = 104;
    static final int CHUNK_LENGTH_OFFSET = 108;
    static final int CHUNK_OFFSET_OFFSET = 112;
    static final int PAYLOAD_CRC_OFFSET = 120;
    static final int HEADER_CRC_OFFSET = 124;

    /** Bytes [FRAME_START, FRAME_END) are the same in every chunk of one frame. */
    static final int FRAME_START = JOB_ID_OFFSET;
    static final int FRAME_END = CHUNK_INDEX_OFFSET;

    private static final ByteOrder LE = ByteOrder.LITTLE_ENDIAN;
    private static final byte REPLICATE = 0, SHARD = 1, PARTIAL = 2;

    private MutableDirectBuffer out;
    private DirectBuffer in;
    private int at;

    /** Writes into {@code buffer} at {@code offset}. */
    FrameCodec wrapForEncode(MutableDirectBuffer buffer, int offset) {
        this.out = buffer;
        this.in = buffer;
        this.at = offset;
        return this;
    }

    /** Reads from {@code buffer} at {@code offset}. */
    FrameCodec wrapForDecode(DirectBuffer buffer, int offset) {
        this.out = null;
        this.in = buffer;
        this.at = offset;
        return this;
    }

    // ---- encoding -----------------------------------------------------------------------------------

    /** Writes the frame part (everything but the chunk fields and CRCs). */
    void encodeFrame(long jobId, long sequence, int fromRank, int toRank, FrameHeader h, DType dtype, Shape shape,
                     Layout layout, MeshShape mesh, long payloadLength, int chunkCount) {
        out.putInt(at + MAGIC_OFFSET, MAGIC, LE);
        out.putShort(at + VERSION_OFFSET, VERSION, LE);
        out.putShort(at + HEADER_LENGTH_OFFSET, (short) LENGTH, LE);
        out.putLong(at + JOB_ID_OFFSET, jobId, LE);
        out.putLong(at + SEQUENCE_OFFSET, sequence, LE);
        out.putLong(at + PAYLOAD_LENGTH_OFFSET, payloadLength, LE);
        out.putInt(at + FROM_RANK_OFFSET, fromRank, LE);
        out.putInt(at + TO_RANK_OFFSET, toRank, LE);
        out.putInt(at + PASS_OFFSET, h.pass(), LE);
        out.putInt(at + FROM_STAGE_OFFSET, h.fromStage(), LE);
        out.putInt(at + TO_STAGE_OFFSET, h.toStage(), LE);
        out.putInt(at + MICROBATCH_OFFSET, h.microbatch(), LE);
        out.putInt(at + CHUNK_COUNT_OFFSET, chunkCount, LE);
        out.putByte(at + KIND_OFFSET, (byte) h.kind().ordinal());
        out.putByte(at + DTYPE_OFFSET, (byte) dtype.ordinal());
        putPlacement(PLACEMENT0_OFFSET, layout.axis0());
        putPlacement(PLACEMENT1_OFFSET, layout.axis1());
        out.putByte(at + RANK_OFFSET, (byte) shape.rank());
        out.putByte(at + RANK_OFFSET + 1, (byte) 0);
        out.putShort(at + MESH_ROWS_OFFSET, (short) mesh.rows(), LE);
        out.putShort(at + MESH_COLS_OFFSET, (short) mesh.cols(), LE);
        for (int i = 0; i < MAX_RANK; i++) out.putInt(at + DIMS_OFFSET + 4 * i, i < shape.rank() ? shape.dim(i) : 0, LE);
    }

    private void putPlacement(int offset, Placement p) {
        byte kind = p instanceof Placement.Shard ? SHARD : p instanceof Placement.Partial ? PARTIAL : REPLICATE;
        out.putByte(at + offset, kind);
        out.putByte(at + offset + 1, (byte) (p instanceof Placement.Shard s ? s.dim() : -1));
    }

    /** Writes the chunk fields; call {@link #sealHeader} after. */
    void encodeChunk(int index, long offset, int length, int payloadCrc) {
        out.putInt(at + CHUNK_INDEX_OFFSET, index, LE);
        out.putInt(at + CHUNK_LENGTH_OFFSET, length, LE);
        out.putLong(at + CHUNK_OFFSET_OFFSET, offset, LE);
        out.putInt(at + PAYLOAD_CRC_OFFSET, payloadCrc, LE);
    }

    /** Writes the header CRC given the CRC32C of bytes [0, HEADER_CRC_OFFSET). */
    void encodeHeaderCrc(int crc) {
        out.putInt(at + HEADER_CRC_OFFSET, crc, LE);
    }

    // ---- decoding -----------------------------------------------------------------------------------

    int magic() {
        return in.getInt(at + MAGIC_OFFSET, LE);
    }

    int version() {
        return in.getShort(at + VERSION_OFFSET, LE);
    }

    int headerLength() {
        return in.getShort(at + HEADER_LENGTH_OFFSET, LE);
    }

    long jobId() {
        return in.getLong(at + JOB_ID_OFFSET, LE);
    }

    long sequence() {
        return in.getLong(at + SEQUENCE_OFFSET, LE);
    }

    long payloadLength() {
        return in.getLong(at + PAYLOAD_LENGTH_OFFSET, LE);
    }

    int fromRank() {
        return in.getInt(at + FROM_RANK_OFFSET, LE);
    }

    int toRank() {
        return in.getInt(at + TO_RANK_OFFSET, LE);
    }

    int pass() {
        return in.getInt(at + PASS_OFFSET, LE);
    }

    int fromStage() {
        return in.getInt(at + FROM_STAGE_OFFSET, LE);
    }

    int toStage() {
        return in.getInt(at + TO_STAGE_OFFSET, LE);
    }

    int microbatch() {
        return in.getInt(at + MICROBATCH_OFFSET, LE);
    }

    int chunkCount() {
        return in.getInt(at + CHUNK_COUNT_OFFSET, LE);
    }

    int kindCode() {
        return in.getByte(at + KIND_OFFSET);
    }

    int dtypeCode() {
        return in.getByte(at + DTYPE_OFFSET);
    }

    /** 0 R, 1 S, 2 P on mesh axis {@code axis}. */
    int placementCode(int axis) {
        return in.getByte(at + (axis == 0 ? PLACEMENT0_OFFSET : PLACEMENT1_OFFSET));
    }

    int shardDim(int axis) {
        return in.getByte(at + (axis == 0 ? PLACEMENT0_OFFSET : PLACEMENT1_OFFSET) + 1);
    }

    int rank() {
        return in.getByte(at + RANK_OFFSET);
    }

    int meshRows() {
        return in.getShort(at + MESH_ROWS_OFFSET, LE);
    }

    int meshCols() {
        return in.getShort(at + MESH_COLS_OFFSET, LE);
    }

    int dim(int i) {
        return in.getInt(at + DIMS_OFFSET + 4 * i, LE);
    }

    int chunkIndex() {
        return in.getInt(at + CHUNK_INDEX_OFFSET, LE);
    }

    int chunkLength() {
        return in.getInt(at + CHUNK_LENGTH_OFFSET, LE);
    }

    long chunkOffset() {
        return in.getLong(at + CHUNK_OFFSET_OFFSET, LE);
    }

    int payloadCrc() {
        return in.getInt(at + PAYLOAD_CRC_OFFSET, LE);
    }

    int headerCrc() {
        return in.getInt(at + HEADER_CRC_OFFSET, LE);
    }

    /** The placement on {@code axis}; codes were checked by the caller. */
    Placement placement(int axis) {
        return switch (placementCode(axis)) {
            case SHARD -> Placement.shard(shardDim(axis));
            case PARTIAL -> Placement.PARTIAL;
            default -> Placement.REPLICATE;
        };
    }

    /** Whether the placement code on {@code axis} is one this version writes. */
    boolean validPlacement(int axis) {
        int code = placementCode(axis);
        return code == REPLICATE || code == PARTIAL || (code == SHARD && shardDim(axis) >= 0 && shardDim(axis) < rank());
    }
}
