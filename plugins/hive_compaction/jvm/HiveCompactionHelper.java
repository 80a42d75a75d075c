// Batched file-system and footer work for the merge job, run inside the driver's JVM.
//
// Compiled at run time by Janino (shipped with every Spark distribution for code generation), so
// there is no jar to build or ship: see jvm_helper.py. Every method takes and returns JSON text,
// so one py4j round trip does the work of hundreds (one per file, stripe or rename through
// py4j costs about 0.1-0.5 ms; a Parquet footer through ParquetMetadata.toJSON about 50 ms).
//
// Janino compiles a subset of Java: no lambdas, type arguments are ignored (hence raw types and
// casts), no try-with-resources.

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

public class HiveCompactionHelper {
    private final ObjectMapper json = new ObjectMapper();
    private Configuration conf;

    public HiveCompactionHelper() {}

    public void setConf(Configuration conf) { this.conf = conf; }

    private FileSystem fs(Path p) throws IOException { return p.getFileSystem(conf); }

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

    private Object read(String text) throws IOException { return json.readValue(text, Object.class); }

    private static String why(Throwable e) {
        String m = e.getMessage();
        return e.getClass().getName() + (m == null ? "" : ": " + m);
    }

    private static Map entry(FileStatus st) {
        Map m = new LinkedHashMap();
        m.put("path", st.getPath().toString());
        m.put("name", st.getPath().getName());
        m.put("size", Long.valueOf(st.getLen()));
        m.put("mtime", Long.valueOf(st.getModificationTime()));
        m.put("dir", Boolean.valueOf(st.isDirectory()));
        return m;
    }

    /** The direct children of a folder, sorted by name; [] when it does not exist. */
    public String list(String dir) throws IOException {
        Path p = new Path(dir);
        FileSystem fs = fs(p);
        List out = new ArrayList();
        if (!fs.exists(p)) return "[]";
        FileStatus[] children = fs.listStatus(p);
        Arrays.sort(children, new Comparator() {
            public int compare(Object a, Object b) {
                return ((FileStatus) a).getPath().getName().compareTo(((FileStatus) b).getPath().getName());
            }
        });
        for (int i = 0; i < children.length; i++) out.add(entry(children[i]));
        return write(out);
    }

    /** [status or null] for a JSON list of paths. */
    public String statuses(String pathsJson) throws IOException {
        List paths = (List) read(pathsJson);
        List out = new ArrayList();
        for (int i = 0; i < paths.size(); i++) {
            Path p = new Path((String) paths.get(i));
            FileSystem fs = fs(p);
            out.add(fs.exists(p) ? entry(fs.getFileStatus(p)) : null);
        }
        return write(out);
    }

    /** Move files: JSON [[src, dst], ...]. A missing src is skipped (a replay after a crash); an
     *  existing dst is an error (never overwrite). Stops at the first failure. Returns moves done. */
    public int moveAll(String pairsJson) throws IOException {
        List pairs = (List) read(pairsJson);
        int moved = 0;
        for (int i = 0; i < pairs.size(); i++) {
            List pair = (List) pairs.get(i);
            Path src = new Path((String) pair.get(0));
            Path dst = new Path((String) pair.get(1));
            FileSystem fs = fs(src);
            FileStatus st;
            try {
                st = fs.getFileStatus(src);
            } catch (java.io.FileNotFoundException e) {
                continue;
            }
            // A pair that names the file's size and time moves only that file, never one a writer
            // put under its name since (an INSERT OVERWRITE reusing 000000_0).
            if (pair.size() > 3 && (st.getLen() != ((Number) pair.get(2)).longValue()
                    || st.getModificationTime() != ((Number) pair.get(3)).longValue())) continue;
            if (fs.exists(dst)) throw new IOException("will not overwrite " + dst + " (moving " + src + ")");
            Path parent = dst.getParent();
            if (!fs.exists(parent) && !fs.mkdirs(parent)) throw new IOException("could not create folder " + parent);
            if (!fs.rename(src, dst)) throw new IOException("rename " + src + " -> " + dst + " failed");
            moved++;
        }
        return moved;
    }

    // --- footers ---------------------------------------------------------------------------

