// ORC footer facts (Footers): stripes as copy units, the calendar, the writer, the user metadata,
// and whether the file's statistics are the merge of its stripes'.

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

public class OrcFooters {
    private final Configuration conf;

    public OrcFooters(Configuration conf) { this.conf = conf; }

    public org.apache.orc.Reader reader(Path p) throws IOException {
        return org.apache.orc.OrcFile.createReader(
            p, org.apache.orc.OrcFile.readerOptions(conf).filesystem(p.getFileSystem(conf)));
    }

    public Map footer(String path, boolean statistics) throws IOException {
        org.apache.orc.Reader r = reader(new Path(path));
        try {
            return facts(r, statistics);
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
    private static String noCopy(org.apache.orc.Reader r) {
        if (r.getColumnEncryptionKeys().length > 0) return "encrypted columns";
        org.apache.orc.OrcFile.WriterImplementation impl = r.getWriterVersion().getWriterImplementation();
        if (impl != org.apache.orc.OrcFile.WriterImplementation.ORC_JAVA) {
            // The writer always records itself as ORC_JAVA: readers would apply the Java writer's
            // version rules (e.g. trust the C++ writer's bad bloom filters, ORC-1025).
            return "written by " + impl.name() + ", and a copy's footer would name the ORC Java writer";
        }
        return "";
    }

    /** "" when the file-level column statistics equal, byte for byte, the merge of its stripes'
     *  statistics in stripe order (what an ORC writer records for appended stripes), else which
     *  columns differ. Works on the footer already read. */
    private static String fileStatsCheck(org.apache.orc.Reader r, List stripeStats) {
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

    /** The facts of an open reader's file (see Footers.facts). */
    public static Map facts(org.apache.orc.Reader r, boolean statistics) throws IOException {
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
            String stats = statistics ? Digests.sha256Hex(
                ((org.apache.orc.OrcProto.StripeStatistics) stripeStats.get(i)).toByteArray()) : null;
            units.add(Footers.unit(what, s.getOffset(), s.getLength(), stats));
        }
        Map facts = Footers.facts(r.getNumberOfRows(), blockRows, r.getSchema().toString(),
                                  r.getCompressionKind().name(),
                                  r.getFileVersion().getName() + " " + r.getWriterVersion().name(), blockBytes,
                                  extra(r), units, noCopy(r));
        if (statistics) facts.put("file_stats", fileStatsCheck(r, stripeStats));
        return facts;
    }

    /** The calendar, row index stride and user metadata: what a copy must agree on beyond the schema. */
    private static List extra(org.apache.orc.Reader r) {
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
        Footers.addEntries(extra, meta);
        return extra;
    }
}
