package dev.ttpipe.actors.telemetry;

import io.prometheus.metrics.exporter.common.PrometheusHttpExchange;
import io.prometheus.metrics.exporter.common.PrometheusHttpRequest;
import io.prometheus.metrics.exporter.common.PrometheusHttpResponse;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.BindException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Enumeration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The telemetry's HTTP/1.1 server, for the few local clients of /metrics and /status: GET and HEAD, one request per
 * connection ({@code Connection: close}). Each client is served from a bounded pool ({@link #THREADS} threads,
 * {@link #QUEUE} waiting, more are closed at once) and each exchange has a deadline ({@link #READ_TIMEOUT} to send
 * the request head, {@link #EXCHANGE_LIMIT} in all, after which its socket is closed), so a client that sends one
 * byte and stalls, or never reads its answer, holds one thread for seconds and never blocks the others. A client that
 * goes away early is a debug line, not a stack trace. Thread-safe; {@link #close} stops it.
 */
final class HttpEndpoint implements AutoCloseable {
    /** How long a client has to send its request line and headers. */
    static final Duration READ_TIMEOUT = Duration.ofSeconds(10);
    /** How long one exchange may take from accept to the last byte of its answer. */
    static final Duration EXCHANGE_LIMIT = Duration.ofSeconds(20);
    static final int THREADS = 4, QUEUE = 16;
    /** The largest request head read (request line and headers). */
    static final int MAX_HEAD = 16 << 10;

    private static final Logger log = LoggerFactory.getLogger(HttpEndpoint.class);

    /** Answers one request. */
    interface Handler {
        void handle(Exchange exchange) throws IOException;
    }

    private final ServerSocket socket;
    private final Map<String, Handler> handlers;
    private final ThreadPoolExecutor pool;
    private final ScheduledExecutorService deadlines;
    private final Thread acceptor;
    private final AtomicLong finished = new AtomicLong();

    private HttpEndpoint(ServerSocket socket, Map<String, Handler> handlers) {
        this.socket = socket;
        this.handlers = Map.copyOf(handlers);
        this.pool = new ThreadPoolExecutor(THREADS, THREADS, 30, TimeUnit.SECONDS, new ArrayBlockingQueue<>(QUEUE),
                r -> daemon(r, "ttpipe-telemetry-http"));
        pool.allowCoreThreadTimeOut(true);
        this.deadlines = Executors.newSingleThreadScheduledExecutor(r -> daemon(r, "ttpipe-telemetry-deadlines"));
        this.acceptor = daemon(this::acceptLoop, "ttpipe-telemetry-accept");
    }

    /**
     * Serves {@code handlers} (by exact path) on {@code host:port}; port 0 picks a free one.
     *
     * @throws IOException when the address cannot be bound (the message names it)
     */
    static HttpEndpoint start(String host, int port, Map<String, Handler> handlers) throws IOException {
        ServerSocket s = new ServerSocket();
        try {
            s.bind(new InetSocketAddress(host, port), 50);
        } catch (BindException e) {
            s.close();
            throw new IOException(host + ":" + port + " is in use (" + e.getMessage() + ")", e);
        } catch (IOException e) {
            s.close();
            throw e;
        }
        HttpEndpoint h = new HttpEndpoint(s, handlers);
        h.acceptor.start();
        return h;
    }

    /** Exchanges over: answered, refused or abandoned by their client. */
    long finished() {
        return finished.get();
    }

    InetSocketAddress address() {
        return (InetSocketAddress) socket.getLocalSocketAddress();
    }

    private void acceptLoop() {
        while (!socket.isClosed()) {
            Socket client;
            try {
                client = socket.accept();
            } catch (IOException e) {
                if (!socket.isClosed()) log.debug("telemetry: accept failed: {}", e.toString());
                continue;
            }
            try {
                pool.execute(() -> serve(client));
            } catch (RejectedExecutionException busy) {
                log.debug("telemetry: {} clients already served or waiting, closing {}", THREADS + QUEUE, client.getRemoteSocketAddress());
                closeQuietly(client);
                finished.incrementAndGet();
            }
        }
    }

    private void serve(Socket client) {
        ScheduledFuture<?> deadline = deadlines.schedule(() -> closeQuietly(client), EXCHANGE_LIMIT.toMillis(), TimeUnit.MILLISECONDS);
        try (client) {
            client.setSoTimeout((int) READ_TIMEOUT.toMillis());
            Exchange ex = Exchange.read(client);
            if (ex == null) return;    // closed before a request
            Handler h = handlers.get(ex.path);
            if (!ex.method.equals("GET") && !ex.method.equals("HEAD")) ex.sendText(405, "only GET and HEAD are served\n");
            else if (h == null) ex.sendText(404, "not found; try " + String.join(" or ", handlers.keySet()) + "\n");
            else h.handle(ex);
            client.getOutputStream().flush();
        } catch (IOException e) {
            log.debug("telemetry: client {} went away or stalled: {}", client.getRemoteSocketAddress(), e.toString());
        } catch (RuntimeException e) {
            log.warn("telemetry: answering {} failed: {}", client.getRemoteSocketAddress(), e.toString());
        } finally {
            deadline.cancel(false);
            finished.incrementAndGet();
        }
    }

    @Override
    public void close() {
        closeQuietly(socket);
        pool.shutdownNow();
        deadlines.shutdownNow();
    }

    private static void closeQuietly(AutoCloseable c) {
        try {
            c.close();
        } catch (Exception ignored) {
            // already closed or going away: nothing to tell anyone
        }
    }

    private static Thread daemon(Runnable r, String name) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        return t;
    }

    /**
     * One request and its answer, in the shape Prometheus' scrape handler takes. The answer is written once, with
     * {@code Connection: close}; a HEAD request gets the headers only.
     */
    static final class Exchange implements PrometheusHttpExchange, PrometheusHttpRequest, PrometheusHttpResponse {
        private final Socket client;
        private final String method, path, query;
        private final Map<String, List<String>> headers;
        private final Map<String, String> responseHeaders = new LinkedHashMap<>();
        private boolean sent;

        private Exchange(Socket client, String method, String path, String query, Map<String, List<String>> headers) {
            this.client = client;
            this.method = method;
            this.path = path;
            this.query = query;
            this.headers = headers;
        }

        /** The request {@code client} sends, or null when it closed first. */
        static Exchange read(Socket client) throws IOException {
            String head = readHead(client.getInputStream());
            if (head == null) return null;
            String[] lines = head.split("\r?\n");
            String[] requestLine = lines[0].split(" ");
            if (requestLine.length != 3 || !requestLine[2].startsWith("HTTP/")) throw new IOException("not an HTTP request: " + lines[0]);
            Map<String, List<String>> headers = new LinkedHashMap<>();
            for (int i = 1; i < lines.length; i++) {
                int colon = lines[i].indexOf(':');
                if (colon <= 0) continue;
                headers.computeIfAbsent(lines[i].substring(0, colon).strip().toLowerCase(Locale.ROOT), k -> new ArrayList<>())
                        .add(lines[i].substring(colon + 1).strip());
            }
            String target = requestLine[1];
            int q = target.indexOf('?');
            return new Exchange(client, requestLine[0], q < 0 ? target : target.substring(0, q), q < 0 ? null : target.substring(q + 1),
                    headers);
        }

        /** The bytes up to the blank line that ends the head, or null for a client that closed before sending any. */
        private static String readHead(InputStream in) throws IOException {
            ByteArrayOutputStream head = new ByteArrayOutputStream();
            int state = 0;      // how much of \r\n\r\n (or \n\n) has been seen
            while (true) {
                int b = in.read();
                if (b < 0) {
                    if (head.size() == 0) return null;
                    throw new IOException("closed after " + head.size() + " bytes of a request head");
                }
                if (head.size() >= MAX_HEAD) throw new IOException("a request head over " + MAX_HEAD + " bytes");
                head.write(b);
                if (b == '\n') {
                    if (++state == 2) return head.toString(StandardCharsets.ISO_8859_1);
                } else if (b != '\r') {
                    state = 0;
                }
            }
        }

        /** Answers {@code status} with a plain-text body. */
        void sendText(int status, String body) throws IOException {
            send(status, "text/plain; charset=utf-8", body.getBytes(StandardCharsets.UTF_8));
        }

        /** Answers {@code status} with {@code body}. */
        void send(int status, String contentType, byte[] body) throws IOException {
            setHeader("Content-Type", contentType);
            try (OutputStream out = sendHeadersAndGetBody(status, body.length)) {
                out.write(body);
            }
        }

        @Override
        public PrometheusHttpRequest getRequest() {
            return this;
        }

        @Override
        public PrometheusHttpResponse getResponse() {
            return this;
        }

        @Override
        public String getQueryString() {
            return query;
        }

        @Override
        public Enumeration<String> getHeaders(String name) {
            return Collections.enumeration(headers.getOrDefault(name.toLowerCase(Locale.ROOT), List.of()));
        }

        @Override
        public String getMethod() {
            return method;
        }

        @Override
        public String getRequestPath() {
            return path;
        }

        @Override
        public void setHeader(String name, String value) {
            responseHeaders.put(name, value);
        }

        /** {@code contentLength} 0 or less: unknown, the body ends when the connection closes. */
        @Override
        public OutputStream sendHeadersAndGetBody(int statusCode, int contentLength) throws IOException {
            if (sent) throw new IOException("the answer was already sent");
            sent = true;
            StringBuilder h = new StringBuilder("HTTP/1.1 ").append(statusCode).append(' ').append(reason(statusCode)).append("\r\n");
            responseHeaders.forEach((k, v) -> h.append(k).append(": ").append(v).append("\r\n"));
            if (contentLength > 0) h.append("Content-Length: ").append(contentLength).append("\r\n");
            h.append("Connection: close\r\n\r\n");
            OutputStream out = client.getOutputStream();
            out.write(h.toString().getBytes(StandardCharsets.ISO_8859_1));
            return method.equals("HEAD") ? OutputStream.nullOutputStream() : new NonClosing(out);
        }

        @Override
        public void handleException(IOException e) throws IOException {
            throw e;     // the client went away: serve() logs it at debug
        }

        @Override
        public void handleException(RuntimeException e) {
            log.warn("telemetry: a scrape failed: {}", e.toString());
            if (sent) return;
            try {
                sendText(500, "the scrape failed: " + e + "\n");
            } catch (IOException gone) {
                log.debug("telemetry: client {} went away: {}", client.getRemoteSocketAddress(), gone.toString());
            }
        }

        @Override
        public void close() {
            // serve() closes the socket
        }

        private static String reason(int status) {
            return switch (status) {
                case 200 -> "OK";
                case 404 -> "Not Found";
                case 405 -> "Method Not Allowed";
                case 500 -> "Internal Server Error";
                default -> "Status";
            };
        }
    }

    /** The socket's stream, left open when a handler closes its body (serve() closes the socket). */
    private static final class NonClosing extends java.io.FilterOutputStream {
        NonClosing(OutputStream out) {
            super(out);
        }

        @Override
        public void write(byte[] b, int off, int len) throws IOException {
            out.write(b, off, len);
        }

        @Override
        public void close() throws IOException {
            flush();
        }
    }
}
