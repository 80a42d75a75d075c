package hivecompaction.engine;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.TreeSet;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.hive.ql.exec.vector.VectorizedRowBatch;
import org.apache.orc.OrcFile;
import org.apache.orc.OrcProto;
import org.apache.orc.Reader;
import org.apache.orc.RecordReader;
import org.apache.orc.StripeInformation;
import org.apache.orc.TypeDescription;
import org.apache.orc.Writer;
import org.apache.orc.impl.RecordReaderImpl;

/**
 * ORC files merged through column vectors: each input's row batches handed to one writer, which
 * encodes them into stripes of the configured size (orc.stripe.size), with no row of Spark SQL.
 * The writer keeps what the inputs' footers say: schema, compression and its block size, row
 * index stride, file version, calendar, bloom filter columns and user metadata (inputs that
 * disagree on one are not merged here). Timestamps are read and written in UTC, which keeps
 * their wall-clock values whatever the time zones of the inputs' writers and of this JVM.
 */
final class OrcColumnarMerge {
    private static final int BATCH_ROWS = 1024;

    private OrcColumnarMerge() {}

    static Merged merge(Configuration conf, List<String> inputs, String output) throws IOException, CannotMerge {
        List<Reader> readers = new ArrayList<>();
        try {
            for (String input : inputs) {
                Path p = new Path(input);
                readers.add(OrcFile.createReader(p, readerOptions(conf, p)));
            }
            String bloomColumns = agreeing(inputs, readers);
            Path out = new Path(output);
            long began = System.nanoTime();
            Pass written = write(conf, readers, bloomColumns, out);
            long wrote = System.nanoTime();
            TypeDescription schema = readers.get(0).getSchema();
            ContentHash readBack = new ContentHash(schema.getMaximumId() + 1);
            long outRows = 0;
            int stripes;
            try (Reader reader = OrcFile.createReader(out, readerOptions(conf, out))) {
                stripes = reader.getStripes().size();
                VectorizedRowBatch batch = reader.getSchema().createRowBatch(BATCH_ROWS);
                try (RecordReader rowsOf = reader.rows()) {
                    while (rowsOf.nextBatch(batch)) {
                        OrcColumns.hash(readBack, reader.getSchema(), batch);
                        outRows += batch.size;
                    }
                }
            }
            long size = out.getFileSystem(conf).getFileStatus(out).getLen();
            return new Merged(output, size, written.rows(), written.hash(), outRows, readBack, stripes, wrote - began,
                              System.nanoTime() - wrote);
        } finally {
            for (Reader r : readers) r.close();
        }
    }

    /** Rows and content checksum of what was written. */
    private record Pass(long rows, ContentHash hash) {}

    /** Every input's row batches into one writer with the first input's settings (``agreeing``
     *  checked the others have them too); the checksum of what was handed to it. */
    private static Pass write(Configuration conf, List<Reader> readers, String bloomColumns, Path out)
            throws IOException {
        Reader first = readers.get(0);
        TypeDescription schema = first.getSchema();
        OrcFile.WriterOptions options = OrcFile.writerOptions(conf)
            .fileSystem(out.getFileSystem(conf))
            .setSchema(schema)
            .compress(first.getCompressionKind())
            .bufferSize(first.getCompressionSize())
            .rowIndexStride(first.getRowIndexStride())
            .version(first.getFileVersion())
            .setProlepticGregorian(first.writerUsedProlepticGregorian())
            .useUTCTimestamp(true)
            .overwrite(false);
        if (!bloomColumns.isEmpty()) options.bloomFilterColumns(bloomColumns);
        ContentHash written = new ContentHash(schema.getMaximumId() + 1);
        long rows = 0;
        Writer writer = OrcFile.createWriter(out, options);
        try {
            for (String key : first.getMetadataKeys()) writer.addUserMetadata(key, first.getMetadataValue(key));
            VectorizedRowBatch batch = schema.createRowBatch(BATCH_ROWS);
            for (Reader reader : readers) {
                try (RecordReader rowsOf = reader.rows()) {
                    while (rowsOf.nextBatch(batch)) {
                        OrcColumns.hash(written, schema, batch);  // before the writer sees the batch
                        writer.addRowBatch(batch);
                        rows += batch.size;
                    }
                }
            }
        } finally {
            writer.close();
        }
        return new Pass(rows, written);
    }

