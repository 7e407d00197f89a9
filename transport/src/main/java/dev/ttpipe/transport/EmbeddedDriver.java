package dev.ttpipe.transport;

import io.aeron.driver.MediaDriver;
import io.aeron.driver.ThreadingMode;
import org.agrona.CloseHelper;
import org.agrona.IoUtil;
import org.agrona.concurrent.BackoffIdleStrategy;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.ThreadFactory;

/**
 * This process's Aeron media driver, embedded, in a directory of its own that is deleted at start
 * and at close. One thread for conductor, sender and receiver ({@link ThreadingMode#SHARED}): IPC
 * needs almost nothing of the driver, and a host with few cores needs them for compute.
 */
final class EmbeddedDriver implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(EmbeddedDriver.class);
    /** Kernel socket buffers and flow-control window for UDP (capped by net.core.rmem_max / wmem_max). */
    static final int UDP_SOCKET_BUFFER = 2 << 20;
    /** Aeron's own client and image liveness timeouts. */
    static final Duration DEFAULT_PATIENCE = Duration.ofSeconds(10);

    static final ThreadFactory DAEMONS = r -> {
        Thread t = new Thread(r);
        t.setDaemon(true);
        return t;
    };

    private final MediaDriver driver;
    private final Path directory;

    private EmbeddedDriver(MediaDriver driver, Path directory) {
        this.driver = driver;
        this.directory = directory;
    }

    /**
     * {@code patience}: how long the driver keeps a client, or a peer's image, that has gone silent (this process
     * paused by a long GC or SIGSTOP, a peer that is): Aeron's 10 s by default, longer for a job that waits out a
     * rank's silence. A claimed but uncommitted block is unblocked a little later still.
     */
    static EmbeddedDriver launch(Path directory, int termLength, int ipcMtu, int udpMtu, Duration patience) {
        long patienceNs = Math.max(patience.toNanos(), DEFAULT_PATIENCE.toNanos());
        MediaDriver.Context ctx = new MediaDriver.Context();
        ctx.aeronDirectoryName(directory.toString());
        ctx.dirDeleteOnStart(true)
                .dirDeleteOnShutdown(true)
                .warnIfDirectoryExists(false)
                .threadingMode(ThreadingMode.SHARED)
                .sharedIdleStrategy(new BackoffIdleStrategy(10, 20, 1_000, 1_000_000))
                .sharedThreadFactory(DAEMONS)
                .conductorThreadFactory(DAEMONS)
                .senderThreadFactory(DAEMONS)
                .receiverThreadFactory(DAEMONS)
                .sharedNetworkThreadFactory(DAEMONS)
                .asyncExecutorThreadFactory(DAEMONS)
                .ipcTermBufferLength(termLength)
                .publicationTermBufferLength(termLength)
                .ipcMtuLength(ipcMtu)
                .mtuLength(udpMtu)
                .socketRcvbufLength(UDP_SOCKET_BUFFER)
                .socketSndbufLength(UDP_SOCKET_BUFFER)
                .initialWindowLength(Math.min(UDP_SOCKET_BUFFER, termLength / 2))
                .clientLivenessTimeoutNs(patienceNs)
                .imageLivenessTimeoutNs(patienceNs)
                .publicationUnblockTimeoutNs(patienceNs + TimeUnit.SECONDS.toNanos(5))
                .errorHandler(e -> log.warn("aeron driver: {}", e.toString(), e));
        return new EmbeddedDriver(MediaDriver.launch(ctx), directory);
    }

    Path directory() {
        return directory;
    }

    @Override
    public void close() {
        CloseHelper.quietClose(driver);
        IoUtil.delete(directory.toFile(), true);
    }
}
