// Copy merges for the helper (HiveCompactionHelper.copyMerge): the inputs' stripes (OrcCopy) or
// column chunks (ParquetCopy) copied into one new file, then that file read back, so the caller
// can compare every copied unit's digest with its input's.

import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

public class CopyMerge {
    private final Configuration conf;
    private final Footers footers;
    private final Digests digests;
    private final OrcCopy orc;
    private final ParquetCopy parquet;

    /** The format copiers come from the helper, which wires every part from one Configuration. */
    public CopyMerge(Configuration conf, Footers footers, Digests digests, OrcCopy orc, ParquetCopy parquet) {
        this.conf = conf;
        this.footers = footers;
        this.digests = digests;
        this.orc = orc;
        this.parquet = parquet;
    }

    /** Copy-merge the inputs into ``output`` (which must not exist), then read the output back,
     *  all in one call. Returns {"inputs": [footer facts + "digests"], "output": footer facts +
     *  "digests" + "size"}, facts with statistics (see Footers.footers): the digests are the
     *  Digests.RangeHash of every copied unit (ORC stripe / Parquet column chunk), the inputs'
     *  taken from the bytes as they were copied (ORC) or read again (Parquet), the output's read
     *  back after it was closed; the caller compares them. Or {"error", "refused"}: refused when
     *  the inputs cannot share one footer (nothing was written); any other failure deletes the
     *  output. */
    public Map copyMerge(String fmt, List inputs, String output) throws IOException {
        Path out = new Path(output);
        FileSystem fs = out.getFileSystem(conf);
        Map result = new LinkedHashMap();
        if (inputs.isEmpty() || fs.exists(out)) {
            result.put("error", inputs.isEmpty() ? "no inputs" : "output " + output + " already exists");
            result.put("refused", Boolean.TRUE);
            return result;
        }
        try {
            // The staging folder (else Parquet's writer makes it through Hadoop, a process per folder).
            if (!fs.exists(out.getParent())) LocalDisk.makeFolders(fs, out.getParent(), conf);
            long inputHashNanos = 0;
            List facts;
            if ("orc".equals(fmt)) {
                facts = orc.copy(inputs, out);  // each stripe hashed as it is copied
            } else {
                facts = parquet.copy(inputs, out);
                long hashing = System.nanoTime();  // the inputs read again, for verification only
                addDigests(facts, parquet.paths(inputs));
                inputHashNanos = System.nanoTime() - hashing;
            }
            long readBack = System.nanoTime();
            Map got = footers.footer(fmt, output, true);
            got.put("digests", digests.rangeDigests(out, Digests.ranges((List) got.get("units"))));
            got.put("size", Long.valueOf(fs.getFileStatus(out).getLen()));
            result.put("inputs", facts);
            result.put("output", got);
            // Time spent only to verify: the output read back, and (Parquet) the inputs read again.
            result.put("verify_nanos", Long.valueOf(System.nanoTime() - readBack + inputHashNanos));
        } catch (CopyKey.Refused e) {  // before the output was created
            result.put("error", e.getMessage());
            result.put("refused", Boolean.TRUE);
        } catch (Exception e) {
            result.put("error", Footers.why(e));
            result.put("refused", Boolean.FALSE);
            // The writer may have created the output before failing; ours: it did not exist before.
            try { fs.delete(out, false); } catch (Exception ignored) { }
        }
        return result;
    }

    /** Each input's copy units hashed by reading them again (the Parquet rewriter gives no hook into its copy). */
    private void addDigests(List facts, List paths) throws IOException {
        for (int i = 0; i < paths.size(); i++) {
            Map f = (Map) facts.get(i);
            f.put("digests", digests.rangeDigests((Path) paths.get(i), Digests.ranges((List) f.get("units"))));
        }
    }
}
