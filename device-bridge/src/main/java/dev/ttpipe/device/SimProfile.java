package dev.ttpipe.device;

import java.util.List;
import java.util.Locale;

/**
 * Named Tenstorrent devices and systems for the sim backend and {@code ttpipe tune}: per-chip matmul
 * throughput, DRAM bandwidth and capacity, and the links a pipeline hop crosses, from published
 * figures. It is a model, not a measurement: peak figures stand for sustained ones, one dispatch
 * latency stands for every op, and nothing models NoC contention, SRAM residency, data formats other
 * than bf16, or congestion on shared links.
 *
 * <p>Sources (read 2026-11): Wormhole n150/n300 card specifications,
 * https://docs.tenstorrent.com/aibs/wormhole/specifications.html (n150: 1 chip, 74 TFLOPS FP16,
 * 148 BLOCKFP8, 12 GB GDDR6 at 288 GB/s, 2x QSFP-DD 400GbE; n300: 2 chips, 131 TFLOPS FP16, 262
 * BLOCKFP8, 24 GB at 576 GB/s, 400GbE chip-to-chip on the card); Wormhole Ethernet tiles are 100 Gb/s
 * each way and the n300's two chips are joined by two of them (corsix, "Tenstorrent Wormhole Series
 * Part 1: Physicalities", republished at tenstorrent.com/vision/community-highlight-tenstorrent-wormhole-series-part-1-physicalities);
 * Blackhole p150 card specifications, https://docs.tenstorrent.com/aibs/blackhole/specifications.html
 * (32 GB GDDR6 at 512 GB/s, 4x QSFP-DD 800G); Blackhole chip 372 TFLOPS FP16 (The Register, Hot
 * Chips 2024, 2024-08-27); LoudBox/QuietBox: four n300 cards, eight Wormhole chips (Tenstorrent's
 * launch announcement, 2024); Galaxy: 32 Wormhole chips in a 4 x 8 mesh joined by 100 GbE links.
 * Figures marked "assumed" in {@link #assumptions()} are not published in those sources.
 *
 * @param chipsPerHost      chips in one host (one box); a pipeline hop between hosts pays {@code hostLinkGbps}
 * @param meshRows          the host's chips as a mesh, rows x cols, ranks placed in snake order
 * @param chipLinkGbps      bandwidth between neighbouring chips of a host, Gbit/s (0: no chip-to-chip link)
 * @param hostLinkGbps      bandwidth of the link between hosts (cards), Gbit/s
 */
public record SimProfile(String name, String description, double tflopsBf16, double dramGbps, long dramBytes,
                         int chipsPerHost, int meshRows, int meshCols, double chipLinkGbps, double hostLinkGbps,
                         double opLatencyUs, String assumptions) {
    private static final long GIB = 1L << 30;

    /** Every profile, in the order of the README's table. */
    public static List<SimProfile> all() {
        return List.of(
                new SimProfile("wormhole_n150", "Wormhole n150: one chip per card", 74, 288, 12 * GIB, 1, 1, 1, 0, 400, 10,
                        "one QSFP-DD 400GbE port per hop between cards; 10 us per op"),
                new SimProfile("wormhole_n300", "Wormhole n300: two chips per card (figures per chip)", 65.5, 288, 12 * GIB, 2, 1, 2,
                        200, 400, 10, "one QSFP-DD 400GbE port per hop between cards; 10 us per op"),
                new SimProfile("blackhole_p150", "Blackhole p150: one chip per card", 372, 512, 32 * GIB, 1, 1, 1, 0, 800, 10,
                        "one QSFP-DD 800G port per hop between cards; 10 us per op"),
                new SimProfile("loudbox", "TT-LoudBox: 4 n300 cards, 8 Wormhole chips in a 1 x 8 line", 65.5, 288, 12 * GIB, 8, 1, 8,
                        200, 100, 10, "2 x 100 GbE between neighbouring chips; 100 GbE host network between boxes; 10 us per op"),
                new SimProfile("quietbox", "TT-QuietBox (Wormhole): as the LoudBox, liquid-cooled", 65.5, 288, 12 * GIB, 8, 1, 8,
                        200, 100, 10, "2 x 100 GbE between neighbouring chips; 100 GbE host network between boxes; 10 us per op"),
                new SimProfile("galaxy", "Galaxy: 32 Wormhole chips in a 4 x 8 mesh", 65.5, 288, 12 * GIB, 32, 4, 8, 400, 100, 10,
                        "4 x 100 GbE between mesh neighbours; 100 GbE between Galaxies; 10 us per op"));
    }

    /** The names, for error messages. */
    public static List<String> names() {
        return all().stream().map(SimProfile::name).toList();
    }

    /** The profile called {@code name} (case-insensitive), or null. */
    public static SimProfile named(String name) {
        if (name == null) return null;
        String key = name.strip().toLowerCase(Locale.ROOT);
        return all().stream().filter(p -> p.name.equals(key)).findFirst().orElse(null);
    }

    /** The sim backend's cost model for one chip of this profile: peak bf16, DRAM bandwidth, chip link. */
    public SimCosts costs() {
        double link = chipLinkGbps > 0 ? chipLinkGbps : hostLinkGbps;
        return new SimCosts(tflopsBf16 * 1e3, dramGbps, opLatencyUs, link / 8, 1.0);
    }

    /** Where chip {@code c} (snake order) sits in its host's mesh: {row, col}. Row 0 runs left to right, row 1 back. */
    public int[] meshPosition(int chip) {
        int local = Math.floorMod(chip, chipsPerHost);
        int row = local / meshCols;
        int col = local % meshCols;
        return new int[]{row, row % 2 == 0 ? col : meshCols - 1 - col};
    }

    /**
     * Bytes per second of the hop from pipeline rank {@code rank} to {@code rank + 1} when each rank
     * owns {@code chipsPerRank} consecutive chips in snake order (tt-run's rankfiles): the host link
     * when the two ranks' chips are in different hosts, else the chip-to-chip link (snake neighbours
     * are mesh neighbours).
     */
    public double hopBytesPerSecond(int rank, int chipsPerRank) {
        int last = (rank + 1) * chipsPerRank - 1;
        int next = last + 1;
        boolean crossesHost = last / chipsPerHost != next / chipsPerHost || chipLinkGbps <= 0;
        return (crossesHost ? hostLinkGbps : chipLinkGbps) * 1e9 / 8;
    }

    /** Whether the hop after {@code rank} leaves the host. */
    public boolean hopCrossesHost(int rank, int chipsPerRank) {
        int last = (rank + 1) * chipsPerRank - 1;
        return last / chipsPerHost != (last + 1) / chipsPerHost || chipLinkGbps <= 0;
    }

    @Override
    public String toString() {
        return name + " (" + description + ": " + tflopsBf16 + " TFLOPS bf16, " + dramGbps + " GB/s, "
                + dramBytes / GIB + " GiB per chip)";
    }
}
