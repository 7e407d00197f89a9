package dev.ttpipe.device.spi;

import dev.ttpipe.device.DeviceOutOfMemoryException;
import dev.ttpipe.device.MemoryStats;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class DeviceMemoryTest {
    @Test
    void tracksInUseAndPeak() {
        DeviceMemory m = new DeviceMemory("dev 0", 100);
        m.allocate(60);
        m.free(20);
        m.allocate(30);
        assertEquals(new MemoryStats(70, 70, 100), m.stats());
        m.free(50);
        assertEquals(new MemoryStats(20, 70, 100), m.stats());
        m.resetPeak();
        assertEquals(20, m.stats().peak());
    }

    @Test
    void refusesPastCapacityAndChangesNothing() {
        DeviceMemory m = new DeviceMemory("cpu device 3 (0, 3)", 100);
        m.allocate(90);
        DeviceOutOfMemoryException e = assertThrows(DeviceOutOfMemoryException.class, () -> m.allocate(11));
        assertEquals("cpu device 3 (0, 3): out of memory: cannot allocate 11 bytes with 90 bytes in use of 100 (10 free)",
                e.getMessage());
        assertEquals(new MemoryStats(90, 90, 100), m.stats());
        m.allocate(10);
        assertEquals(100, m.inUse());
    }

    @Test
    void allocateAllIsAllOrNothing() {
        DeviceMemory a = new DeviceMemory("a", 100);
        DeviceMemory b = new DeviceMemory("b", 50);
        DeviceMemory c = new DeviceMemory("c", 100);
        DeviceOutOfMemoryException e = assertThrows(DeviceOutOfMemoryException.class,
                () -> DeviceMemory.allocateAll(List.of(a, b, c), 60));
        assertTrue(e.getMessage().startsWith("b:"), e.getMessage());
        assertEquals(0, a.inUse() + b.inUse() + c.inUse());
        assertEquals(0, a.stats().peak(), "the refunded charge leaves the high-water mark as it was");
    }
}
