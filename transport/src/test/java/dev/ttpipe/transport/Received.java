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
        try {
            Error e = foreign.poll(20, TimeUnit.SECONDS);
            assertNotNull(e, "no foreign frame reported within 20 s");
            return e;
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    TensorPayload next() {
        try {
            TensorPayload p = payloads.poll(20, TimeUnit.SECONDS);
            assertNotNull(p, "no tensor arrived within 20 s" + (errors.isEmpty() ? "" : "; errors: " + errors));
            return p;
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    Error nextError() {
        try {
            Error e = errors.poll(20, TimeUnit.SECONDS);
            assertNotNull(e, "no error reported within 20 s");
            return e;
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
