package dev.ttpipe.stages;

import java.util.ArrayList;
import java.util.List;

/** A small map from microbatch index to what a layer saved for it (dense, since indices are 0..M-1). */
final class Slots<T> {
    private final List<T> items = new ArrayList<>();
    private int live;

    void put(int mb, T value) {
        while (items.size() <= mb) items.add(null);
        if (items.get(mb) != null) {
            throw new IllegalStateException("microbatch " + mb + " already has saved activations (forward ran twice?)");
        }
        items.set(mb, value);
        live++;
    }

    T get(int mb) {
        T v = mb < items.size() ? items.get(mb) : null;
        if (v == null) throw new IllegalStateException("no saved activations for microbatch " + mb);
        return v;
    }

    boolean has(int mb) {
        return mb < items.size() && items.get(mb) != null;
    }

    T remove(int mb) {
        T v = get(mb);
        items.set(mb, null);
        live--;
        return v;
    }

    int live() {
        return live;
    }

    /** Everything still held (for cleanup after a failed step). */
    List<T> drain() {
        List<T> out = new ArrayList<>();
        for (int i = 0; i < items.size(); i++) {
            if (items.get(i) != null) out.add(items.get(i));
            items.set(i, null);
        }
        live = 0;
        return out;
    }
}
