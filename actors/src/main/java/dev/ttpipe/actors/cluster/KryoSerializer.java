package dev.ttpipe.actors.cluster;

import com.esotericsoftware.kryo.Kryo;
import com.esotericsoftware.kryo.KryoException;
import com.esotericsoftware.kryo.Serializer;
import com.esotericsoftware.kryo.io.Input;
import com.esotericsoftware.kryo.io.Output;
import com.esotericsoftware.kryo.serializers.ImmutableCollectionsSerializers;
import com.esotericsoftware.kryo.util.Pool;
import com.typesafe.config.Config;
import org.apache.pekko.actor.ExtendedActorSystem;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.ActorRefResolver;
import org.apache.pekko.actor.typed.internal.adapter.ActorRefAdapter;
import org.apache.pekko.actor.typed.javadsl.Adapter;
import org.apache.pekko.serialization.JSerializer;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.TreeMap;

/**
 * Pekko serializer for the control messages between worker processes (never tensors: they go
 * through the transport), over Kryo 5 with registration required: only classes registered here
 * can be written or read, so a message type nobody listed fails loudly on the sender instead of
 * travelling as Java serialization.
 *
 * <p>Configuration (Pekko config):
 * <pre>
 * pekko.actor {
 *   serializers { ttpipe-kryo = "dev.ttpipe.actors.cluster.KryoSerializer" }
 *   serialization-bindings { "dev.ttpipe.actors.runtime.ControlMessage" = ttpipe-kryo }
 * }
 * ttpipe.kryo.classes = ["dev.ttpipe.actors.runtime.Foo", "dev.ttpipe.actors.runtime.Foo$Kind", ...]
 * </pre>
 * {@value #CLASSES_PATH} lists every class that may appear inside a message, nested ones included
 * (records, enums, other classes with a no-argument constructor). Kryo ids are given by order: first
 * the JDK basics below, then the JDK's immutable collections, then the listed classes in the order
 * listed, so every process of a job must list the same classes in the same order (they read the same
 * job config).
 *
 * <p>Registered out of the box: {@code int[], int[][], long[], float[], float[][], double[], byte[],
 * boolean[], String[], ArrayList, HashMap, LinkedHashMap, TreeMap (natural
 * order), HashSet, LinkedHashSet}, plus Kryo's defaults (primitives and their boxes, String).
 * Records are written component by component through their canonical constructor (Kryo's
 * {@code RecordSerializer}). {@code List.of}, {@code Set.of}, {@code Map.of}, {@code List.copyOf} and
 * {@code Stream.toList()} results (the JDK's {@code ImmutableCollections} classes) are written as
 * their elements and read back as {@code List.of(...)} etc. (still immutable; a {@code Stream.toList()}
 * holding nulls cannot be read back, as {@code List.of} refuses nulls). {@code Collections.unmodifiableList},
 * {@code Arrays.asList} and other wrapper views are not registered: copy them with {@code List.copyOf}
 * in the record's constructor.
 *
 * <p>Thread-safe: Kryo instances are not, so each call borrows one from a pool.
 */
public final class KryoSerializer extends JSerializer {
    /** The serializer's fixed Pekko identifier ("tp" 0x7470 and 1). */
    public static final int IDENTIFIER = 0x7470_0001;
    /** Config path of the list of fully qualified class names to register. */
    public static final String CLASSES_PATH = "ttpipe.kryo.classes";

    private static final List<Class<?>> JDK_BASICS = List.of(int[].class, int[][].class, long[].class, float[].class,
            float[][].class, double[].class, byte[].class, boolean[].class, String[].class, ArrayList.class,
            HashMap.class, LinkedHashMap.class, TreeMap.class, HashSet.class, LinkedHashSet.class);

    private final List<Class<?>> classes;
    private final Pool<Kryo> pool;
    private final ActorRefResolver refs;

    /** What Pekko calls: reads {@value #CLASSES_PATH} from the system's config. */
    public KryoSerializer(ExtendedActorSystem system) {
        this(classesFrom(system.settings().config(), system.dynamicAccess().classLoader()),
                ActorRefResolver.get(Adapter.toTyped(system)));
    }

