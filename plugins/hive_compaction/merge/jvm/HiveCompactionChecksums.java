// The rewrite's checksums taken by the write tasks themselves, as they hand each row to the file
// writer (merge/writer_checksums.py): no second read of the inputs to checksum them.
//
// A rewrite writes with the format HiveCompactionChecksumOrc / HiveCompactionChecksumParquet,
// Spark's own ORC and Parquet formats whose prepareWrite wraps the output writer factory. The
// driver registers, under an id passed as a write option, the row hash expressions (the same
// Catalyst expressions as merge/checksum.py's scans, resolved against the written columns) and an
// accumulator; each output writer hashes every row it writes and, once its file is closed,
// adds "file name, rows, sums" to the accumulator. Spark merges a result task's accumulator
// updates once per partition and only from a successful attempt, so the driver reads exactly the
// sums of the files the job committed.
//
// Compiled at run time by Janino like the driver's helper (jvm_helper.py); the executors load the
// same class files from a jar the driver writes and adds with SparkContext.addJar. Janino
// compiles a subset of Java: no lambdas, type arguments are ignored (hence raw types and casts).

import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.sql.DataFrameWriter;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.CollectionAccumulator;

public class HiveCompactionChecksums {
    /** The write option naming a registration (lower case: Spark's option maps ignore case). */
    public static final String OPTION = "hivecompaction.checksums";

    private static final ConcurrentHashMap registered = new ConcurrentHashMap();  // id -> Object[3]
    private static final ConcurrentHashMap taken = new ConcurrentHashMap();       // id -> Boolean

    /** Reached from Python through an instance (py4j calls its methods; the state is static,
     *  since Spark makes the format objects itself). */
    public HiveCompactionChecksums() {}

    /** Registers the hashes of ``probe`` (a Project of the two row hashes over a read of the
     *  written columns) and the accumulator the writers add to; the id to write with, or null
     *  if the plan is not of that shape. */
    public String register(LogicalPlan probe, CollectionAccumulator sums) {
        if (!(probe instanceof Project)) return null;
        Project p = (Project) probe;
        if (p.projectList().length() != 2) return null;
        String id = UUID.randomUUID().toString();
        // As Lists: a List is the Seq that Spark's Scala (2.12: collection.Seq, 2.13:
        // immutable.Seq) takes either way; the plan's own may be a mutable buffer.
        registered.put(id, new Object[] {p.projectList().toList(), p.child().output().toList(), sums});
        return id;
    }

    /** ``writer.save(path)`` with registration ``id``, its format found by the class loader that
     *  holds these classes (Spark looks formats up through the thread's context class loader,
     *  set here for this call only, on this thread); true if its output writers took checksums.
     *  The registration is forgotten either way. */
    public boolean save(DataFrameWriter writer, String id, String path) {
        Thread thread = Thread.currentThread();
        ClassLoader saved = thread.getContextClassLoader();
        thread.setContextClassLoader(HiveCompactionChecksums.class.getClassLoader());
        try {
            writer.option(OPTION, id).save(path);
            return taken.containsKey(id);
        } finally {
            thread.setContextClassLoader(saved);
            registered.remove(id);
            taken.remove(id);
        }
    }

    /** ``factory`` wrapped when the options name a registration whose hashed columns are the
     *  written ones, in order; else ``factory`` itself. */
    static OutputWriterFactory wrap(OutputWriterFactory factory, scala.collection.immutable.Map options,
                                    StructType dataSchema) {
        scala.Option id = options.get(OPTION);
        if (id.isEmpty()) return factory;
        Object[] r = (Object[]) registered.get(id.get());
        if (r == null || !sameColumns((scala.collection.immutable.List) r[1], dataSchema)) return factory;
        taken.put(id.get(), Boolean.TRUE);
        return new HiveCompactionChecksumWriterFactory((String) id.get(), factory,
                                                       (scala.collection.immutable.List) r[0],
                                                       (scala.collection.immutable.List) r[1],
                                                       (CollectionAccumulator) r[2]);
    }

    private static boolean sameColumns(scala.collection.immutable.List input, StructType written) {
        StructField[] fields = written.fields();
        if (input.length() != fields.length) return false;
        for (int i = 0; i < fields.length; i++) {
            Attribute a = (Attribute) input.apply(i);
            if (!a.name().equals(fields[i].name()) || !a.dataType().sameType(fields[i].dataType())) return false;
        }
        return true;
    }
}