    /** For each path of a JSON list, its footer facts (see copy_merge.FileFooter) or {"error"}. */
    public String footers(String fmt, String pathsJson) throws IOException {
        List paths = (List) read(pathsJson);
        List out = new ArrayList();
        for (int i = 0; i < paths.size(); i++) {
            String path = (String) paths.get(i);
            try {
                out.add("orc".equals(fmt) ? orcFooter(path) : parquetFooter(path));
            } catch (Exception e) {
                out.add(error(e));
            }
        }
        return write(out);
    }

    private static List unit(List what, long offset, long length) {
        List u = new ArrayList();
        u.add(what);
        u.add(Long.valueOf(offset));
        u.add(Long.valueOf(length));
        return u;
    }

    /** Adds a sorted map's entries to ``extra`` as [key, value] pairs, in key order. */
    private static void addEntries(List extra, TreeMap sorted) {
        Object[] keys = sorted.keySet().toArray();
        for (int i = 0; i < keys.length; i++) extra.add(Arrays.asList(new Object[] {keys[i], sorted.get(keys[i])}));
    }

    /** One file's footer facts, the shape copy_merge.FileFooter is built from. */
    private static Map footer(long rows, List blockRows, String schema, String compression, String version,
                              List blockBytes, List extra, List units) {
        Map m = new LinkedHashMap();
        m.put("rows", Long.valueOf(rows));
        m.put("block_rows", blockRows);
        m.put("schema", schema);
        m.put("compression", compression);
        m.put("version", version);
        m.put("block_bytes", blockBytes);
        m.put("extra", extra);
        m.put("units", units);
        return m;
    }

    private org.apache.orc.Reader orcReader(Path p) throws IOException {
        return org.apache.orc.OrcFile.createReader(p, org.apache.orc.OrcFile.readerOptions(conf).filesystem(fs(p)));
    }

    private Map orcFooter(String path) throws IOException {
        org.apache.orc.Reader r = orcReader(new Path(path));
        try {
            return orcFacts(r);
        } finally {
            r.close();
        }
    }

    private static Map orcFacts(org.apache.orc.Reader r) throws IOException {
        List blockRows = new ArrayList(), blockBytes = new ArrayList(), units = new ArrayList();
        List stripes = r.getStripes();
        for (int i = 0; i < stripes.size(); i++) {
            org.apache.orc.StripeInformation s = (org.apache.orc.StripeInformation) stripes.get(i);
            blockRows.add(Long.valueOf(s.getNumberOfRows()));
            blockBytes.add(Long.valueOf(s.getLength()));
            List what = new ArrayList();
            what.add("stripe");
            what.add(Long.valueOf(s.getNumberOfRows()));
            units.add(unit(what, s.getOffset(), s.getLength()));
        }
        List extra = new ArrayList();
        extra.add(Arrays.asList(new Object[] {"row_index_stride", String.valueOf(r.getRowIndexStride())}));
        TreeMap meta = new TreeMap();
        List keys = r.getMetadataKeys();
        for (int i = 0; i < keys.size(); i++) {
            String k = (String) keys.get(i);
            ByteBuffer v = (ByteBuffer) r.getMetadataValue(k).duplicate();
            meta.put("meta:" + k, StandardCharsets.ISO_8859_1.decode(v).toString());  // lossless bytes -> text
        }
        addEntries(extra, meta);
        return footer(r.getNumberOfRows(), blockRows, r.getSchema().toString(), r.getCompressionKind().name(),
                      r.getFileVersion().getName() + " " + r.getWriterVersion().name(), blockBytes, extra, units);
    }

    private org.apache.parquet.ParquetReadOptions parquetOptions;

