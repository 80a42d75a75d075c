// The Parquet copy merge (CopyMerge): ParquetRewriter without prune/mask/encrypt/codec options
// streams each column chunk's bytes as they are (ParquetFileWriter.appendColumnChunk), keeping
// column/offset indexes and bloom filters; no page is decoded.

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

public class ParquetCopy {
    private final Configuration conf;
    private final ParquetFooters footers;

    public ParquetCopy(Configuration conf, ParquetFooters footers) {
        this.conf = conf;
        this.footers = footers;
    }

    public List paths(List inputs) {
        List paths = new ArrayList();
        for (int i = 0; i < inputs.size(); i++) paths.add(new Path((String) inputs.get(i)));
        return paths;
    }

    /** Copies every column chunk of the inputs into ``out``; returns the inputs' facts (their
     *  chunks are hashed by the caller, reading them again: the rewriter gives no hook into its
     *  copy). CopyKey.Refused before anything is written. */
    public List copy(List inputs, Path out) throws IOException {
        List facts = new ArrayList();
        for (int i = 0; i < inputs.size(); i++) facts.add(footers.footer((String) inputs.get(i), true));
        CopyKey.check(inputs, facts);
        // The rewriter writes the inputs' key-value metadata (equal: part of the copy key) and
        // their created_by under original.created.by; created_by itself is always its own.
        org.apache.parquet.hadoop.rewrite.RewriteOptions opts =
            new org.apache.parquet.hadoop.rewrite.RewriteOptions.Builder(conf, paths(inputs), out).build();
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
        return facts;
    }
}
