package dev.ttpipe.transport;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertNotNull;

/** A receiver for tests: queues what arrives, payloads and error reports apart. */
class Received implements TensorReceiver {
    record Error(String channel, String problem) {
    }

    final BlockingQueue<TensorPayload> payloads = new LinkedBlockingQueue<>();
    final BlockingQueue<Error> errors = new LinkedBlockingQueue<>();
    final BlockingQueue<Error> foreign = new LinkedBlockingQueue<>();

    @Override
    public void onTensor(TensorPayload payload) {
        payloads.add(payload);
    }

    @Override
    public void onError(String channel, String problem) {
        errors.add(new Error(channel, problem));
    }

    @Override
    public void onForeignFrame(String channel, String problem) {
        foreign.add(new Error(channel, problem));
    }

    Error nextForeign() {
        return poll(foreign, "no foreign frame reported within 20 s");
    }

    TensorPayload next() {
        return poll(payloads, "no tensor arrived within 20 s" + (errors.isEmpty() ? "" : "; errors: " + errors));
    }

    Error nextError() {
        return poll(errors, "no error reported within 20 s");
    }

    private static <T> T poll(BlockingQueue<T> queue, String none) {
        try {
            T t = queue.poll(20, TimeUnit.SECONDS);
            assertNotNull(t, none);
            return t;
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    List<TensorPayload> next(int n) {
        List<TensorPayload> out = new ArrayList<>();
        for (int i = 0; i < n; i++) out.add(next());
        return out;
    }
}
