// Spark's Parquet format, its writers wrapped to checksum what they write (HiveCompactionChecksums).

import org.apache.hadoop.mapreduce.Job;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.types.StructType;

public class HiveCompactionChecksumParquet extends ParquetFileFormat {
    public OutputWriterFactory prepareWrite(SparkSession session, Job job, scala.collection.immutable.Map options,
                                            StructType dataSchema) {
        return HiveCompactionChecksums.wrap(super.prepareWrite(session, job, options, dataSchema), options, dataSchema);
    }
}
