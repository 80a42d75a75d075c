// Spark's ORC format, its writers wrapped to checksum what they write (HiveCompactionChecksums).

import org.apache.hadoop.mapreduce.Job;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.execution.datasources.orc.OrcFileFormat;
import org.apache.spark.sql.types.StructType;

public class HiveCompactionChecksumOrc extends OrcFileFormat {
    public OutputWriterFactory prepareWrite(SparkSession session, Job job, scala.collection.immutable.Map options,
                                            StructType dataSchema) {
        return HiveCompactionChecksums.wrap(super.prepareWrite(session, job, options, dataSchema), options, dataSchema);
    }
}
