// Parquet footer facts (Footers): column chunks as copy units, codecs, the writer, the key-value
// metadata, and chunk statistics digests.

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

public class ParquetFooters {
    private final Configuration conf;
    private org.apache.parquet.ParquetReadOptions options;

    public ParquetFooters(Configuration conf) { this.conf = conf; }

    /** SHA-256 of a column chunk's statistics as the reader gives them (a reader drops those it
     *  knows an old writer got wrong, PARQUET-251): type, null count, min and max bytes. */
    private static String statsDigest(org.apache.parquet.column.statistics.Statistics st) throws IOException {
        if (st == null || st.isEmpty()) return "none";
        MessageDigest md = Digests.sha256();
        md.update(st.type().toString().getBytes(StandardCharsets.UTF_8));
        md.update((st.isNumNullsSet() ? "|nulls=" + st.getNumNulls() : "|nulls=?").getBytes(StandardCharsets.UTF_8));
        if (st.hasNonNullValue()) {
            byte[] min = st.getMinBytes(), max = st.getMaxBytes();
            md.update(("|min=" + min.length + ":").getBytes(StandardCharsets.UTF_8));
            md.update(min);
            md.update(("|max=" + max.length + ":").getBytes(StandardCharsets.UTF_8));
            md.update(max);
        }
        return Digests.hex(md.digest());
    }

    /** Why a Parquet file's column chunks must not be copied into a footer ParquetFileWriter
     *  makes, or "". Its created_by cannot be kept (the writer always records its own), so chunks
     *  a reader decodes differently by created_by are refused: DELTA_BYTE_ARRAY pages of
     *  parquet-mr before 1.8.0 (PARQUET-246). Encrypted files are refused too. */
    private static String noCopy(org.apache.parquet.hadoop.metadata.FileMetaData fmd, java.util.Set encodings) {
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

    public Map footer(String path, boolean statistics) throws IOException {
        // Building read options copies the whole Hadoop configuration: ~6 ms, so once, not per file.
        if (options == null) options = org.apache.parquet.HadoopReadOptions.builder(conf).build();
        org.apache.parquet.hadoop.ParquetFileReader reader = org.apache.parquet.hadoop.ParquetFileReader.open(
            org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(new Path(path), conf), options);
        try {
            return facts(reader.getFooter(), statistics);
        } finally {
            reader.close();
        }
    }

    private static Map facts(org.apache.parquet.hadoop.metadata.ParquetMetadata meta, boolean statistics)
            throws IOException {
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
                units.add(Footers.unit(what, col.getStartingPos(), col.getTotalSize(),
                                       statistics ? statsDigest(col.getStatistics()) : null));
            }
        }
        // ParquetRewriter records its inputs' writers under this key: it must not split groups.
        List extra = new ArrayList();
        TreeMap kv = new TreeMap(fmd.getKeyValueMetaData());
        kv.remove("original.created.by");
        Footers.addEntries(extra, kv);
        StringBuilder compression = new StringBuilder();
        Object[] names = codecs.keySet().toArray();
        for (int i = 0; i < names.length; i++) compression.append(i == 0 ? "" : "+").append((String) names[i]);
        return Footers.facts(rows, blockRows, fmd.getSchema().toString(), compression.toString(),
                             String.valueOf(fmd.getCreatedBy()), blockBytes, extra, units, noCopy(fmd, encodings));
    }
}
