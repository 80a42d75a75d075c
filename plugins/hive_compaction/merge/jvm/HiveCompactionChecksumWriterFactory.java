// Makes the wrapped format's output writers, each wrapped in a HiveCompactionChecksumWriter
// (serialized to the executors with the write job).

import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.execution.datasources.OutputWriter;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.CollectionAccumulator;

public class HiveCompactionChecksumWriterFactory extends OutputWriterFactory {
    private final OutputWriterFactory factory;
    private final scala.collection.immutable.Seq hashes;  // the two row hashes (Catalyst expressions)
    private final scala.collection.immutable.Seq input;   // the written columns they are resolved against
    private final CollectionAccumulator sums;

    public HiveCompactionChecksumWriterFactory(OutputWriterFactory factory, scala.collection.immutable.Seq hashes,
                                               scala.collection.immutable.Seq input, CollectionAccumulator sums) {
        this.factory = factory;
        this.hashes = hashes;
        this.input = input;
        this.sums = sums;
    }

    public String getFileExtension(TaskAttemptContext context) { return factory.getFileExtension(context); }

    public OutputWriter newInstance(String path, StructType dataSchema, TaskAttemptContext context) {
        return new HiveCompactionChecksumWriter(factory.newInstance(path, dataSchema, context),
                                                UnsafeProjection.create(hashes, input), sums);
    }
}
