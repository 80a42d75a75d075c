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

    private static Map entry(FileStatus st, Path path, String version) {
        Map m = new LinkedHashMap();
        m.put("path", path.toString());
        m.put("name", path.getName());
        m.put("size", Long.valueOf(st.getLen()));
        m.put("mtime", Long.valueOf(st.getModificationTime()));
        m.put("dir", Boolean.valueOf(st.isDirectory()));
        if (version != null) m.put("version", version);
        return m;
    }

    /** Where a path's bytes are: through a viewfs mount, the target's path (whose file system's
     *  statuses carry the file id a viewfs status hides); else the path itself. */
    private Path stored(FileSystem fs, Path p) throws IOException {
        return fs instanceof org.apache.hadoop.fs.viewfs.ViewFileSystem ? fs.resolvePath(p) : p;
    }

    /** The status of a path as its storage has it, or null when it does not exist. */
    private FileStatus stat(Path stored) throws IOException {
        try {
            return fs(stored).getFileStatus(stored);
        } catch (java.io.FileNotFoundException e) {
            return null;
        }
    }

    /** What tells a file apart from another of the same name, size and time written since, where
     *  the storage has it: the etag of S3A and ABFS statuses (Hadoop's EtagSource), the file id
     *  (inode number) of HDFS's, the inode of a local file (the tests' stand-in for HDFS). Each
     *  survives a rename within the file system; null where there is none. By reflection, so the
     *  helper compiles against any Hadoop. */
    private String version(Path stored, FileStatus st) {
        if (st.isDirectory()) return null;
        Object etag = property(st, "org.apache.hadoop.fs.EtagSource", "getEtag");
        if (etag != null) return "etag:" + etag;
        Object id = property(st, "org.apache.hadoop.hdfs.protocol.HdfsFileStatus", "getFileId");
        if (id != null) return "id:" + id;
        try {
            FileSystem fs = fs(stored);
            if (fs instanceof org.apache.hadoop.fs.LocalFileSystem) {
                return "ino:" + java.nio.file.Files.getAttribute(
                    ((org.apache.hadoop.fs.LocalFileSystem) fs).pathToFile(stored).toPath(), "unix:ino",
                    new java.nio.file.LinkOption[0]);
            }
        } catch (Exception e) {
            // not a unix file system
        }
        return null;
    }

    private static final Map INTERFACES = new java.util.concurrent.ConcurrentHashMap();

    /** ``o.method()`` if ``o`` implements the interface (called through it: the implementing
     *  class may not be public, as ABFS's is not); null if the interface is absent or not implemented. */
    private static Object property(Object o, String iface, String method) {
        try {
            Object known = INTERFACES.get(iface);
            if (known == null) {
                try {
                    known = Class.forName(iface, false, FileStatus.class.getClassLoader());
                } catch (ClassNotFoundException e) {
                    known = Boolean.FALSE;  // this Hadoop has no such interface
                }
                INTERFACES.put(iface, known);
            }
            if (!(known instanceof Class) || !((Class) known).isInstance(o)) return null;
            return ((Class) known).getMethod(method, new Class[0]).invoke(o, new Object[0]);
        } catch (Exception e) {
            return null;
        }
    }

    /** The direct children of a folder, sorted by name; [] when it does not exist. */
    public String list(String dir) throws IOException {
        Path p = new Path(dir);
        FileSystem fs = fs(p);
        List out = new ArrayList();
        Path folder;
        try {
            folder = stored(fs, p);
        } catch (java.io.FileNotFoundException e) {
            return "[]";
        }
        FileStatus[] children;
        try {
            children = fs(folder).listStatus(folder);
        } catch (java.io.FileNotFoundException e) {
            return "[]";
        }
        Arrays.sort(children, new Comparator() {
            public int compare(Object a, Object b) {
                return ((FileStatus) a).getPath().getName().compareTo(((FileStatus) b).getPath().getName());
            }
        });
        for (int i = 0; i < children.length; i++) {
            // Named by the path asked for (a viewfs path stays one), the status as stored.
            Path child = fs.makeQualified(new Path(p, children[i].getPath().getName()));
            out.add(entry(children[i], child, version(children[i].getPath(), children[i])));
        }
        return write(out);
    }

    /** [status or null] for a JSON list of paths. */
    public String statuses(String pathsJson) throws IOException {
        List paths = (List) read(pathsJson);
        List out = new ArrayList();
        for (int i = 0; i < paths.size(); i++) {
            Path p = new Path((String) paths.get(i));
            FileStatus st;
            Path where;
            try {
                where = stored(fs(p), p);
                st = stat(where);
            } catch (java.io.FileNotFoundException e) {
                st = null;
                where = p;
            }
            out.add(st == null ? null : entry(st, fs(p).makeQualified(p), version(where, st)));
        }
        return write(out);
    }

    /** A small file's text (UTF-8) as a JSON string, or JSON null when it does not exist: one
     *  round trip where an existence check, an open and a read took four. */
    public String readText(String uri) throws IOException {
        Path p = new Path(uri);
        FSDataInputStream in;
        try {
            in = fs(p).open(p);
        } catch (java.io.FileNotFoundException e) {
            return "null";
        }
        try {
            return write(new String(org.apache.commons.io.IOUtils.toByteArray(in), StandardCharsets.UTF_8));
        } finally {
            in.close();
        }
    }

    /** Write a small file of the local file system (UTF-8 text), forced to disk before it returns,
     *  creating its folder if missing (a viewfs path is resolved to its mount's folder). Through
     *  java.io: without its native library, Hadoop's local file system sets each new file's mode,
     *  and its checksum file's, with a forked chmod (~5 ms a file, twice per journal written). No
     *  checksum file is made: the name it is published under (hard link, rename) has none either. */
    public void writeLocal(String uri, String text) throws IOException {
        Path p = new Path(uri);
        FileSystem fs = fs(p);
        if (!fs.exists(p.getParent())) fs.mkdirs(p.getParent());
        Path folder = fs.resolvePath(p.getParent());
        if (!"file".equals(folder.toUri().getScheme())) {
            throw new IOException("not on the local file system: " + uri + " (" + folder + ")");
        }
        java.io.FileOutputStream out = new java.io.FileOutputStream(
            new java.io.File(new java.io.File(folder.toUri().getPath()), p.getName()));
        try {
            out.write(text.getBytes(StandardCharsets.UTF_8));
            out.getChannel().force(true);
        } finally {
            out.close();
        }
    }

    /** The message a move into a folder that does not exist fails with (hadoop_fs.FolderGone). */
    public static final String MISSING_FOLDER = "no such folder to move into: ";

    /** Move files: JSON [[src, dst], ...]. A missing src is skipped (a replay after a crash); an
     *  existing dst is an error (never overwrite). Stops at the first failure. Returns moves done.
     *  ``createFolders`` false (moves into a partition): a dst folder that does not exist is
     *  never created (a partition dropped meanwhile would be re-created, and MSCK REPAIR would
     *  register it again): FileNotFoundException starting with MISSING_FOLDER. */
    public int moveAll(String pairsJson, boolean createFolders) throws IOException {
        List pairs = (List) read(pairsJson);
        int moved = 0;
        for (int i = 0; i < pairs.size(); i++) {
            List pair = (List) pairs.get(i);
            Path src = new Path((String) pair.get(0));
            Path dst = new Path((String) pair.get(1));
            FileSystem fs = fs(src);
            Path where;
            FileStatus st;
            try {
                where = stored(fs, src);
                st = stat(where);
            } catch (java.io.FileNotFoundException e) {
                continue;
            }
            if (st == null) continue;
            // A pair that names the file's size, time (and version) moves only that file, never one
            // a writer put under its name since (an INSERT OVERWRITE reusing 000000_0).
            if (pair.size() > 3 && (st.getLen() != ((Number) pair.get(2)).longValue()
                    || st.getModificationTime() != ((Number) pair.get(3)).longValue())) continue;
            if (pair.size() > 4 && pair.get(4) != null && !pair.get(4).equals(version(where, st))) continue;
            if (fs.exists(dst)) throw new IOException("will not overwrite " + dst + " (moving " + src + ")");
            Path parent = dst.getParent();
            if (createFolders) {
                if (!fs.exists(parent) && !fs.mkdirs(parent)) throw new IOException("could not create folder " + parent);
                if (!fs.rename(src, dst)) throw new IOException("rename " + src + " -> " + dst + " failed");
            } else if (!renameIntoExisting(fs, src, dst)) {
                if (!fs.exists(parent)) throw new java.io.FileNotFoundException(MISSING_FOLDER + parent);
                throw new IOException("rename " + src + " -> " + dst + " failed");
            }
            moved++;
        }
        return moved;
    }

    /** Renames without creating dst's folder; false if it failed (the folder does not exist?).
     *  HDFS's rename fails when the folder is missing. The local file system's falls back to a
     *  copy when rename(2) fails, and that copy creates the folder: there the file (and its
     *  checksum file) moves by java.nio's move, a rename(2) that never creates a folder. */
    private boolean renameIntoExisting(FileSystem fs, Path src, Path dst) throws IOException {
        Path parent;
        try {
            parent = fs.resolvePath(dst.getParent());  // through a viewfs mount
        } catch (java.io.FileNotFoundException e) {
            return false;
        }
        FileSystem target = parent.getFileSystem(conf);
        if (!(target instanceof org.apache.hadoop.fs.LocalFileSystem)) return fs.rename(src, dst);
        org.apache.hadoop.fs.LocalFileSystem local = (org.apache.hadoop.fs.LocalFileSystem) target;
        Path from = fs.resolvePath(src);
        Path to = new Path(parent, dst.getName());
        if (!nioMove(local, from, to)) return false;
        Path crc = local.getChecksumFile(from);
        if (local.exists(crc)) nioMove(local, crc, local.getChecksumFile(to));  // without it the file still reads
        return true;
    }

    private static boolean nioMove(org.apache.hadoop.fs.LocalFileSystem local, Path from, Path to) throws IOException {
        try {
            // No REPLACE_EXISTING: an existing target fails too.
            java.nio.file.Files.move(local.pathToFile(from).toPath(), local.pathToFile(to).toPath(),
                                     new java.nio.file.CopyOption[0]);
            return true;
        } catch (java.nio.file.NoSuchFileException e) {
            return false;
        }
    }

    // --- footers ---------------------------------------------------------------------------

    /** For each path of a JSON list, its footer facts (see copy_merge.FileFooter) or {"error"}.
     *  ``statistics``: also a digest of each copy unit's statistics (ORC stripe statistics,
     *  Parquet column chunk statistics) and, for ORC, whether the file's column statistics are
     *  the merge of its stripes' (``file_stats``); taken from the footer already read. */
    public String footers(String fmt, String pathsJson, boolean statistics) throws IOException {
        List paths = (List) read(pathsJson);
        List out = new ArrayList();
        for (int i = 0; i < paths.size(); i++) {
            String path = (String) paths.get(i);
            try {
                out.add("orc".equals(fmt) ? orcFooter(path, statistics) : parquetFooter(path, statistics));
            } catch (Exception e) {
                out.add(error(e));
            }
        }
        return write(out);
    }

    /** [what, offset, length] of one copy unit, and the digest of its statistics if read. */
    private static List unit(List what, long offset, long length, String stats) {
        List u = new ArrayList();
        u.add(what);
        u.add(Long.valueOf(offset));
        u.add(Long.valueOf(length));
        if (stats != null) u.add(stats);
        return u;
    }

    /** Adds a sorted map's entries to ``extra`` as [key, value] pairs, in key order. */
    private static void addEntries(List extra, TreeMap sorted) {
        Object[] keys = sorted.keySet().toArray();
        for (int i = 0; i < keys.length; i++) extra.add(Arrays.asList(new Object[] {keys[i], sorted.get(keys[i])}));
    }

    /** One file's footer facts, the shape copy_merge.FileFooter is built from. */
    private static Map footer(long rows, List blockRows, String schema, String compression, String version,
                              List blockBytes, List extra, List units, String noCopy) {
        Map m = new LinkedHashMap();
        m.put("rows", Long.valueOf(rows));
        m.put("block_rows", blockRows);
        m.put("schema", schema);
        m.put("compression", compression);
        m.put("version", version);
        m.put("block_bytes", blockBytes);
        m.put("extra", extra);
        m.put("units", units);
        m.put("no_copy", noCopy);
        return m;
    }

    private org.apache.orc.Reader orcReader(Path p) throws IOException {
        return org.apache.orc.OrcFile.createReader(p, org.apache.orc.OrcFile.readerOptions(conf).filesystem(fs(p)));
    }

    private Map orcFooter(String path, boolean statistics) throws IOException {
        org.apache.orc.Reader r = orcReader(new Path(path));
        try {
            return orcFacts(r, statistics);
        } finally {
            r.close();
        }
    }

    /** The calendar an ORC file's dates and timestamps are written in, as its reader takes it:
     *  "proleptic" (ORC 1.6+ writers with orc.proleptic.gregorian=true, e.g. Hive 3.1.3+/4) or
     *  "hybrid" (Julian before 1582-10-15; Spark's and older writers'; a file that records no
     *  calendar is read as orc.proleptic.gregorian.default says, hybrid unless set). */
    private static String calendar(org.apache.orc.Reader r) {
        return r.writerUsedProlepticGregorian() ? "proleptic" : "hybrid";
    }

    /** Why an ORC file's stripes must not be copied into a footer this writer makes, or "". */
    private static String orcNoCopy(org.apache.orc.Reader r) {
        if (r.getColumnEncryptionKeys().length > 0) return "encrypted columns";
        org.apache.orc.OrcFile.WriterImplementation impl = r.getWriterVersion().getWriterImplementation();
        if (impl != org.apache.orc.OrcFile.WriterImplementation.ORC_JAVA) {
            // The writer always records itself as ORC_JAVA: readers would apply the Java writer's
            // version rules (e.g. trust the C++ writer's bad bloom filters, ORC-1025).
            return "written by " + impl.name() + ", and a copy's footer would name the ORC Java writer";
        }
        return "";
    }

    private static String sha256Hex(byte[] bytes) throws IOException {
        MessageDigest md = sha256();
        md.update(bytes);
        return hex(md.digest());
    }

    /** "" when the file-level column statistics equal, byte for byte, the merge of its stripes'
     *  statistics in stripe order (what an ORC writer records for appended stripes), else which
     *  columns differ. Works on the footer already read. */
    private static String orcFileStatsCheck(org.apache.orc.Reader r, List stripeStats) {
        org.apache.orc.TypeDescription schema = r.getSchema();
        List fileStats = r.getOrcProtoFileStatistics();
        List bad = new ArrayList();
        for (int c = 0; c < fileStats.size(); c++) {
            org.apache.orc.TypeDescription type = schema.findSubtype(c);
            org.apache.orc.impl.ColumnStatisticsImpl merged =
                org.apache.orc.impl.ColumnStatisticsImpl.create(type, r.writerUsedProlepticGregorian());
            for (int k = 0; k < stripeStats.size(); k++) {
                org.apache.orc.OrcProto.StripeStatistics ss = (org.apache.orc.OrcProto.StripeStatistics) stripeStats.get(k);
                merged.merge(org.apache.orc.impl.ColumnStatisticsImpl.deserialize(type, ss.getColStats(c)));
            }
            byte[] want = merged.serialize().build().toByteArray();
            byte[] got = ((org.apache.orc.OrcProto.ColumnStatistics) fileStats.get(c)).toByteArray();
            if (!Arrays.equals(want, got)) bad.add(Integer.valueOf(c));
        }
        return bad.isEmpty() ? "" : "file statistics of column(s) " + bad + " are not the merge of the stripes'";
    }

    private static Map orcFacts(org.apache.orc.Reader r, boolean statistics) throws IOException {
        List blockRows = new ArrayList(), blockBytes = new ArrayList(), units = new ArrayList();
        List stripes = r.getStripes();
        // Stripe statistics sit in the file tail the reader has already read: no I/O.
        List stripeStats = statistics ? r.getOrcProtoStripeStatistics() : null;
        if (statistics && stripeStats.size() != stripes.size()) {
            throw new IOException("the file has statistics for " + stripeStats.size() + " of its " + stripes.size()
                                  + " stripes");
        }
        for (int i = 0; i < stripes.size(); i++) {
            org.apache.orc.StripeInformation s = (org.apache.orc.StripeInformation) stripes.get(i);
            blockRows.add(Long.valueOf(s.getNumberOfRows()));
            blockBytes.add(Long.valueOf(s.getLength()));
            List what = new ArrayList();
            what.add("stripe");
            what.add(Long.valueOf(s.getNumberOfRows()));
            String stats = statistics
                ? sha256Hex(((org.apache.orc.OrcProto.StripeStatistics) stripeStats.get(i)).toByteArray()) : null;
            units.add(unit(what, s.getOffset(), s.getLength(), stats));
        }
        List extra = new ArrayList();
        extra.add(Arrays.asList(new Object[] {"calendar", calendar(r)}));
        extra.add(Arrays.asList(new Object[] {"row_index_stride", String.valueOf(r.getRowIndexStride())}));
        TreeMap meta = new TreeMap();
        List keys = r.getMetadataKeys();
        for (int i = 0; i < keys.size(); i++) {
            String k = (String) keys.get(i);
            ByteBuffer v = (ByteBuffer) r.getMetadataValue(k).duplicate();
            meta.put("meta:" + k, StandardCharsets.ISO_8859_1.decode(v).toString());  // lossless bytes -> text
        }
        addEntries(extra, meta);
        Map facts = footer(r.getNumberOfRows(), blockRows, r.getSchema().toString(), r.getCompressionKind().name(),
                           r.getFileVersion().getName() + " " + r.getWriterVersion().name(), blockBytes, extra, units,
                           orcNoCopy(r));
        if (statistics) facts.put("file_stats", orcFileStatsCheck(r, stripeStats));
        return facts;
    }

    private org.apache.parquet.ParquetReadOptions parquetOptions;

    /** SHA-256 of a column chunk's statistics as the reader gives them (a reader drops those it
     *  knows an old writer got wrong, PARQUET-251): type, null count, min and max bytes. */
    private static String parquetStatsDigest(org.apache.parquet.column.statistics.Statistics st) throws IOException {
        if (st == null || st.isEmpty()) return "none";
        MessageDigest md = sha256();
        md.update(st.type().toString().getBytes(StandardCharsets.UTF_8));
        md.update((st.isNumNullsSet() ? "|nulls=" + st.getNumNulls() : "|nulls=?").getBytes(StandardCharsets.UTF_8));
        if (st.hasNonNullValue()) {
            byte[] min = st.getMinBytes(), max = st.getMaxBytes();
            md.update(("|min=" + min.length + ":").getBytes(StandardCharsets.UTF_8));
            md.update(min);
            md.update(("|max=" + max.length + ":").getBytes(StandardCharsets.UTF_8));
            md.update(max);
        }
        return hex(md.digest());
    }

    /** Why a Parquet file's column chunks must not be copied into a footer ParquetFileWriter
     *  makes, or "". Its created_by cannot be kept (the writer always records its own), so chunks
     *  a reader decodes differently by created_by are refused: DELTA_BYTE_ARRAY pages of
     *  parquet-mr before 1.8.0 (PARQUET-246). Encrypted files are refused too. */
    private static String parquetNoCopy(org.apache.parquet.hadoop.metadata.FileMetaData fmd, java.util.Set encodings) {
        if (fmd.getEncryptionType() != org.apache.parquet.hadoop.metadata.FileMetaData.EncryptionType.UNENCRYPTED) {
            return "encrypted (" + fmd.getEncryptionType() + ")";
        }
        if (encodings.contains(org.apache.parquet.column.Encoding.DELTA_BYTE_ARRAY)
            && org.apache.parquet.CorruptDeltaByteArrays.requiresSequentialReads(
                fmd.getCreatedBy(), org.apache.parquet.column.Encoding.DELTA_BYTE_ARRAY)) {
            return "DELTA_BYTE_ARRAY pages written by " + fmd.getCreatedBy() + " need PARQUET-246's read workaround,"
                   + " which a copy's footer (created_by of this parquet-mr) would turn off";
        }
        return "";
    }

    private Map parquetFooter(String path, boolean statistics) throws IOException {
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
            java.util.Set encodings = new java.util.HashSet();
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
                    encodings.addAll(col.getEncodings());
                    List what = new ArrayList();
                    what.add(col.getPath().toDotString());
                    what.add(codec);
                    what.add(Long.valueOf(col.getValueCount()));
                    units.add(unit(what, col.getStartingPos(), col.getTotalSize(),
                                   statistics ? parquetStatsDigest(col.getStatistics()) : null));
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
                          String.valueOf(fmd.getCreatedBy()), blockBytes, extra, units, parquetNoCopy(fmd, encodings));
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
     *  "output": footer facts + "digests" + "size"}, facts with statistics (see footers): the
     *  digests are SHA-256 of every copied unit
     *  (ORC stripe / Parquet column chunk), the inputs' taken from the bytes as they were copied
     *  (ORC) or read again (Parquet), the output's read back after it was closed; the caller
     *  compares them. Or {"error", "refused"}: refused when the inputs cannot share one footer
     *  (nothing was written); any other failure deletes the output. */
    private final ThreadLocal inputHashNanos = new ThreadLocal();

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
            inputHashNanos.set(Long.valueOf(0));
            List facts = "orc".equals(fmt) ? copyOrc(inputs, out) : copyParquet(inputs, out);
            long readBack = System.nanoTime();
            Map got = "orc".equals(fmt) ? orcFooter(output, true) : parquetFooter(output, true);
            got.put("digests", rangeDigests(out, ranges((List) got.get("units"))));
            got.put("size", Long.valueOf(fs(out).getFileStatus(out).getLen()));
            result.put("inputs", facts);
            result.put("output", got);
            // Time spent only to verify: the output read back, and (Parquet) the inputs read again.
            result.put("verify_nanos", Long.valueOf(System.nanoTime() - readBack
                                                    + ((Long) inputHashNanos.get()).longValue()));
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

    private static Map extraMap(Map facts) {
        Map m = new TreeMap();
        List extra = (List) facts.get("extra");
        for (int i = 0; i < extra.size(); i++) {
            List kv = (List) extra.get(i);
            m.put(kv.get(0), kv.get(1));
        }
        return m;
    }

    private static String shortValue(Object v) {
        String s = String.valueOf(v);
        if (s.isEmpty()) return "\"\"";
        return s.length() > 60 ? s.substring(0, 57) + "..." : s;
    }

    /** What two footers disagree on, e.g. "calendar (proleptic vs hybrid)". */
    private static List differences(Map a, Map b) {
        List out = new ArrayList();
        String[] fields = {"schema", "compression", "version"};
        for (int i = 0; i < fields.length; i++) {
            Object x = a.get(fields[i]), y = b.get(fields[i]);
            if (!String.valueOf(x).equals(String.valueOf(y))) {
                out.add(fields[i] + " (" + shortValue(x) + " vs " + shortValue(y) + ")");
            }
        }
        Map ea = extraMap(a), eb = extraMap(b);
        TreeMap keys = new TreeMap(ea);
        keys.putAll(eb);
        Object[] names = keys.keySet().toArray();
        for (int i = 0; i < names.length; i++) {
            Object x = ea.get(names[i]), y = eb.get(names[i]);
            if (x == null ? y != null : !x.equals(y)) {
                out.add(names[i] + " (" + (x == null ? "absent" : shortValue(x)) + " vs "
                        + (y == null ? "absent" : shortValue(y)) + ")");
            }
        }
        return out;
    }

    /** Refuses inputs that must not be copied (``no_copy``) or that disagree on their footer. */
    private static void checkOneKey(List inputs, List facts) throws Refused {
        for (int i = 0; i < facts.size(); i++) {
            String noCopy = (String) ((Map) facts.get(i)).get("no_copy");
            if (noCopy != null && noCopy.length() > 0) {
                throw new Refused("input " + inputs.get(i) + " cannot be copy-merged: " + noCopy);
            }
        }
        StringBuilder why = new StringBuilder();
        for (int i = 1; i < facts.size(); i++) {
            if (!copyKey((Map) facts.get(i)).equals(copyKey((Map) facts.get(0)))) {
                why.append(why.length() == 0 ? "" : "; ").append(inputs.get(i)).append(" differs in ")
                   .append(differences((Map) facts.get(0), (Map) facts.get(i)));
            }
        }
        if (why.length() > 0) {
            throw new Refused("inputs cannot be copy-merged together: from " + inputs.get(0) + ", " + why);
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
                facts.add(orcFacts(readers[i], true));
                bufferSize = Math.max(bufferSize, readers[i].getCompressionSize());
            }
            checkOneKey(inputs, facts);  // encrypted files and other writers' are refused here
            org.apache.orc.Reader first = readers[0];
            // The calendar is the inputs' (equal: part of the copy key): the copied stripes hold
            // their dates and timestamps as day / second counts in it, and readers convert from
            // the calendar the footer names. OrcFile.mergeFiles leaves the writer's default.
            org.apache.orc.OrcFile.WriterOptions opts = org.apache.orc.OrcFile.writerOptions(conf)
                .fileSystem(fs(out)).overwrite(false).setSchema(first.getSchema())
                .compress(first.getCompressionKind()).version(first.getFileVersion())
                .rowIndexStride(first.getRowIndexStride()).bufferSize(bufferSize)
                .setProlepticGregorian(first.writerUsedProlepticGregorian());
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
                    // Each stripe's statistics as the file holds them (no calendar conversion):
                    // the writer records them as they are and merges them into its file statistics.
                    List stats = readers[i].getOrcProtoStripeStatistics();
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
                            writer.appendStripe(b, 0, length, s,
                                (org.apache.orc.OrcProto.StripeStatistics) stats.get((int) s.getStripeId()));
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
            facts.add(parquetFooter((String) inputs.get(i), true));
        }
        checkOneKey(inputs, facts);
        // The rewriter writes the inputs' key-value metadata (equal: part of the copy key) and
        // their created_by under original.created.by; created_by itself is always its own.
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
        long hashing = System.nanoTime();  // the inputs read again, for verification only
        for (int i = 0; i < inputs.size(); i++) {
            Map f = (Map) facts.get(i);
            f.put("digests", rangeDigests((Path) paths.get(i), ranges((List) f.get("units"))));
        }
        inputHashNanos.set(Long.valueOf(System.nanoTime() - hashing));
        return facts;
    }
}
