// Batched file-system and footer work for the merge job, run inside the driver's JVM.
//
// Compiled at run time by Janino (shipped with every Spark distribution for code generation), so
// there is no jar to build or ship: see jvm_helper.py, which compiles every source file of this
// folder together. Every public method of this class takes and returns JSON text, so one py4j
// round trip does the work of hundreds (one per file, stripe or rename through py4j costs about
// 0.1-0.5 ms; a Parquet footer through ParquetMetadata.toJSON about 50 ms). This class is the
// surface jvm_helper.call reaches; the work is done by one class per concern:
//
//   FileStatuses   listings and statuses, with each file's version (etag, file id, inode)
//   FileMoves      guarded renames (never overwrite, never create a partition's folder)
//   LocalDisk      the local disk's folders and copied ORC files made without a chmod process each
//   TextFiles      small text files: read one; write and publish one on the local disk
//   Footers        footer facts of ORC (OrcFooters) and Parquet (ParquetFooters) files
//   CopyMerge      copy merges (OrcCopy, ParquetCopy), refused by CopyKey, verified by Digests
//
// Janino compiles a subset of Java: no lambdas, type arguments are ignored (hence raw types and
// casts), no try-with-resources.

import java.io.IOException;
import java.util.List;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;

public class HiveCompactionHelper {
    /** The message a move into a folder that does not exist fails with (hadoop_fs.FolderGone). */
    public static final String MISSING_FOLDER = FileMoves.MISSING_FOLDER;

    private final ObjectMapper json = new ObjectMapper();
    private FileStatuses statuses;
    private FileMoves moves;
    private TextFiles texts;
    private Footers footers;
    private CopyMerge copies;
    private Configuration conf;

    public HiveCompactionHelper() {}

    public void setConf(Configuration conf) {
        this.conf = conf;
        Digests digests = new Digests(conf);
        statuses = new FileStatuses(conf);
        moves = new FileMoves(conf, statuses);
        texts = new TextFiles(conf);
        footers = new Footers(conf);
        copies = new CopyMerge(conf, footers, digests, new OrcCopy(conf, footers.orc, digests),
                               new ParquetCopy(conf, footers.parquet));
    }

    /** Sends replies on the py4j connection of the calling thread without Nagle's delay; true if
     *  it could. py4j writes a reply of more than 8 KB in two socket writes; with Nagle on, the
     *  second waits for the first's ACK, which the Python side delays by ~40 ms: every large
     *  reply (a listing, a batch of footers) cost 40 ms more than its work. The thread serving a
     *  Python thread runs that connection (py4j starts it as the thread's Runnable); reading it
     *  needs java.lang opened to reflection, which Spark's launcher does for its JVMs. */
    public boolean noDelay() {
        try {
            java.lang.reflect.Field target = Thread.class.getDeclaredField("target");
            target.setAccessible(true);
            Object connection = target.get(Thread.currentThread());
            if (!(connection instanceof py4j.Py4JServerConnection)) return false;
            ((py4j.Py4JServerConnection) connection).getSocket().setTcpNoDelay(true);
            return true;
        } catch (Exception e) {
            return false;  // only slower
        }
    }

    private String write(Object value) throws IOException { return json.writeValueAsString(value); }

    private List readList(String text) throws IOException { return (List) json.readValue(text, Object.class); }

    /** The direct children of a folder, sorted by name; [] when it does not exist. */
    public String list(String dir) throws IOException {
        return write(statuses.list(dir));
    }

    /** [status or null] for a JSON list of paths. */
    public String statuses(String pathsJson) throws IOException {
        return write(statuses.statuses(readList(pathsJson)));
    }

    /** A small file's text (UTF-8) as a JSON string, or JSON null when it does not exist: one
     *  round trip where an existence check, an open and a read took four. */
    public String readText(String uri) throws IOException {
        return write(texts.read(uri));
    }

    /** Write a small file of the local file system (UTF-8 text), forced to disk (TextFiles.writeLocal). */
    public void writeLocal(String uri, String text) throws IOException {
        texts.writeLocal(uri, text);
    }

    /** Publish a closed local file under a new name by a hard link; false if the name is taken
     *  (TextFiles.linkLocal). */
    public boolean linkLocal(String tmpUri, String uri) throws IOException {
        return texts.linkLocal(tmpUri, uri);
    }

    /** Rename a closed local file over another in one step (TextFiles.replaceLocal). */
    public void replaceLocal(String tmpUri, String uri) throws IOException {
        texts.replaceLocal(tmpUri, uri);
    }

    /** Delete a file (with its checksum file), or a folder with ``recursive``; false if nothing was there. */
    public boolean delete(String uri, boolean recursive) throws IOException {
        org.apache.hadoop.fs.Path p = new org.apache.hadoop.fs.Path(uri);
        return p.getFileSystem(conf).delete(p, recursive);
    }

    /** Create a folder and its missing parents (LocalDisk.makeFolders: no process per folder on the local disk). */
    public void makeFolders(String uri) throws IOException {
        org.apache.hadoop.fs.Path p = new org.apache.hadoop.fs.Path(uri);
        LocalDisk.makeFolders(p.getFileSystem(conf), p, conf);
    }

    /** Move files: JSON [[src, dst, (size, mtime, (version))], ...]; returns moves done (FileMoves.moveAll). */
    public int moveAll(String pairsJson, boolean createFolders) throws IOException {
        return moves.moveAll(readList(pairsJson), createFolders);
    }

    /** For each path of a JSON list, its footer facts (see copy_merge.FileFooter) or {"error"}
     *  (Footers.footers). */
    public String footers(String fmt, String pathsJson, boolean statistics) throws IOException {
        return write(footers.footers(fmt, readList(pathsJson), statistics));
    }

    /** Copy-merge the inputs (JSON list) into ``output`` and read it back (CopyMerge.copyMerge). */
    public String copyMerge(String fmt, String inputsJson, String output) throws IOException {
        return write(copies.copyMerge(fmt, readList(inputsJson), output));
    }
}
