package hivecompaction.engine;

/**
 * The content checksum of a columnar merge: 128 bits over every value of every column, each at its
 * position. The engine keeps the inputs' rows in their order, so the output's k-th value of a
 * column must be the k-th value of that column in the inputs, one after the other: a value is
 * hashed with its column, its position in that column's sequence, its null flag (and for Parquet
 * its repetition and definition levels), and the sums of those hashes are compared. A value
 * changed, lost, added, moved or swapped changes the sums (a row checksum's multiset would not
 * see rows reordered; this one does). Two independent 64-bit sums, each mod 2^64.
 */
final class ContentHash {
    private long[] positions;
    private long first;
    private long second;

    ContentHash(int columns) {
        positions = new long[Math.max(columns, 1)];
    }

    /** One value of column ``column``: ``bits`` its value (or a hash of it), ``shape`` what else
     *  places it (null flag, levels). */
    void add(int column, long shape, long bits) {
        if (column >= positions.length) {
            positions = java.util.Arrays.copyOf(positions, Math.max(column + 1, positions.length * 2));
        }
        long position = positions[column]++;
        long key = mix(position * 0x9E3779B97F4A7C15L + column * 0xC2B2AE3D27D4EB4FL + shape * 0x165667B19E3779F9L);
        first += mix(bits ^ key);
        second += mix((bits + 0x632BE59BD9B4E019L) * 0x94D049BB133111EBL ^ Long.rotateLeft(key, 31));
    }

    long first() {
        return first;
    }

    long second() {
        return second;
    }

    /** MurmurHash3's 64-bit finalizer. */
    static long mix(long h) {
        h ^= h >>> 33;
        h *= 0xFF51AFD7ED558CCDL;
        h ^= h >>> 33;
        h *= 0xC4CEB9FE1A85EC53L;
        return h ^ (h >>> 33);
    }

    /** A 64-bit hash of a byte range, its length included. */
    static long bytes(byte[] b, int offset, int length) {
        long h = 0xCBF29CE484222325L ^ length;
        int i = offset;
        int end = offset + length;
        for (; i + 8 <= end; i += 8) {
            long word = (b[i] & 0xFFL) | (b[i + 1] & 0xFFL) << 8 | (b[i + 2] & 0xFFL) << 16 | (b[i + 3] & 0xFFL) << 24
                | (b[i + 4] & 0xFFL) << 32 | (b[i + 5] & 0xFFL) << 40 | (b[i + 6] & 0xFFL) << 48 | (b[i + 7] & 0xFFL) << 56;
            h = Long.rotateLeft(h ^ mix(word), 27) * 0x100000001B3L;
        }
        for (; i < end; i++) {
            h = (h ^ (b[i] & 0xFF)) * 0x100000001B3L;
        }
        return mix(h);
    }
}
