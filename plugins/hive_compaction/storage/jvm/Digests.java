// Digests for the helper: of byte ranges of a file (the copy units a copy merge is verified by:
// RangeHash) and of small byte arrays (footer statistics: SHA-256), with the reusable read buffers.

import java.io.IOException;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.zip.CRC32;
import java.util.zip.CRC32C;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.Path;

public class Digests {
    private static final int KEPT_BUFFER = 4 << 20;

    private final Configuration conf;
    private final ThreadLocal buffers = new ThreadLocal();

    public Digests(Configuration conf) { this.conf = conf; }

    /** A buffer of at least ``size`` bytes: the calling thread's reusable one, or a new one for
     *  a block bigger than KEPT_BUFFER (a whole stripe must sit in memory to be appended; big
     *  stripes are not kept alive between calls). */
    public byte[] buffer(int size) {
        if (size > KEPT_BUFFER) return new byte[size];
        byte[] b = (byte[]) buffers.get();
        if (b == null || b.length < size) {
            b = new byte[Math.max(size, 1 << 20)];
            buffers.set(b);
        }
        return b;
    }

    public static MessageDigest sha256() throws IOException {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IOException(e);
        }
    }

    public static String sha256Hex(byte[] bytes) throws IOException {
        MessageDigest md = sha256();
        md.update(bytes);
        return hex(md.digest());
    }

    public static String hex(byte[] bytes) {
        StringBuilder sb = new StringBuilder(bytes.length * 2);
        for (int i = 0; i < bytes.length; i++) {
            int v = bytes[i] & 0xff;
            sb.append(Character.forDigit(v >> 4, 16)).append(Character.forDigit(v & 15, 16));
        }
        return sb.toString();
    }

    /** The digest of a copied byte range: its CRC-32C and CRC-32, 64 bits as 16 hex digits. It
     *  compares bytes as appended with the same bytes read back, so what it must catch is a torn,
     *  shifted, stale or flipped range, not a forger: two CRCs of different polynomials miss a
     *  random change with odds of 2^-64, and both run on the CPU's own instructions (~10 GB/s
     *  here, against ~1.1 GB/s for SHA-256, which took half of a big-file copy's time). */
    public static final class RangeHash {
        private final CRC32C castagnoli = new CRC32C();
        private final CRC32 ieee = new CRC32();

        public void update(byte[] b, int offset, int length) {
            castagnoli.update(b, offset, length);
            ieee.update(b, offset, length);
        }

        /** The digest of the bytes given since the last call (the hash starts afresh). */
        public String take() {
            String hex = Long.toHexString(1L << 32 | castagnoli.getValue()).substring(1)
                + Long.toHexString(1L << 32 | ieee.getValue()).substring(1);
            castagnoli.reset();
            ieee.reset();
            return hex;
        }
    }

    /** The [offset, length] of each copy unit ([what, offset, length, ...], see Footers.unit). */
    public static List ranges(List units) {
        List out = new ArrayList();
        for (int i = 0; i < units.size(); i++) {
            List u = (List) units.get(i);
            out.add(Arrays.asList(new Object[] {u.get(1), u.get(2)}));
        }
        return out;
    }

    /** The RangeHash of each [offset, length] range of a file, in order. */
    public List rangeDigests(Path p, List ranges) throws IOException {
        RangeHash hash = new RangeHash();
        byte[] buffer = buffer(1 << 20);
        List hashes = new ArrayList();
        FSDataInputStream in = p.getFileSystem(conf).open(p);
        try {
            for (int r = 0; r < ranges.size(); r++) {
                List range = (List) ranges.get(r);
                long offset = ((Number) range.get(0)).longValue();
                long left = ((Number) range.get(1)).longValue();
                // seek + read, not positional reads: Hadoop's checksummed file systems open the
                // file (and its .crc) afresh for every positional read.
                in.seek(offset);
                while (left > 0) {
                    int n = (int) Math.min((long) buffer.length, left);
                    in.readFully(buffer, 0, n);  // EOFException when the file ends early
                    hash.update(buffer, 0, n);
                    left -= n;
                }
                hashes.add(hash.take());
            }
        } finally {
            in.close();
        }
        return hashes;
    }
}
