// Footer facts for the helper (HiveCompactionHelper.footers) and for copy merges: one format's
// reader per format (OrcFooters, ParquetFooters), and the shape of the facts both give, the one
// copy_merge.FileFooter is built from.

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.hadoop.conf.Configuration;

public class Footers {
    public final OrcFooters orc;
    public final ParquetFooters parquet;

    public Footers(Configuration conf) {
        orc = new OrcFooters(conf);
        parquet = new ParquetFooters(conf);
    }

    /** For each path of a list, its footer facts or {"error"}. ``statistics``: also a digest of
     *  each copy unit's statistics (ORC stripe statistics, Parquet column chunk statistics) and,
     *  for ORC, whether the file's column statistics are the merge of its stripes'
     *  (``file_stats``); taken from the footer already read. */
    public List footers(String fmt, List paths, boolean statistics) {
        List out = new ArrayList();
        for (int i = 0; i < paths.size(); i++) {
            try {
                out.add(footer(fmt, (String) paths.get(i), statistics));
            } catch (Exception e) {
                out.add(error(e));
            }
        }
        return out;
    }

    /** One file's footer facts; ``fmt`` "orc", else Parquet. */
    public Map footer(String fmt, String path, boolean statistics) throws IOException {
        return "orc".equals(fmt) ? orc.footer(path, statistics) : parquet.footer(path, statistics);
    }

    /** The class and message of a failure, as the Python side reports it. */
    public static String why(Throwable e) {
        String m = e.getMessage();
        return e.getClass().getName() + (m == null ? "" : ": " + m);
    }

    private static Map error(Exception e) {
        Map m = new LinkedHashMap();
        m.put("error", why(e));
        return m;
    }

    /** [what, offset, length] of one copy unit, and the digest of its statistics if read. */
    public static List unit(List what, long offset, long length, String stats) {
        List u = new ArrayList();
        u.add(what);
        u.add(Long.valueOf(offset));
        u.add(Long.valueOf(length));
        if (stats != null) u.add(stats);
        return u;
    }

    /** Adds a sorted map's entries to ``extra`` as [key, value] pairs, in key order. */
    public static void addEntries(List extra, TreeMap sorted) {
        Object[] keys = sorted.keySet().toArray();
        for (int i = 0; i < keys.length; i++) extra.add(Arrays.asList(new Object[] {keys[i], sorted.get(keys[i])}));
    }

    /** One file's footer facts, the shape copy_merge.FileFooter is built from. */
    public static Map facts(long rows, List blockRows, String schema, String compression, String version,
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
}
