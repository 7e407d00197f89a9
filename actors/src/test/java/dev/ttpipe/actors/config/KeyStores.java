package dev.ttpipe.actors.config;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A key store with one EC key pair (its certificate naming 127.0.0.1 and localhost) and a trust
 * store holding that certificate, made by the JDK's keytool for the TLS tests. The key store's
 * password is {@value #PASSWORD_ENV}'s value (the pom sets it for the tests; the workers a test
 * starts inherit it), the trust store's is {@value #TRUST_PASSWORD}.
 */
public record KeyStores(Path keys, Path trust, Path certificate) {
    public static final String PASSWORD_ENV = "TTPIPE_TEST_STORE_PASSWORD";
    public static final String TRUST_PASSWORD = "trust-secret";

    public static KeyStores make(Path dir, String name) throws Exception {
        assertTrue(System.getenv(PASSWORD_ENV) != null, PASSWORD_ENV + " is not set (the pom sets it for the tests)");
        Path keys = dir.resolve(name + "-keys.p12");
        Path cert = dir.resolve(name + ".crt");
        Path trust = dir.resolve(name + "-trust.p12");
        keytool("-genkeypair", "-alias", name, "-keyalg", "EC", "-groupname", "secp256r1", "-dname", "CN=ttpipe-" + name,
                "-validity", "2", "-ext", "SAN=ip:127.0.0.1,dns:localhost", "-storetype", "PKCS12", "-keystore", keys.toString(),
                "-storepass:env", PASSWORD_ENV);
        keytool("-exportcert", "-alias", name, "-keystore", keys.toString(), "-storepass:env", PASSWORD_ENV, "-file", cert.toString());
        keytool("-importcert", "-noprompt", "-alias", name, "-file", cert.toString(), "-storetype", "PKCS12", "-keystore",
                trust.toString(), "-storepass", TRUST_PASSWORD);
        return new KeyStores(keys, trust, cert);
    }

    private static void keytool(String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "keytool").toString()));
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "keytool did not finish: " + cmd);
        assertEquals(0, p.exitValue(), "keytool " + String.join(" ", args) + ":\n" + out);
    }
}
