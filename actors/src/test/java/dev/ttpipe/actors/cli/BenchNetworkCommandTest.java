package dev.ttpipe.actors.cli;

import org.junit.jupiter.api.Test;

/** {@code ttpipe bench network}'s flags: each bad value is one line naming the flag, exit 2, before any namespace is made. */
class BenchNetworkCommandTest {
    @Test
    void badFlagsAreOneLineWithExitCodeTwo() {
        CliTest.assertOneLineBadInput(CliTest.run("bench", "network", "--loss", "0"), "--loss", "0", "1 to 50");
        CliTest.assertOneLineBadInput(CliTest.run("bench", "network", "--loss", "51"), "--loss", "51", "1 to 50");
        CliTest.assertOneLineBadInput(CliTest.run("bench", "network", "--steps", "4"), "--steps", "4", "5 or more");
        CliTest.assertOneLineBadInput(CliTest.run("bench", "network", "--rounds", "0"), "--rounds", "0", "1 or more");
    }
}
