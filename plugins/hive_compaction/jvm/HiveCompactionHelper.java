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
            if (!fs.exists(src)) continue;
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
                Map m = new LinkedHashMap();
                m.put("error", why(e));
                out.add(m);
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

    private Map orcFooter(String path) throws IOException {
        Path p = new Path(path);
        org.apache.orc.Reader r = org.apache.orc.OrcFile.createReader(
            p, org.apache.orc.OrcFile.readerOptions(conf).filesystem(fs(p)));
        try {
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
        } finally {
            r.close();
        }
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

    /** SHA-256 of byte ranges: JSON [{"path", "ranges": [[offset, length], ...]}, ...] ->
     *  [[hex, ...] or {"error"}, ...]. Only digests cross into Python, never data. */
    public String digests(String specJson) throws Exception {
        List specs = (List) read(specJson);
        List out = new ArrayList();
        byte[] buffer = new byte[1 << 20];
        MessageDigest md = MessageDigest.getInstance("SHA-256");
        for (int i = 0; i < specs.size(); i++) {
            Map spec = (Map) specs.get(i);
            String path = (String) spec.get("path");
            List ranges = (List) spec.get("ranges");
            try {
                Path p = new Path(path);
                FSDataInputStream in = fs(p).open(p);
                List hashes = new ArrayList();
                try {
                    for (int r = 0; r < ranges.size(); r++) {
                        List range = (List) ranges.get(r);
                        long offset = ((Number) range.get(0)).longValue();
                        long left = ((Number) range.get(1)).longValue();
                        md.reset();
                        while (left > 0) {
                            int n = (int) Math.min((long) buffer.length, left);
                            in.readFully(offset, buffer, 0, n);  // EOFException when the file ends early
                            md.update(buffer, 0, n);
                            offset += n;
                            left -= n;
                        }
                        hashes.add(hex(md.digest()));
                    }
                } finally {
                    in.close();
                }
                out.add(hashes);
            } catch (Exception e) {
                Map m = new LinkedHashMap();
                m.put("error", why(e));
                out.add(m);
            }
        }
        return write(out);
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

    /** OrcFile.mergeFiles of a JSON list of inputs into output (which must not exist), with the
     *  first input's schema, codec and version. mergeFiles silently skips inputs that differ from
     *  the first one: returns the skipped inputs as JSON (the caller fails on any). */
    public String mergeOrc(String inputsJson, String output) throws IOException {
        List inputs = (List) read(inputsJson);
        List paths = new ArrayList();
        for (int i = 0; i < inputs.size(); i++) paths.add(new Path((String) inputs.get(i)));
        Path out = new Path(output);
        org.apache.orc.Reader first = org.apache.orc.OrcFile.createReader(
            (Path) paths.get(0), org.apache.orc.OrcFile.readerOptions(conf));
        org.apache.orc.OrcFile.WriterOptions opts;
        try {
            // mergeFiles overrides these from the first input itself; set them to say what we expect.
            opts = org.apache.orc.OrcFile.writerOptions(conf).fileSystem(fs(out)).overwrite(false)
                .setSchema(first.getSchema()).compress(first.getCompressionKind())
                .version(first.getFileVersion());
        } finally {
            first.close();
        }
        List merged = org.apache.orc.OrcFile.mergeFiles(out, opts, paths);
        List skipped = new ArrayList();
        for (int i = 0; i < paths.size(); i++) {
            if (!merged.contains(paths.get(i))) skipped.add(inputs.get(i));
        }
        return write(skipped);
    }

    /** ParquetRewriter without prune/mask/encrypt/codec options: column chunks are copied as
     *  they are (ParquetFileWriter.appendColumnChunk), no page is decoded. */
    public void mergeParquet(String inputsJson, String output) throws IOException {
        List inputs = (List) read(inputsJson);
        List paths = new ArrayList();
        for (int i = 0; i < inputs.size(); i++) paths.add(new Path((String) inputs.get(i)));
        org.apache.parquet.hadoop.rewrite.RewriteOptions opts =
            new org.apache.parquet.hadoop.rewrite.RewriteOptions.Builder(conf, paths, new Path(output)).build();
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
    }
}