    /** Registers {@code classes} (in this order) after the built-in ones. */
    public KryoSerializer(List<Class<?>> classes) {
        this(classes, null);
    }

    /**
     * Registers {@code classes} after the built-in ones; with a resolver, typed {@code ActorRef}s (the
     * {@code replyTo} of a message) travel as their serialization format and resolve on arrival.
     */
    public KryoSerializer(List<Class<?>> classes, ActorRefResolver refs) {
        this.refs = refs;
        this.classes = List.copyOf(classes);
        this.pool = new Pool<>(true, false, 32) {
            @Override
            protected Kryo create() {
                return newKryo();
            }
        };
        pool.free(pool.obtain()); // registration problems show up now, not at the first message
    }

    private Kryo newKryo() {
        Kryo k = new Kryo();
        k.setRegistrationRequired(true);
        k.setReferences(false); // messages are trees; cycles are not supported
        for (Class<?> c : JDK_BASICS) k.register(c);
        ImmutableCollectionsSerializers.registerSerializers(k);
        if (refs != null) {
            k.register(ActorRefAdapter.class, new TypedActorRefSerializer(refs));
        }
        for (Class<?> c : classes) k.register(c);
        return k;
    }

    static List<Class<?>> classesFrom(Config config, ClassLoader loader) {
        if (!config.hasPath(CLASSES_PATH)) return List.of();
        List<Class<?>> out = new ArrayList<>();
        for (String name : config.getStringList(CLASSES_PATH)) {
            try {
                out.add(Class.forName(name.trim(), false, loader));
            } catch (ClassNotFoundException e) {
                throw new IllegalArgumentException(CLASSES_PATH + ": class '" + name + "' not found, expected the fully "
                        + "qualified name of a message class (nested classes with '$')", e);
            }
        }
        return Collections.unmodifiableList(out);
    }

    @Override
    public int identifier() {
        return IDENTIFIER;
    }

    /** No manifest: Kryo writes the registered class id in front of the object. */
    @Override
    public boolean includeManifest() {
        return false;
    }

    @Override
    public byte[] toBinary(Object o) {
        Kryo k = pool.obtain();
        boolean intact = false;
        try (Output out = new Output(256, -1)) {
            k.writeClassAndObject(out, o);
            intact = true;
            return out.toBytes();
        } catch (KryoException | IllegalArgumentException e) {
            String why = firstLine(e.getMessage());
            throw new IllegalArgumentException("kryo: cannot serialize " + o.getClass().getName() + ": " + why
                    + (why.contains("not registered") ? " (add it to " + CLASSES_PATH + ")" : ""), e);
        } finally {
            if (intact) pool.free(k); // a Kryo that failed half-way may keep state: let it go
        }
    }

    @Override
    public Object fromBinaryJava(byte[] bytes, Class<?> manifest) {
        Kryo k = pool.obtain();
        boolean intact = false;
        try (Input in = new Input(bytes)) {
            Object o = k.readClassAndObject(in);
            intact = true;
            return o;
        } catch (KryoException | IllegalArgumentException e) {
            throw new IllegalArgumentException("kryo: cannot read a message of " + bytes.length + " bytes: "
                    + firstLine(e.getMessage()), e);
        } finally {
            if (intact) pool.free(k); // a Kryo that failed half-way may keep state: let it go
        }
    }

    private static String firstLine(String s) {
        if (s == null) return "";
        int nl = s.indexOf('\n');
        return nl < 0 ? s : s.substring(0, nl);
    }

    /** A typed ActorRef as its path with address (Pekko's own serialization format for refs). */
    private static final class TypedActorRefSerializer
            extends Serializer<ActorRef<?>> {
        private final ActorRefResolver refs;

        TypedActorRefSerializer(ActorRefResolver refs) {
            this.refs = refs;
        }

        @Override
        public void write(Kryo kryo, Output output, ActorRef<?> ref) {
            output.writeString(refs.toSerializationFormat(ref));
        }

        @Override
        public ActorRef<?> read(Kryo kryo, Input input,
                                Class<? extends ActorRef<?>> type) {
            return refs.resolveActorRef(input.readString());
        }
    }
}
