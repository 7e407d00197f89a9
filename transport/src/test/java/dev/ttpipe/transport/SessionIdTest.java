package dev.ttpipe.transport;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** A publication's Aeron session id names its rank whatever the incarnation of the process that sends. */
class SessionIdTest {

    @Test
    void theRankIsTheSessionIdModuloAThousand() {
        assertEquals(0, AeronTransport.rankOfSession(0));
        assertEquals(7, AeronTransport.rankOfSession(7));
        assertEquals(999, AeronTransport.rankOfSession(999));
        assertEquals(3, AeronTransport.rankOfSession(1_234_003));
        int last = AeronTransport.INCARNATIONS * AeronTransport.RANKS_PER_INCARNATION + AeronTransport.MAX_RANK;
        assertEquals(AeronTransport.MAX_RANK, AeronTransport.rankOfSession(last), "the last incarnation's last rank fits an int");
        assertEquals(-1, AeronTransport.rankOfSession(-5), "a session the driver chose is no rank's");
    }
}
