package dev.ttpipe.actors.runtime;

import dev.ttpipe.actors.cluster.Deployment;
import dev.ttpipe.actors.config.ConfigLoader;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Rank 0's table of the ranks' endpoints: whole once every rank announced, a clash or a moved restart refused in one line. */
class RendezvousTest {
    static Rendezvous.Endpoint at(int rank, String host, int control, int data) {
        return new Rendezvous.Endpoint(rank, host, control, data);
    }

    @Test
    void theTableIsWholeOnceEveryRankAnnounced() {
        Rendezvous.Gathering g = new Rendezvous.Gathering(at(0, "10.0.0.1", 25520, 40456), 3);
        assertEquals(List.of(1, 2), g.missing());
        assertNull(g.offer(at(2, "10.0.0.3", 25520, 40456)));
        assertNull(g.table(), "rank 1 has not announced");
        assertNull(g.offer(at(2, "10.0.0.3", 25520, 40456)), "an announcement again (resent) is taken");
        assertNull(g.offer(at(1, "10.0.0.2", 25520, 40456)));
        assertEquals(List.of(), g.missing());
        assertEquals(List.of(at(0, "10.0.0.1", 25520, 40456), at(1, "10.0.0.2", 25520, 40456), at(2, "10.0.0.3", 25520, 40456)),
                g.table().endpoints());
    }

    @Test
    void beforeTheTableIsSentARankMayMoveAfterItNot() {
        Rendezvous.Gathering g = new Rendezvous.Gathering(at(0, "10.0.0.1", 25520, 40456), 2);
        assertNull(g.offer(at(1, "10.0.0.2", 25520, 40456)));
        assertNull(g.offer(at(1, "10.0.0.7", 25520, 40456)), "restarted during bring-up: nobody sends to it yet");
        assertEquals("10.0.0.7", g.table().endpoints().get(1).host());
        assertNull(g.offer(at(1, "10.0.0.7", 25520, 40456)), "a restarted rank at its endpoint gets the table");
        assertEquals("rank 1 came back at control 10.0.0.8:25520, data 10.0.0.8:40456, but its peers send to control"
                + " 10.0.0.7:25520, data 10.0.0.7:40456, the endpoint it announced first; expected it there again (TTPIPE_HOST,"
                + " TTPIPE_CONTROL_PORT, TTPIPE_DATA_PORT set it)", g.offer(at(1, "10.0.0.8", 25520, 40456)));
        assertEquals("10.0.0.7", g.table().endpoints().get(1).host(), "the refused endpoint is not taken");
    }

    @Test
    void twoRanksOnOnePortAndStrangeRanksAreRefused() {
        Rendezvous.Gathering g = new Rendezvous.Gathering(at(0, "127.0.0.1", 25520, 40456), 3);
        String clash = g.offer(at(1, "127.0.0.1", 25521, 40456));
        assertEquals("rank 1 announced 127.0.0.1:40456, which rank 0 uses, expected every rank's control and data ports distinct"
                + " on a host (TTPIPE_CONTROL_PORT, TTPIPE_DATA_PORT)", clash);
        assertNull(g.offer(at(1, "127.0.0.2", 25520, 40456)), "another host: the same ports are fine");
        assertTrue(g.offer(at(3, "10.0.0.3", 1, 2)).startsWith("rank 3 announced control 10.0.0.3:1, data 10.0.0.3:2, expected a"
                + " rank in 1..2"));
        assertTrue(g.offer(at(0, "10.0.0.3", 1, 2)).contains("expected a rank in 1..2"), "rank 0 does not announce");
    }

    @Test
    void theTableGivesADeploymentWithEveryRanksEndpoint() {
        Deployment d = Deployment.of(ConfigLoader.read(String.join("\n",
                "transformer_config: {num_heads: 2, embedding_dim: 16, num_blocks: 2, max_sequence_length: 16}",
                "multihost_config:",
                "  enabled: true",
                "  socket_type: aeron",
                "  pipeline_parallel_config: {num_blocks: 2, blocks_per_rank: {0: 1, 1: 1}}",
                "rank_bindings:",
                "  - {rank: 0, host: 10.0.0.1, mesh_id: 4}",
                "  - {rank: 1, mesh_id: 5, env_overrides: {A: b}}", ""), "job.yaml", null),
                new Deployment.Placement("torchrun (MASTER_ADDR=10.0.0.1)", List.of("10.0.0.1"), false));
        assertEquals(List.of(1), d.announcing());
        Deployment every = new Rendezvous.Table(List.of(at(0, "10.0.0.1", 25520, 40456), at(1, "10.0.0.2", 25600, 40600)))
                .applyTo(d);
        assertEquals(List.of(), every.announcing());
        assertEquals("10.0.0.2:25600", every.rank(1).controlAddress());
        assertEquals("10.0.0.2:40600", every.rank(1).dataAddress());
        assertEquals(5, every.rank(1).meshId(), "the binding's mesh id is kept");
        assertEquals("b", every.rank(1).env().get("A"), "and its environment");
    }
}
