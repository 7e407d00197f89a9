package dev.ttpipe.actors.telemetry;

import com.google.protobuf.ByteString;
import com.google.protobuf.CodedOutputStream;

import java.io.Closeable;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Map;
import java.util.zip.CRC32C;

/**
 * A TensorBoard event file ({@code events.out.tfevents.<seconds>.<host>}) in a run's {@code tensorboard/} folder:
 * TFRecords (length, masked CRC-32C of the length, an {@code Event} protocol buffer, its masked CRC-32C), each
 * event a {@code Summary} of scalar values at one step, encoded with protobuf-java. A stock TensorBoard reads
 * the folder ({@code tensorboard --logdir RUN/tensorboard}). A recovery writes a {@code SessionLog START} at the
 * step it went back to, so TensorBoard drops the superseded points of the steps redone; a resume appends a new
 * file to the same folder.
 *
 * <p>Message and field numbers are TensorBoard's {@code event.proto} and {@code summary.proto}:
 * {@code Event{wall_time=1 double, step=2 int64, file_version=3, summary=5, session_log=7}},
 * {@code Summary{value=1 repeated}}, {@code Summary.Value{tag=1, simple_value=2 float}},
 * {@code SessionLog{status=1 (START=1), msg=3}}.
 */
public final class TensorBoardEvents implements Closeable {
    static final String FILE_VERSION = "brain.Event:2";
    private static final int EVENT_WALL_TIME = 1, EVENT_STEP = 2, EVENT_FILE_VERSION = 3, EVENT_SUMMARY = 5, EVENT_SESSION_LOG = 7;
    private static final int SUMMARY_VALUE = 1, VALUE_TAG = 1, VALUE_SIMPLE_VALUE = 2;
    private static final int SESSION_LOG_STATUS = 1, SESSION_LOG_MSG = 3, SESSION_LOG_START = 1;

    private final Path file;
    private final OutputStream out;

    private TensorBoardEvents(Path file, OutputStream out) {
        this.file = file;
        this.out = out;
    }

    /** A new event file in {@code dir} (made if missing), begun with its version record. */
    public static TensorBoardEvents open(Path dir) throws IOException {
        Files.createDirectories(dir);
        long now = System.currentTimeMillis();
        String host;
        try {
            host = InetAddress.getLocalHost().getHostName();
        } catch (IOException e) {
            host = "localhost";
        }
        Path file = dir.resolve("events.out.tfevents." + now / 1000 + "." + host + "." + ProcessHandle.current().pid());
        TensorBoardEvents events = new TensorBoardEvents(file, Files.newOutputStream(file, StandardOpenOption.CREATE_NEW));
        events.record(event(now / 1e3, 0, EVENT_FILE_VERSION, ByteString.copyFromUtf8(FILE_VERSION)));
        events.out.flush();
        return events;
    }

    public Path file() {
        return file;
    }

    /** The scalars of one step (tag to value; non-finite values are written as they are: TensorBoard draws them as gaps). */
    public void scalars(int step, Map<String, Double> values) throws IOException {
        ByteString.Output summary = ByteString.newOutput();
        CodedOutputStream s = CodedOutputStream.newInstance(summary);
        for (Map.Entry<String, Double> v : values.entrySet()) {
            ByteString.Output value = ByteString.newOutput();
            CodedOutputStream c = CodedOutputStream.newInstance(value);
            c.writeString(VALUE_TAG, v.getKey());
            c.writeFloat(VALUE_SIMPLE_VALUE, v.getValue().floatValue());
            c.flush();
            s.writeBytes(SUMMARY_VALUE, value.toByteString());
        }
        s.flush();
        record(event(System.currentTimeMillis() / 1e3, step, EVENT_SUMMARY, summary.toByteString()));
        out.flush();
    }

    /** A restart at {@code step}: TensorBoard drops every point at this step or later written before it. */
    public void restartedAt(int step, String why) throws IOException {
        ByteString.Output log = ByteString.newOutput();
        CodedOutputStream c = CodedOutputStream.newInstance(log);
        c.writeEnum(SESSION_LOG_STATUS, SESSION_LOG_START);
        c.writeString(SESSION_LOG_MSG, why);
        c.flush();
        record(event(System.currentTimeMillis() / 1e3, step, EVENT_SESSION_LOG, log.toByteString()));
        out.flush();
    }

    private static ByteString event(double wallTime, long step, int field, ByteString payload) throws IOException {
        ByteString.Output event = ByteString.newOutput();
        CodedOutputStream c = CodedOutputStream.newInstance(event);
        c.writeDouble(EVENT_WALL_TIME, wallTime);
        c.writeInt64(EVENT_STEP, step);
        if (field == EVENT_FILE_VERSION) {
            c.writeString(field, payload.toStringUtf8());
        } else {
            c.writeBytes(field, payload);
        }
        c.flush();
        return event.toByteString();
    }

    /** One TFRecord: uint64 length, masked CRC-32C of those 8 bytes, the data, masked CRC-32C of the data (little-endian). */
    private void record(ByteString data) throws IOException {
        byte[] length = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(data.size()).array();
        out.write(length);
        out.write(le32(maskedCrc32c(length)));
        data.writeTo(out);
        out.write(le32(maskedCrc32c(data.toByteArray())));
    }

    /** TFRecord's CRC: CRC-32C rotated right by 15 bits plus 0xa282ead8, so a CRC of data holding CRCs stays strong. */
    static int maskedCrc32c(byte[] b) {
        CRC32C crc = new CRC32C();
        crc.update(b);
        int c = (int) crc.getValue();
        return ((c >>> 15) | (c << 17)) + 0xa282ead8;
    }

    private static byte[] le32(int v) {
        return ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(v).array();
    }

    @Override
    public void close() throws IOException {
        out.close();
    }
}