    private static OrcFile.ReaderOptions readerOptions(Configuration conf, Path p) throws IOException {
        FileSystem fs = p.getFileSystem(conf);
        return OrcFile.readerOptions(conf).filesystem(fs).useUTCTimestamp(true);
    }

    /** The inputs' bloom filter columns (as orc.bloom.filter.columns names them); CannotMerge
     *  when the inputs differ in a fact the output must keep or hold what this engine does not
     *  merge. */
    private static String agreeing(List<String> inputs, List<Reader> readers) throws IOException, CannotMerge {
        Reader first = readers.get(0);
        String unsupported = unsupported(first.getSchema());
        if (unsupported != null) throw new CannotMerge(unsupported);
        String bloom = null;
        for (int i = 0; i < readers.size(); i++) {
            Reader r = readers.get(i);
            String name = new Path(inputs.get(i)).getName();
            if (r.getColumnEncryptionKeys().length > 0) throw new CannotMerge(name + " has encrypted columns");
            if (r.getWriterVersion().getWriterImplementation() != OrcFile.WriterImplementation.ORC_JAVA) {
                throw new CannotMerge(name + " was written by " + r.getWriterVersion().getWriterImplementation());
            }
            String what = !r.getSchema().equals(first.getSchema()) ? "schema"
                : r.getCompressionKind() != first.getCompressionKind() ? "compression"
                : r.getCompressionSize() != first.getCompressionSize() ? "compression block size"
                : r.getRowIndexStride() != first.getRowIndexStride() ? "row index stride"
                : r.getFileVersion() != first.getFileVersion() ? "file version"
                : r.writerUsedProlepticGregorian() != first.writerUsedProlepticGregorian() ? "calendar"
                : !sameUserMetadata(r, first) ? "user metadata" : null;
            if (what != null) throw new CannotMerge(name + " differs in its " + what + " from " + new Path(inputs.get(0)).getName());
            String columns = bloomFilterColumns(r);
            if (bloom != null && !bloom.equals(columns)) throw new CannotMerge(name + " has bloom filters on other columns");
            bloom = columns;
        }
        return bloom == null ? "" : bloom;
    }

    private static boolean sameUserMetadata(Reader a, Reader b) {
        if (!new TreeSet<>(a.getMetadataKeys()).equals(new TreeSet<>(b.getMetadataKeys()))) return false;
        for (String key : a.getMetadataKeys()) {
            if (!Objects.equals(a.getMetadataValue(key), b.getMetadataValue(key))) return false;
        }
        return true;
    }

    /** The top-level columns with a bloom filter in the file's first stripe, comma-separated. */
    private static String bloomFilterColumns(Reader r) throws IOException {
        List<StripeInformation> stripes = r.getStripes();
        if (stripes.isEmpty()) return "";
        TreeSet<Integer> ids = new TreeSet<>();
        try (RecordReader rows = r.rows()) {
            OrcProto.StripeFooter footer = ((RecordReaderImpl) rows).readStripeFooter(stripes.get(0));
            for (OrcProto.Stream s : footer.getStreamsList()) {
                if (s.getKind() == OrcProto.Stream.Kind.BLOOM_FILTER || s.getKind() == OrcProto.Stream.Kind.BLOOM_FILTER_UTF8) {
                    ids.add(s.getColumn());
                }
            }
        }
        List<String> names = new ArrayList<>();
        TypeDescription schema = r.getSchema();
        List<String> fields = schema.getFieldNames();
        for (int k = 0; k < fields.size(); k++) {
            if (ids.contains(schema.getChildren().get(k).getId())) names.add(fields.get(k));
        }
        if (names.size() != ids.size()) throw new IOException("bloom filters on nested columns " + ids);
        return String.join(",", names);
    }

    private static String unsupported(TypeDescription t) {
        if (t.getCategory() == TypeDescription.Category.UNION) return "a union column";
        if (t.getChildren() != null) {
            for (TypeDescription c : t.getChildren()) {
                String why = unsupported(c);
                if (why != null) return why;
            }
        }
        return null;
    }
}