    private Map parquetFooter(String path) throws IOException {
        // Building read options copies the whole Hadoop configuration: ~6 ms, so once, not per file.
        if (parquetOptions == null) parquetOptions = org.apache.parquet.HadoopReadOptions.builder(conf).build();
        org.apache.parquet.hadoop.ParquetFileReader reader = org.apache.parquet.hadoop.ParquetFileReader.open(
            org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(new Path(path), conf), parquetOptions);
        try {
            org.apache.parquet.hadoop.metadata.ParquetMetadata meta = reader.getFooter();
            org.apache.parquet.hadoop.metadata.FileMetaData fmd = meta.getFileMetaData();
            List blocks = meta.getBlocks();
            List blockRows = new ArrayList(), blockBytes = new ArrayList(), units = new ArrayList();
            TreeMap codecs = new TreeMap();
            long rows = 0;
            for (int b = 0; b < blocks.size(); b++) {
                org.apache.parquet.hadoop.metadata.BlockMetaData block =
                    (org.apache.parquet.hadoop.metadata.BlockMetaData) blocks.get(b);
                rows += block.getRowCount();
                blockRows.add(Long.valueOf(block.getRowCount()));
                blockBytes.add(Long.valueOf(block.getCompressedSize()));
                List columns = block.getColumns();
                for (int c = 0; c < columns.size(); c++) {
                    org.apache.parquet.hadoop.metadata.ColumnChunkMetaData col =
                        (org.apache.parquet.hadoop.metadata.ColumnChunkMetaData) columns.get(c);
                    String codec = col.getCodec().name();
                    codecs.put(codec, codec);
                    List what = new ArrayList();
                    what.add(col.getPath().toDotString());
                    what.add(codec);
                    what.add(Long.valueOf(col.getValueCount()));
                    units.add(unit(what, col.getStartingPos(), col.getTotalSize()));
                }
            }
            // ParquetRewriter records its inputs' writers under this key: it must not split groups.
            List extra = new ArrayList();
            TreeMap kv = new TreeMap(fmd.getKeyValueMetaData());
            kv.remove("original.created.by");
            addEntries(extra, kv);
            StringBuilder compression = new StringBuilder();
            Object[] names = codecs.keySet().toArray();
            for (int i = 0; i < names.length; i++) compression.append(i == 0 ? "" : "+").append((String) names[i]);
            return footer(rows, blockRows, fmd.getSchema().toString(), compression.toString(),
                          String.valueOf(fmd.getCreatedBy()), blockBytes, extra, units);
        } finally {
            reader.close();
        }
    }

    // --- content digests -------------------------------------------------------------------

    private final ThreadLocal buffers = new ThreadLocal();
    private static final int KEPT_BUFFER = 4 << 20;

    /** A buffer of at least ``size`` bytes: the calling thread's reusable one, or a new one for
     *  a block bigger than KEPT_BUFFER (a whole stripe must sit in memory to be appended; big
     *  stripes are not kept alive between calls). */
    private byte[] buffer(int size) {
        if (size > KEPT_BUFFER) return new byte[size];
        byte[] b = (byte[]) buffers.get();
        if (b == null || b.length < size) {
            b = new byte[Math.max(size, 1 << 20)];
            buffers.set(b);
        }
        return b;
    }

