// A real YARN for the tests: Hadoop's MiniYARNCluster (one ResourceManager, one NodeManager) in a
// JVM of its own, until killed. Compiled at run time by scripts/yarn_stack.py against the jars of
// scripts/maven/hdfs/pom.xml (hadoop-client-minicluster has no main class that starts YARN
// without MapReduce's application master, which it does not hold).
//
//   java -cp <classes>:<jars>/* MiniYarn <configuration out> [key=value ...]
//
// The settings given override YARN's; the cluster's own (its bound addresses) are written,
// whole, to the configuration file once it is up.

import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;

import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

public class MiniYarn {
    public static void main(String[] args) throws Exception {
        try {
            start(args);
        } catch (Throwable e) {
            e.printStackTrace();
            System.exit(1);  // the services' threads would keep a JVM that failed to start alive
        }
        Thread.sleep(Long.MAX_VALUE);
    }

    private static void start(String[] args) throws Exception {
        YarnConfiguration conf = new YarnConfiguration();
        for (int i = 1; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            conf.set(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        MiniYARNCluster yarn = new MiniYARNCluster("hive-compaction", 1, 1, 1);
        yarn.init(conf);
        yarn.start();
        File out = new File(args[0]);
        File tmp = new File(out.getPath() + ".tmp");
        try (OutputStream s = new FileOutputStream(tmp)) {
            yarn.getConfig().writeXml(s);
        }
        if (!tmp.renameTo(out)) throw new IllegalStateException("could not write " + out);
    }
}
