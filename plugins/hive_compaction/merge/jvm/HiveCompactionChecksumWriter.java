// An output writer that hashes every row it writes (two 64-bit hashes, summed as merge/checksum.py
// sums them: each hash's high 32 bits signed and low 32 bits unsigned, in 64-bit integers) and,
// once its file is closed, adds "file name TAB rows TAB high TAB low TAB high2 TAB low2" to the
// job's accumulator.

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.execution.datasources.OutputWriter;
import org.apache.spark.util.CollectionAccumulator;

public class HiveCompactionChecksumWriter extends OutputWriter {
    private final OutputWriter out;
    private final UnsafeProjection hash;
    private final CollectionAccumulator sums;
    private long rows, high, low, high2, low2;

    public HiveCompactionChecksumWriter(OutputWriter out, UnsafeProjection hash, CollectionAccumulator sums) {
        this.out = out;
        this.hash = hash;
        this.sums = sums;
    }

    public void write(InternalRow row) {
        InternalRow h = hash.apply(row);  // reused by the next call: read now
        long a = h.getLong(0);
        long b = h.getLong(1);
        rows++;
        high += a >> 32;
        low += a & 0xFFFFFFFFL;
        high2 += b >> 32;
        low2 += b & 0xFFFFFFFFL;
        out.write(row);
    }

    public void close() {
        out.close();
        String path = out.path();
        sums.add(path.substring(path.lastIndexOf('/') + 1) + "\t" + rows + "\t" + high + "\t" + low + "\t" + high2
                 + "\t" + low2);
    }

    public String path() { return out.path(); }
}