    private static MessageDigest sha256() throws IOException {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IOException(e);
        }
    }

    /** SHA-256 (hex) of each [offset, length] range of a file, in order. */
    private List rangeDigests(Path p, List ranges) throws IOException {
        MessageDigest md = sha256();
        byte[] buffer = buffer(1 << 20);
        List hashes = new ArrayList();
        FSDataInputStream in = fs(p).open(p);
        try {
            for (int r = 0; r < ranges.size(); r++) {
                List range = (List) ranges.get(r);
                long offset = ((Number) range.get(0)).longValue();
                long left = ((Number) range.get(1)).longValue();
                md.reset();
                // seek + read, not positional reads: Hadoop's checksummed file systems open the
                // file (and its .crc) afresh for every positional read.
                in.seek(offset);
                while (left > 0) {
                    int n = (int) Math.min((long) buffer.length, left);
                    in.readFully(buffer, 0, n);  // EOFException when the file ends early
                    md.update(buffer, 0, n);
                    left -= n;
                }
                hashes.add(hex(md.digest()));
            }
        } finally {
            in.close();
        }
        return hashes;
    }

    private static Map error(Exception e) {
        Map m = new LinkedHashMap();
        m.put("error", why(e));
        return m;
    }

    private static String hex(byte[] bytes) {
        StringBuilder sb = new StringBuilder(bytes.length * 2);
        for (int i = 0; i < bytes.length; i++) {
            int v = bytes[i] & 0xff;
            sb.append(Character.forDigit(v >> 4, 16)).append(Character.forDigit(v & 15, 16));
        }
        return sb.toString();
    }

    // --- copy merges -----------------------------------------------------------------------

    /** Copy-merge the inputs (JSON list) into ``output`` (which must not exist), then read the
     *  output back, all in one call. Returns JSON {"inputs": [footer facts + "digests"],
     *  "output": footer facts + "digests" + "size"}: the digests are SHA-256 of every copied unit
     *  (ORC stripe / Parquet column chunk), the inputs' taken from the bytes as they were copied
     *  (ORC) or read again (Parquet), the output's read back after it was closed; the caller
     *  compares them. Or {"error", "refused"}: refused when the inputs cannot share one footer
     *  (nothing was written); any other failure deletes the output. */
    public String copyMerge(String fmt, String inputsJson, String output) throws IOException {
        List inputs = (List) read(inputsJson);
        Path out = new Path(output);
        Map result = new LinkedHashMap();
        if (inputs.isEmpty() || fs(out).exists(out)) {
            result.put("error", inputs.isEmpty() ? "no inputs" : "output " + output + " already exists");
            result.put("refused", Boolean.TRUE);
            return write(result);
        }
        try {
            List facts = "orc".equals(fmt) ? copyOrc(inputs, out) : copyParquet(inputs, out);
            Map got = "orc".equals(fmt) ? orcFooter(output) : parquetFooter(output);
            got.put("digests", rangeDigests(out, ranges((List) got.get("units"))));
            got.put("size", Long.valueOf(fs(out).getFileStatus(out).getLen()));
            result.put("inputs", facts);
            result.put("output", got);
        } catch (Refused e) {  // before the output was created
            result.put("error", e.getMessage());
            result.put("refused", Boolean.TRUE);
        } catch (Exception e) {
            result.put("error", why(e));
            result.put("refused", Boolean.FALSE);
            // The writer may have created the output before failing; ours: it did not exist before.
            try { fs(out).delete(out, false); } catch (Exception ignored) { }
        }
        return write(result);
    }

    /** Inputs that cannot share one footer: nothing was written. */
    private static class Refused extends IOException {
        Refused(String message) { super(message); }
    }

    private static List ranges(List units) {
        List out = new ArrayList();
        for (int i = 0; i < units.size(); i++) {
            List u = (List) units.get(i);
            out.add(Arrays.asList(new Object[] {u.get(1), u.get(2)}));
        }
        return out;
    }

    /** What a copy must agree on: schema, codec, version, extra (see copy_merge.FileFooter.copy_key). */
    private static List copyKey(Map facts) {
        return Arrays.asList(new Object[] {facts.get("schema"), facts.get("compression"), facts.get("version"),
                                           facts.get("extra")});
    }

    private static void checkOneKey(List inputs, List facts) throws Refused {
        List differing = new ArrayList();
        for (int i = 1; i < facts.size(); i++) {
            if (!copyKey((Map) facts.get(i)).equals(copyKey((Map) facts.get(0)))) differing.add(inputs.get(i));
        }
        if (!differing.isEmpty()) {
            throw new Refused("inputs cannot be copy-merged together: " + differing + " differ from " + inputs.get(0)
                              + " in schema, compression, version or metadata");
        }
    }

    /** OrcFile.mergeFiles' stripe copy (same writer options), done here so that each stripe is
     *  hashed from the very bytes that are appended, and so that an input is never skipped:
     *  all inputs share one footer or nothing is written. Encrypted files are refused. */
    private List copyOrc(List inputs, Path out) throws Exception {
        int n = inputs.size();
        org.apache.orc.Reader[] readers = new org.apache.orc.Reader[n];
        List facts = new ArrayList();
        try {
            int bufferSize = 0;
            for (int i = 0; i < n; i++) {
                readers[i] = orcReader(new Path((String) inputs.get(i)));
                facts.add(orcFacts(readers[i]));
                if (readers[i].getColumnEncryptionKeys().length > 0) {
                    throw new Refused("encrypted ORC file " + inputs.get(i) + " is not copy-merged");
                }
                bufferSize = Math.max(bufferSize, readers[i].getCompressionSize());
            }
            checkOneKey(inputs, facts);
            org.apache.orc.Reader first = readers[0];
            org.apache.orc.OrcFile.WriterOptions opts = org.apache.orc.OrcFile.writerOptions(conf)
                .fileSystem(fs(out)).overwrite(false).setSchema(first.getSchema())
                .compress(first.getCompressionKind()).version(first.getFileVersion())
                .rowIndexStride(first.getRowIndexStride()).bufferSize(bufferSize);
            // The inputs' writer version stays (readers use it to work around old writers' bugs).
            // mergeFiles sets it through a protected method of its own package; so do we.
            java.lang.reflect.Method writerVersion = org.apache.orc.OrcFile.WriterOptions.class.getDeclaredMethod(
                "writerVersion", new Class[] {org.apache.orc.OrcFile.WriterVersion.class});
            writerVersion.setAccessible(true);
            writerVersion.invoke(opts, new Object[] {first.getWriterVersion()});
            if (first.getCompressionKind() != org.apache.orc.CompressionKind.NONE) opts.enforceBufferSize();
            org.apache.orc.Writer writer = org.apache.orc.OrcFile.createWriter(out, opts);
            boolean closed = false;
            MessageDigest md = sha256();
            try {
                for (int i = 0; i < n; i++) {
                    Path p = new Path((String) inputs.get(i));
                    List stats = readers[i].getVariantStripeStatistics((org.apache.orc.EncryptionVariant) null);
                    List stripes = readers[i].getStripes();
                    List digests = new ArrayList();
                    // The stream the reader opened for the tail (as mergeFiles does): one open per input.
                    FSDataInputStream in = readers[i] instanceof org.apache.orc.impl.ReaderImpl
                        ? ((org.apache.orc.impl.ReaderImpl) readers[i]).takeFile() : null;
                    if (in == null) in = fs(p).open(p);
                    try {
                        for (int k = 0; k < stripes.size(); k++) {
                            org.apache.orc.StripeInformation s = (org.apache.orc.StripeInformation) stripes.get(k);
                            int length = (int) s.getLength();
                            byte[] b = buffer(length);
                            in.seek(s.getOffset());  // not a positional read: see rangeDigests
                            in.readFully(b, 0, length);
                            md.reset();
                            md.update(b, 0, length);
                            digests.add(hex(md.digest()));
                            writer.appendStripe(b, 0, length, s, new org.apache.orc.StripeStatistics[] {
                                (org.apache.orc.StripeStatistics) stats.get((int) s.getStripeId())});
                        }
                    } finally {
                        in.close();
                    }
                    ((Map) facts.get(i)).put("digests", digests);
                }
                List keys = first.getMetadataKeys();  // equal in every input (part of the copy key)
                for (int k = 0; k < keys.size(); k++) {
                    String key = (String) keys.get(k);
                    writer.addUserMetadata(key, first.getMetadataValue(key));
                }
                closed = true;
                writer.close();
            } finally {
                if (!closed) {
                    try { writer.close(); } catch (Exception ignored) { }  // the caller deletes the output
                }
            }
        } finally {
            for (int i = 0; i < n; i++) {
                if (readers[i] != null) {
                    try { readers[i].close(); } catch (Exception ignored) { }
                }
            }
        }
        return facts;
    }

    /** ParquetRewriter without prune/mask/encrypt/codec options streams each column chunk's
     *  bytes as they are (ParquetFileWriter.appendColumnChunk), keeping column/offset indexes
     *  and bloom filters; no page is decoded. The inputs' chunks are hashed by reading them
     *  again afterwards (the rewriter gives no hook into its copy). */
    private List copyParquet(List inputs, Path out) throws IOException {
        List facts = new ArrayList();
        List paths = new ArrayList();
        for (int i = 0; i < inputs.size(); i++) {
            paths.add(new Path((String) inputs.get(i)));
            facts.add(parquetFooter((String) inputs.get(i)));
        }
        checkOneKey(inputs, facts);
        org.apache.parquet.hadoop.rewrite.RewriteOptions opts =
            new org.apache.parquet.hadoop.rewrite.RewriteOptions.Builder(conf, paths, out).build();
        org.apache.parquet.hadoop.rewrite.ParquetRewriter rewriter =
            new org.apache.parquet.hadoop.rewrite.ParquetRewriter(opts);  // creates the output
        boolean ok = false;
        try {
            rewriter.processBlocks();
            ok = true;
        } finally {
            if (ok) {
                rewriter.close();  // writes the footer
            } else {
                try { rewriter.close(); } catch (Exception ignored) { }  // release the stream; the caller deletes
            }
        }
        for (int i = 0; i < inputs.size(); i++) {
            Map f = (Map) facts.get(i);
            f.put("digests", rangeDigests((Path) paths.get(i), ranges((List) f.get("units"))));
        }
        return facts;
    }
}
