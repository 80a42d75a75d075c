// An output writer that hashes every row it writes (two 64-bit hashes, summed as merge/checksum.py
// sums them: each hash's high 32 bits signed and low 32 bits unsigned, in 64-bit integers) and,
// once its file is closed, adds "file name TAB rows TAB high TAB low TAB high2 TAB low2" to the
// job's accumulator.

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.execution.datasources.OutputWriter;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.util.CollectionAccumulator;

public class HiveCompactionChecksumWriter extends OutputWriter {
    private final OutputWriter out;
    private final Hash hash;
    private final CollectionAccumulator sums;
    private long rows, high, low, high2, low2;

    public HiveCompactionChecksumWriter(OutputWriter out, UnsafeProjection hash, CollectionAccumulator sums) {
        this.out = out;
        this.hash = new Hash(hash, SQLConf.get());  // in a task: the task's own configuration, made once here
        this.sums = sums;
    }

    /** The row hashes of ``row``, under the task's SQL configuration, made once. Without it,
     *  Spark 4 builds that configuration afresh (and reads the process environment) each time an
     *  expression asks for it: the JSON encoding of a MAP column asks once per entry, 5% of the
     *  write tasks' samples (JFR, 2026-11-28; 1.7% with it). */
    static final class Hash extends scala.runtime.AbstractFunction0 {
        private final UnsafeProjection projection;
        private final SQLConf conf;
        private InternalRow row;

        Hash(UnsafeProjection projection, SQLConf conf) {
            this.projection = projection;
            this.conf = conf;
        }

        public Object apply() { return projection.apply(row); }

        InternalRow of(InternalRow row) {
            this.row = row;
            return (InternalRow) SQLConf.withExistingConf(conf, this);
        }
    }

    public void write(InternalRow row) {
        InternalRow h = hash.of(row);  // reused by the next call: read now
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
