package hivecompaction.engine;

import java.io.IOException;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;

/**
 * The merge job's groups as Spark tasks on the executors: one task a group, each streaming its
 * files through the Hadoop FileSystem API into one output, so no byte of data passes through the
 * driver and a cluster merges as fast as its executors read and write. A group is either copied
 * (its stripes / row groups taken byte for byte: the JVM helper's CopyMerge, compiled into this
 * jar from the same sources) or merged through column vectors (OrcColumnarMerge,
 * ParquetColumnarMerge). Every task ends with a result, never an exception: a group that fails
 * fails its partition alone, and one the columnar engine does not merge says why ("fallback"),
 * with nothing written, so the driver rewrites it with Spark SQL instead.
 *
 * The driver calls run() with JSON [{"kind": "copy"|"columnar", "format": "orc"|"parquet",
 * "inputs": [path, ...], "output": path}, ...] and gets one JSON result per request, in order.
 */
public final class ExecutorMerges {
    private static final ObjectMapper JSON = new ObjectMapper();

    private ExecutorMerges() {}

    /** The engine's version check for the driver: the class loads and links on this Spark. */
    public static String version() {
        return "1";
    }

    public static String run(JavaSparkContext jsc, String requestsJson, String description) throws IOException {
        List<?> requests = JSON.readValue(requestsJson, List.class);
        List<String> items = new ArrayList<>();
        for (Object r : requests) items.add(JSON.writeValueAsString(r));
        if (items.isEmpty()) return "[]";
        Broadcast<HadoopConf> conf = jsc.broadcast(new HadoopConf(jsc.hadoopConfiguration()));
        try {
            jsc.setJobDescription(description);
            List<String> results = jsc.parallelize(items, items.size()).map(item -> one(item, conf.value().get())).collect();
            return "[" + String.join(",", results) + "]";
        } finally {
            conf.destroy();
        }
    }

    /** One group's merge, in a task: its result as JSON, an error included. */
    static String one(String requestJson, Configuration conf) throws IOException {
        long began = System.nanoTime();
        Map<?, ?> request = JSON.readValue(requestJson, Map.class);
        String kind = (String) request.get("kind");
        String format = (String) request.get("format");
        @SuppressWarnings("unchecked")
        List<String> inputs = (List<String>) request.get("inputs");
        String output = (String) request.get("output");
        Map<String, Object> result = new LinkedHashMap<>();
        try {
            TaskContext task = TaskContext.get();
            if (task != null && task.attemptNumber() > 0) {
                Path p = new Path(output);  // this group's own name: an earlier attempt's partial output
                p.getFileSystem(conf).delete(p, false);
            }
            if ("copy".equals(kind)) {
                result.put("copy", JSON.readValue(copy(conf, format, requestJson, inputs, output), Map.class));
            } else if ("orc".equals(format)) {
                result.putAll(OrcColumnarMerge.merge(conf, inputs, output).toMap());
            } else if ("parquet".equals(format)) {
                result.putAll(ParquetColumnarMerge.merge(conf, inputs, output).toMap());
            } else {
                result.put("fallback", "the columnar engine merges ORC and Parquet, not " + format);
            }
        } catch (CannotMerge e) {
            result.put("fallback", e.getMessage());
            deleteQuietly(conf, output);
        } catch (LinkageError e) {
            // The cluster's ORC / Parquet / Spark are not those the jar was built against.
            result.put("fallback", "the engine does not link against this cluster's libraries (" + e + ")");
            deleteQuietly(conf, output);
        } catch (Exception e) {
            result.put("error", e.toString());
            deleteQuietly(conf, output);
        }
        result.put("task_nanos", System.nanoTime() - began);
        return JSON.writeValueAsString(result);
    }

    /** The JVM helper's copy merge (HiveCompactionHelper.copyMerge, in the default package). */
    private static String copy(Configuration conf, String format, String requestJson, List<String> inputs, String output)
            throws ReflectiveOperationException, IOException {
        Class<?> helperClass = Class.forName("HiveCompactionHelper");
        Object helper = helperClass.getConstructor().newInstance();
        helperClass.getMethod("setConf", Configuration.class).invoke(helper, conf);
        Method copyMerge = helperClass.getMethod("copyMerge", String.class, String.class, String.class);
        try {
            return (String) copyMerge.invoke(helper, format, JSON.writeValueAsString(inputs), output);
        } catch (InvocationTargetException e) {
            Throwable cause = e.getCause();
            if (cause instanceof IOException io) throw io;
            if (cause instanceof RuntimeException re) throw re;
            throw e;
        }
    }

    private static void deleteQuietly(Configuration conf, String output) {
        try {
            Path p = new Path(output);
            p.getFileSystem(conf).delete(p, false);
        } catch (IOException | RuntimeException ignored) {
            // nothing of ours is left or it stays in the staging folder, which is never committed unverified
        }
    }
}
