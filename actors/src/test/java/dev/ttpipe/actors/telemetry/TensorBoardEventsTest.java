package dev.ttpipe.actors.telemetry;

import com.google.protobuf.CodedInputStream;
import com.google.protobuf.WireFormat;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * TensorBoard event files read back as TensorBoard reads them: every TFRecord's length and data checked against
 * their masked CRC-32C, every record an {@code Event} whose fields decode by TensorBoard's field numbers
 * ({@code TensorBoardCliTest}: a real run's).
 */
public class TensorBoardEventsTest {
    /** One decoded Event: its step, and either the file version, a restart, or the scalars. */
    public record Event(double wallTime, long step, String fileVersion, boolean restart, Map<String, Float> scalars) {
    }

    public static List<Event> read(Path file) throws IOException {
        ByteBuffer b = ByteBuffer.wrap(Files.readAllBytes(file)).order(ByteOrder.LITTLE_ENDIAN);
        List<Event> out = new ArrayList<>();
        while (b.hasRemaining()) {
            byte[] len = new byte[8];
            b.get(len);
            assertEquals(maskedCrc(len), b.getInt(), "the length's CRC at record " + out.size());
            byte[] data = new byte[(int) ByteBuffer.wrap(len).order(ByteOrder.LITTLE_ENDIAN).getLong()];
            b.get(data);
            assertEquals(maskedCrc(data), b.getInt(), "the data's CRC at record " + out.size());
            out.add(event(data));
        }
        return out;
    }

    /** CRC-32C by its definition (reflected polynomial 0x82F63B78), masked as TFRecord does. */
    static int maskedCrc(byte[] data) {
        int crc = ~0;
        for (byte x : data) {
            crc ^= x & 0xff;
            for (int k = 0; k < 8; k++) crc = (crc >>> 1) ^ (0x82F63B78 & -(crc & 1));
        }
        crc = ~crc;
        return ((crc >>> 15) | (crc << 17)) + 0xa282ead8;
    }

    private static Event event(byte[] data) throws IOException {
        CodedInputStream in = CodedInputStream.newInstance(data);
        double wall = 0;
        long step = 0;
        String version = null;
        boolean restart = false;
        Map<String, Float> scalars = new LinkedHashMap<>();
        for (int tag; (tag = in.readTag()) != 0; ) {
            switch (WireFormat.getTagFieldNumber(tag)) {
                case 1 -> wall = in.readDouble();
                case 2 -> step = in.readInt64();
                case 3 -> version = in.readString();
                case 5 -> {
                    CodedInputStream summary = in.readBytes().newCodedInput();
                    for (int t; (t = summary.readTag()) != 0; ) {
                        assertEquals(1, WireFormat.getTagFieldNumber(t), "Summary.value");
                        CodedInputStream value = summary.readBytes().newCodedInput();
                        String name = null;
                        float v = Float.NaN;
                        for (int u; (u = value.readTag()) != 0; ) {
                            if (WireFormat.getTagFieldNumber(u) == 1) name = value.readString();
                            else if (WireFormat.getTagFieldNumber(u) == 2) v = value.readFloat();
                            else throw new AssertionError("unexpected Summary.Value field " + WireFormat.getTagFieldNumber(u));
                        }
                        scalars.put(name, v);
                    }
                }
                case 7 -> {
                    CodedInputStream log = in.readBytes().newCodedInput();
                    for (int t; (t = log.readTag()) != 0; ) {
                        if (WireFormat.getTagFieldNumber(t) == 1) restart = log.readEnum() == 1;
                        else log.skipField(t);
                    }
                }
                default -> throw new AssertionError("unexpected Event field " + WireFormat.getTagFieldNumber(tag));
            }
        }
        return new Event(wall, step, version, restart, scalars);
    }

    @Test
    void theMaskedCrcIsCrc32cAsTfRecordMasksIt() {
        // CRC-32C's check value: 0xE3069283 for "123456789"
        int crc = 0xE3069283;
        assertEquals(((crc >>> 15) | (crc << 17)) + 0xa282ead8, maskedCrc("123456789".getBytes(StandardCharsets.US_ASCII)));
        byte[] some = "brain.Event:2 and more".getBytes(StandardCharsets.UTF_8);
        assertEquals(maskedCrc(some), TensorBoardEvents.maskedCrc32c(some));
    }

    @Test
    void eventsReadBackWithTheirStepsScalarsAndRestarts(@TempDir Path dir) throws IOException {
        Path file;
        try (TensorBoardEvents tb = TensorBoardEvents.open(dir)) {
            file = tb.file();
            tb.scalars(1, Map.of("train/loss", 2.5));
            tb.scalars(2, new LinkedHashMap<>(Map.of("train/loss", 2.25, "val/loss", 2.75)));
            tb.restartedAt(2, "recovery");
            tb.scalars(2, Map.of("train/loss", 2.125));
        }
        assertTrue(file.getFileName().toString().startsWith("events.out.tfevents."), file.toString());
        List<Event> events = read(file);
        assertEquals(5, events.size(), events.toString());
        assertEquals("brain.Event:2", events.get(0).fileVersion());
        assertTrue(events.get(0).wallTime() > 1.7e9, "seconds since the epoch");
        assertEquals(1, events.get(1).step());
        assertEquals(Map.of("train/loss", 2.5f), events.get(1).scalars());
        assertEquals(Map.of("train/loss", 2.25f, "val/loss", 2.75f), events.get(2).scalars());
        assertTrue(events.get(3).restart() && events.get(3).step() == 2, events.get(3).toString());
        assertEquals(Map.of("train/loss", 2.125f), events.get(4).scalars());
    }
}
