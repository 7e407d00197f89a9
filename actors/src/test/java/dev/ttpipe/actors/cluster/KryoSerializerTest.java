package dev.ttpipe.actors.cluster;

import com.typesafe.config.ConfigFactory;
import dev.ttpipe.actors.runtime.StageStats;
import dev.ttpipe.transport.DroppedFrames;
import org.apache.pekko.actor.ActorSystem;
import org.apache.pekko.serialization.Serialization;
import org.apache.pekko.serialization.SerializationExtension;
import org.apache.pekko.serialization.Serializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Control messages survive a Pekko serialization round trip through the Kryo serializer bound in config. */
class KryoSerializerTest {
    /** A marker the binding is made on, as the runtime's control messages would share one. */
    interface Control {
    }

    enum Phase { FORWARD, BACKWARD }

    record Shard(int rank, String host, long[] offsets) {
    }

    record Plan(int step, Phase phase, int[][] grid, List<String> actions, Shard shard, Map<String, Double> losses,
                List<Shard> peers, ArrayList<Integer> mutable) implements Control {
    }

    record Unlisted(int x) implements Control {
    }

    private static ActorSystem system;

    @BeforeAll
    static void start() {
        system = ActorSystem.create("kryo", ConfigFactory.parseString("""
                pekko.loglevel = WARNING
                pekko.actor {
                  serializers { ttpipe-kryo = "dev.ttpipe.actors.cluster.KryoSerializer" }
                  serialization-bindings { "dev.ttpipe.actors.cluster.KryoSerializerTest$Control" = ttpipe-kryo }
                }
                ttpipe.kryo.classes = [
                  "dev.ttpipe.actors.cluster.KryoSerializerTest$Plan",
                  "dev.ttpipe.actors.cluster.KryoSerializerTest$Phase",
                  "dev.ttpipe.actors.cluster.KryoSerializerTest$Shard"
                ]
                """).withFallback(ConfigFactory.load()));
    }

    @AfterAll
    static void stop() {
        system.terminate();
        system.getWhenTerminated().toCompletableFuture().join();
    }

    private static Object roundTrip(Object message) {
        Serialization s = SerializationExtension.get(system);
        Serializer serializer = s.findSerializerFor(message);
        assertInstanceOf(KryoSerializer.class, serializer);
        byte[] bytes = s.serialize(message).get();
        return s.deserialize(bytes, serializer.identifier(), "").get();
    }

    @Test
    void aRecordWithArraysCollectionsAndNestedRecordsRoundTrips() {
        Map<String, Double> losses = new LinkedHashMap<>();
        losses.put("2F0", 3.25);
        losses.put("2B0", -0.5);
        Plan plan = new Plan(7, Phase.BACKWARD, new int[][]{{0, 1, 2}, {}, {5}},
                List.of("0F0", "1F0", "1B0"),
                new Shard(3, "10.0.0.2", new long[]{0, 1L << 40}),
                losses,
                Stream.of(new Shard(1, "a", new long[0]), new Shard(2, "b", new long[]{9})).toList(),
                new ArrayList<>(List.of(4, 5, 6)));

        Plan back = (Plan) roundTrip(plan);

        assertNotSame(plan, back);
        assertEquals(7, back.step());
        assertEquals(Phase.BACKWARD, back.phase());
        assertTrue(Arrays.deepEquals(plan.grid(), back.grid()));
        assertEquals(plan.actions(), back.actions());
        assertThrows(UnsupportedOperationException.class, () -> back.actions().add("x"), "List.of stays immutable");
        assertEquals(plan.shard().rank(), back.shard().rank());
        assertEquals(plan.shard().host(), back.shard().host());
        assertArrayEquals(plan.shard().offsets(), back.shard().offsets());
        assertEquals(losses, back.losses());
        assertEquals(List.of("2F0", "2B0"), new ArrayList<>(back.losses().keySet()), "insertion order kept");
        assertEquals(2, back.peers().size());
        assertArrayEquals(new long[]{9}, back.peers().get(1).offsets());
        assertEquals(List.of(4, 5, 6), back.mutable());
        assertInstanceOf(ArrayList.class, back.mutable());
    }

    /** What a rank tells a scrape from another process: its host and device ids arrive with it. */
    @Test
    void aRanksStatsTravelWithItsHostAndDevices() throws Exception {
        List<Class<?>> classes = new ArrayList<>();
        for (String name : ClusterMessages.CLASSES) classes.add(Class.forName(name));
        KryoSerializer kryo = new KryoSerializer(classes);
        StageStats stats = new StageStats(1, "1F3", true, 2, 5, 16, 1, 2, 1024, 2048, 40,
                new StageStats.Waiting("1F3", 12, null, -1, 0, "1B2", 3, true), new long[] {20, 20, 0, 0, 0, 0},
                DroppedFrames.NONE, "node07", new int[] {2, 3});
        StageStats back = (StageStats) kryo.fromBinaryJava(kryo.toBinary(stats), null);
        assertEquals("node07", back.host());
        assertArrayEquals(new int[] {2, 3}, back.devices());
        assertEquals(stats.waiting(), back.waiting());
    }

    @Test
    void aClassNobodyRegisteredFailsOnTheSenderNamingTheSetting() {
        Serialization s = SerializationExtension.get(system);
        Throwable e = s.serialize(new Unlisted(1)).failed().get();
        assertTrue(e.getMessage().contains("KryoSerializerTest$Unlisted") && e.getMessage().contains(KryoSerializer.CLASSES_PATH),
                e.getMessage());
    }

    @Test
    void anUnknownClassInTheConfigIsReportedWithThePath() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> KryoSerializer.classesFrom(
                ConfigFactory.parseString("ttpipe.kryo.classes = [\"dev.ttpipe.Nope\"]"), getClass().getClassLoader()));
        assertTrue(e.getMessage().startsWith("ttpipe.kryo.classes: class 'dev.ttpipe.Nope' not found"), e.getMessage());
    }
}
