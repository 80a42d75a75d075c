// Makes the wrapped format's output writers, each wrapped in a HiveCompactionChecksumWriter
// (serialized to the executors with the write job).

import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.execution.datasources.OutputWriter;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.CollectionAccumulator;

public class HiveCompactionChecksumWriterFactory extends OutputWriterFactory {
    // A task thread's projection of its last write job: generating it costs ~15 ms of CPU (the
    // compiled class comes from Spark's cache), paid once per thread and job instead of per task.
    private static final ThreadLocal last = new ThreadLocal();  // Object[] {id, UnsafeProjection}

    private final String id;
    private final OutputWriterFactory factory;
    // Lists: Spark's Seq parameters take them under Scala 2.12 and 2.13 (HiveCompactionChecksums.register).
    private final scala.collection.immutable.List hashes;  // the two row hashes (Catalyst expressions)
    private final scala.collection.immutable.List input;   // the written columns they are resolved against
    private final CollectionAccumulator sums;

    public HiveCompactionChecksumWriterFactory(String id, OutputWriterFactory factory,
                                               scala.collection.immutable.List hashes,
                                               scala.collection.immutable.List input, CollectionAccumulator sums) {
        this.id = id;
        this.factory = factory;
        this.hashes = hashes;
        this.input = input;
        this.sums = sums;
    }

    public String getFileExtension(TaskAttemptContext context) { return factory.getFileExtension(context); }

    public OutputWriter newInstance(String path, StructType dataSchema, TaskAttemptContext context) {
        return new HiveCompactionChecksumWriter(factory.newInstance(path, dataSchema, context), projection(), sums);
    }

    // Shared by the writers a thread opens one after the other: each reads a row's hashes as soon
    // as it has them, so the projection's reused result row is never read by another.
    private UnsafeProjection projection() {
        Object[] kept = (Object[]) last.get();
        if (kept == null || !kept[0].equals(id)) {
            kept = new Object[] {id, UnsafeProjection.create(hashes, input)};
            last.set(kept);
        }
        return (UnsafeProjection) kept[1];
    }
}
