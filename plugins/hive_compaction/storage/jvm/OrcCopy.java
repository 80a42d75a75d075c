// The ORC copy merge (CopyMerge): OrcFile.mergeFiles' stripe copy (same writer options), done
// here so that each stripe is hashed from the very bytes that are appended, and so that an input
// is never skipped: all inputs share one footer or nothing is written. Encrypted files are refused.

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.Path;

public class OrcCopy {
    private final Configuration conf;
    private final OrcFooters footers;
    private final Digests digests;

    public OrcCopy(Configuration conf, OrcFooters footers, Digests digests) {
        this.conf = conf;
        this.footers = footers;
        this.digests = digests;
    }

    /** Copies every stripe of the inputs into ``out``; returns the inputs' facts, each with the
     *  "digests" of its stripes as appended. CopyKey.Refused before anything is written. */
    public List copy(List inputs, Path out) throws Exception {
        int n = inputs.size();
        org.apache.orc.Reader[] readers = new org.apache.orc.Reader[n];
        List facts = new ArrayList();
        try {
            int bufferSize = 0;
            for (int i = 0; i < n; i++) {
                readers[i] = footers.reader(new Path((String) inputs.get(i)));
                facts.add(OrcFooters.facts(readers[i], true));
                bufferSize = Math.max(bufferSize, readers[i].getCompressionSize());
            }
            CopyKey.check(inputs, facts);  // encrypted files and other writers' are refused here
            org.apache.orc.Writer writer = org.apache.orc.OrcFile.createWriter(out, writerOptions(readers[0], out,
                                                                                                 bufferSize));
            boolean closed = false;
            try {
                for (int i = 0; i < n; i++) {
                    ((Map) facts.get(i)).put("digests", appendStripes(writer, readers[i], new Path((String) inputs.get(i))));
                }
                copyUserMetadata(readers[0], writer);
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

    /** The first input's writer options, as OrcFile.mergeFiles takes them. */
    private org.apache.orc.OrcFile.WriterOptions writerOptions(org.apache.orc.Reader first, Path out, int bufferSize)
            throws Exception {
        // The calendar is the inputs' (equal: part of the copy key): the copied stripes hold
        // their dates and timestamps as day / second counts in it, and readers convert from
        // the calendar the footer names. OrcFile.mergeFiles leaves the writer's default.
        org.apache.orc.OrcFile.WriterOptions opts = org.apache.orc.OrcFile.writerOptions(conf)
            .fileSystem(LocalDisk.withoutForks(out.getFileSystem(conf), conf)).overwrite(false).setSchema(first.getSchema())
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
        return opts;
    }

    /** Appends one input's stripes, each hashed from the bytes appended; returns those digests. */
    private List appendStripes(org.apache.orc.Writer writer, org.apache.orc.Reader reader, Path p) throws IOException {
        // Each stripe's statistics as the file holds them (no calendar conversion):
        // the writer records them as they are and merges them into its file statistics.
        List stats = reader.getOrcProtoStripeStatistics();
        List stripes = reader.getStripes();
        List hashes = new ArrayList();
        Digests.RangeHash hash = new Digests.RangeHash();
        // The stream the reader opened for the tail (as mergeFiles does): one open per input.
        FSDataInputStream in = reader instanceof org.apache.orc.impl.ReaderImpl
            ? ((org.apache.orc.impl.ReaderImpl) reader).takeFile() : null;
        if (in == null) in = p.getFileSystem(conf).open(p);
        try {
            for (int k = 0; k < stripes.size(); k++) {
                org.apache.orc.StripeInformation s = (org.apache.orc.StripeInformation) stripes.get(k);
                int length = (int) s.getLength();
                byte[] b = digests.buffer(length);
                in.seek(s.getOffset());  // not a positional read: see Digests.rangeDigests
                in.readFully(b, 0, length);
                hash.update(b, 0, length);
                hashes.add(hash.take());
                writer.appendStripe(b, 0, length, s,
                    (org.apache.orc.OrcProto.StripeStatistics) stats.get((int) s.getStripeId()));
            }
        } finally {
            in.close();
        }
        return hashes;
    }

    /** The user metadata, equal in every input (part of the copy key). */
    private static void copyUserMetadata(org.apache.orc.Reader first, org.apache.orc.Writer writer) {
        List keys = first.getMetadataKeys();
        for (int k = 0; k < keys.size(); k++) {
            String key = (String) keys.get(k);
            writer.addUserMetadata(key, first.getMetadataValue(key));
        }
    }
}
