package hivecompaction.engine;

import java.io.IOException;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.io.Serializable;

import org.apache.hadoop.conf.Configuration;

/** The driver's Hadoop configuration, sent to the executors once per job (a broadcast): the
 *  file systems' settings and credentials the merge tasks open files with. */
final class HadoopConf implements Serializable {
    private static final long serialVersionUID = 1L;
    private transient Configuration conf;

    HadoopConf(Configuration conf) {
        this.conf = conf;
    }

    Configuration get() {
        return conf;
    }

    private void writeObject(ObjectOutputStream out) throws IOException {
        conf.write(out);
    }

    private void readObject(ObjectInputStream in) throws IOException {
        conf = new Configuration(false);
        conf.readFields(in);
    }
}
