package hivecompaction.engine;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import org.apache.parquet.column.ColumnDescriptor;
import org.apache.parquet.column.ColumnReader;
import org.apache.parquet.column.ColumnWriteStore;
import org.apache.parquet.column.ColumnWriter;
import org.apache.parquet.column.ParquetProperties;
import org.apache.parquet.compression.CompressionCodecFactory;
import org.apache.parquet.hadoop.ColumnChunkPageWriteStore;
import org.apache.parquet.hadoop.ParquetFileWriter;
import org.apache.parquet.io.api.Binary;
import org.apache.parquet.schema.MessageType;

/** The output's next row group, one column at a time: each column its own page store and writer
 *  (a schema of that column alone), so its triplets can be written whole before the next's. */
final class ParquetBlock {
    final List<ColumnChunkPageWriteStore> pages = new ArrayList<>();
    final List<ColumnWriteStore> stores = new ArrayList<>();
    final List<ColumnWriter> writers = new ArrayList<>();
    final boolean[] open;
    final int[] maxDefinition;
    long rows;

    ParquetBlock(MessageType schema, List<ColumnDescriptor> columns, ParquetProperties props,
                 CompressionCodecFactory.BytesInputCompressor compressor) {
        open = new boolean[columns.size()];
        maxDefinition = new int[columns.size()];
        for (int c = 0; c < columns.size(); c++) {
            MessageType alone = ParquetColumns.only(schema, columns.get(c));
            ColumnChunkPageWriteStore pageStore = new ColumnChunkPageWriteStore(compressor, alone, props.getAllocator(),
                props.getColumnIndexTruncateLength(), props.getPageWriteChecksumEnabled());
            ColumnWriteStore store = props.newColumnWriteStore(alone, pageStore);
            pages.add(pageStore);
            stores.add(store);
            writers.add(store.getColumnWriter(alone.getColumns().get(0)));
            maxDefinition[c] = columns.get(c).getMaxDefinitionLevel();
        }
    }

    long bufferedSize() {
        long size = 0;
        for (ColumnWriteStore s : stores) size += s.getBufferedSize();
        return size;
    }

    /** Column ``c`` of one input row group into this block, each triplet hashed as written. */
    void copy(int c, ColumnReader read, ContentHash h) {
        ColumnWriter w = writers.get(c);
        ColumnWriteStore store = stores.get(c);
        int maxD = maxDefinition[c];
        long n = read.getTotalValueCount();
        ColumnDescriptor d = read.getDescriptor();
        for (long i = 0; i < n; i++) {
            int rep = read.getCurrentRepetitionLevel();
            int def = read.getCurrentDefinitionLevel();
            if (rep == 0 && open[c]) store.endRecord();  // a record begins: the one before ends
            open[c] = true;
            long shape = (long) rep << 16 | def;
            if (def < maxD) {
                w.writeNull(rep, def);
                h.add(c, shape, 0);
            } else {
                switch (d.getPrimitiveType().getPrimitiveTypeName()) {
                    case BOOLEAN -> { boolean v = read.getBoolean(); w.write(v, rep, def); h.add(c, shape, v ? 1 : 0); }
                    case INT32 -> { int v = read.getInteger(); w.write(v, rep, def); h.add(c, shape, v); }
                    case INT64 -> { long v = read.getLong(); w.write(v, rep, def); h.add(c, shape, v); }
                    case FLOAT -> { float v = read.getFloat(); w.write(v, rep, def); h.add(c, shape, Float.floatToRawIntBits(v)); }
                    case DOUBLE -> { double v = read.getDouble(); w.write(v, rep, def); h.add(c, shape, Double.doubleToRawLongBits(v)); }
                    default -> { Binary v = read.getBinary(); w.write(v, rep, def); h.add(c, shape, ParquetColumns.bytes(v)); }
                }
            }
            read.consume();
        }
    }

    void flushTo(ParquetFileWriter writer) throws IOException {
        writer.startBlock(rows);
        for (int c = 0; c < stores.size(); c++) {
            if (open[c]) stores.get(c).endRecord();
            stores.get(c).flush();
            pages.get(c).flushToFileWriter(writer);
            stores.get(c).close();
        }
        writer.endBlock();
    }
}

