package hivecompaction.engine;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.parquet.column.ColumnDescriptor;
import org.apache.parquet.column.ParquetProperties;
import org.apache.parquet.column.impl.ColumnReadStoreImpl;
import org.apache.parquet.column.page.PageReadStore;
import org.apache.parquet.hadoop.CodecFactory;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.ParquetFileWriter;
import org.apache.parquet.hadoop.ParquetOutputFormat;
import org.apache.parquet.hadoop.metadata.BlockMetaData;
import org.apache.parquet.hadoop.metadata.ColumnChunkMetaData;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.parquet.hadoop.metadata.FileMetaData;
import org.apache.parquet.hadoop.metadata.ParquetMetadata;
import org.apache.parquet.hadoop.util.HadoopInputFile;
import org.apache.parquet.hadoop.util.HadoopOutputFile;
import org.apache.parquet.schema.MessageType;

/**
 * Parquet files merged column by column, never assembling a record: each input row group's
 * column chunks are decoded into their (repetition level, definition level, value) triplets,
 * which go straight to that column's writer in the output, as parquet-java's ParquetRewriter
 * rewrites the columns it masks. The output's schema is the inputs' message type itself, so every
 * column keeps its physical type, logical annotation and repetition (legacy fixed-length decimals
 * and INT96 timestamps stay as they are), with the inputs' codec, page version and key-value
 * metadata; the writer's page, dictionary and row group sizes are the Hadoop configuration's
 * (parquet.page.size, parquet.dictionary.page.size, parquet.enable.dictionary, parquet.block.size),
 * as for any Parquet writer of the job. Row groups of the output are cut at whole input row groups
 * once the buffered output reaches the row group size.
 */
final class ParquetColumnarMerge {
    private ParquetColumnarMerge() {}

    static Merged merge(Configuration conf, List<String> inputs, String output) throws IOException, CannotMerge {
        List<ParquetMetadata> footers = new ArrayList<>();
        for (String input : inputs) {
            try (ParquetFileReader r = ParquetFileReader.open(HadoopInputFile.fromPath(new Path(input), conf))) {
                footers.add(r.getFooter());
            }
        }
        CompressionCodecName codec = agreeing(inputs, footers);
        Path out = new Path(output);
        long began = System.nanoTime();
        Pass written = write(conf, inputs, footers, codec, out);
        long wrote = System.nanoTime();
        Pass readBack = readBack(conf, out, footers.get(0).getFileMetaData().getSchema());
        long size = out.getFileSystem(conf).getFileStatus(out).getLen();
        return new Merged(output, size, written.rows(), written.hash(), readBack.rows(), readBack.hash(), written.blocks(),
                          wrote - began, System.nanoTime() - wrote);
    }

    /** Rows, row groups and content checksum of one pass over files. */
    private record Pass(long rows, int blocks, ContentHash hash) {}

    /** The writer's settings: the Hadoop configuration's, as any Parquet writer of the job takes them,
     *  in the inputs' page version. */
    private static ParquetProperties properties(Configuration conf, List<ParquetMetadata> footers) {
        boolean v2 = footers.stream().flatMap(f -> f.getBlocks().stream()).flatMap(b -> b.getColumns().stream())
            .anyMatch(c -> c.getEncodingStats() != null && c.getEncodingStats().usesV2Pages());
        return ParquetProperties.builder()
            .withPageSize(ParquetOutputFormat.getPageSize(conf))
            .withDictionaryPageSize(ParquetOutputFormat.getDictionaryPageSize(conf))
            .withDictionaryEncoding(ParquetOutputFormat.getEnableDictionary(conf))
            .withPageRowCountLimit(conf.getInt(ParquetOutputFormat.PAGE_ROW_COUNT_LIMIT, ParquetProperties.DEFAULT_PAGE_ROW_COUNT_LIMIT))
            .withColumnIndexTruncateLength(conf.getInt(ParquetOutputFormat.COLUMN_INDEX_TRUNCATE_LENGTH,
                                                       ParquetProperties.DEFAULT_COLUMN_INDEX_TRUNCATE_LENGTH))
            .withStatisticsTruncateLength(conf.getInt(ParquetOutputFormat.STATISTICS_TRUNCATE_LENGTH,
                                                      ParquetProperties.DEFAULT_STATISTICS_TRUNCATE_LENGTH))
            .withPageWriteChecksumEnabled(conf.getBoolean(ParquetOutputFormat.PAGE_WRITE_CHECKSUM_ENABLED,
                                                          ParquetProperties.DEFAULT_PAGE_WRITE_CHECKSUM_ENABLED))
            .withWriterVersion(v2 ? ParquetProperties.WriterVersion.PARQUET_2_0 : ParquetProperties.WriterVersion.PARQUET_1_0)
            .build();
    }

    private static Pass write(Configuration conf, List<String> inputs, List<ParquetMetadata> footers,
                              CompressionCodecName codec, Path out) throws IOException {
        FileMetaData meta = footers.get(0).getFileMetaData();
        MessageType schema = meta.getSchema();
        ParquetProperties props = properties(conf, footers);
        long blockSize = ParquetOutputFormat.getLongBlockSize(conf);
        List<ColumnDescriptor> columns = schema.getColumns();
        CodecFactory codecs = new CodecFactory(conf, props.getPageSizeThreshold());
        ContentHash hash = new ContentHash(columns.size());
        long rows = 0;
        int blocks = 0;
        try {
            ParquetFileWriter writer = new ParquetFileWriter(HadoopOutputFile.fromPath(out, conf), schema,
                ParquetFileWriter.Mode.CREATE, blockSize, 0, props.getColumnIndexTruncateLength(),
                props.getStatisticsTruncateLength(), props.getPageWriteChecksumEnabled());
            writer.start();
            ParquetBlock block = new ParquetBlock(schema, columns, props, codecs.getCompressor(codec));
            for (int i = 0; i < inputs.size(); i++) {
                String createdBy = footers.get(i).getFileMetaData().getCreatedBy();
                try (ParquetFileReader r = ParquetFileReader.open(HadoopInputFile.fromPath(new Path(inputs.get(i)), conf))) {
                    PageReadStore group;
                    while ((group = r.readNextRowGroup()) != null) {
                        ColumnReadStoreImpl read = new ColumnReadStoreImpl(group, new ParquetColumns.NoRecords(), schema, createdBy);
                        for (int c = 0; c < columns.size(); c++) block.copy(c, read.getColumnReader(columns.get(c)), hash);
                        block.rows += group.getRowCount();
                        rows += group.getRowCount();
                        group.close();
                        if (block.bufferedSize() >= blockSize) {  // cut at a whole input row group
                            block.flushTo(writer);
                            blocks++;
                            block = new ParquetBlock(schema, columns, props, codecs.getCompressor(codec));
                        }
                    }
                }
            }
            if (block.rows > 0) {
                block.flushTo(writer);
                blocks++;
            }
            writer.end(meta.getKeyValueMetaData());
        } finally {
            codecs.release();
        }
        return new Pass(rows, blocks, hash);
    }

    /** The output read back the same way, its schema checked to be the inputs'. */
    private static Pass readBack(Configuration conf, Path out, MessageType schema) throws IOException {
        List<ColumnDescriptor> columns = schema.getColumns();
        ContentHash hash = new ContentHash(columns.size());
        long rows = 0;
        try (ParquetFileReader r = ParquetFileReader.open(HadoopInputFile.fromPath(out, conf))) {
            MessageType got = r.getFooter().getFileMetaData().getSchema();
            if (!got.equals(schema)) throw new IOException("the output's schema is not its inputs': " + got);
            String createdBy = r.getFooter().getFileMetaData().getCreatedBy();
            PageReadStore group;
            while ((group = r.readNextRowGroup()) != null) {
                ColumnReadStoreImpl read = new ColumnReadStoreImpl(group, new ParquetColumns.NoRecords(), schema, createdBy);
                for (int c = 0; c < columns.size(); c++) ParquetColumns.hash(c, read.getColumnReader(columns.get(c)), hash);
                rows += group.getRowCount();
                group.close();
            }
            return new Pass(rows, r.getFooter().getBlocks().size(), hash);
        }
    }

    /** The inputs' one codec; CannotMerge when the inputs differ in what the output keeps, or hold
     *  what this engine does not write (encryption, bloom filters). */
    private static CompressionCodecName agreeing(List<String> inputs, List<ParquetMetadata> footers) throws CannotMerge {
        FileMetaData first = footers.get(0).getFileMetaData();
        CompressionCodecName codec = null;
        for (int i = 0; i < footers.size(); i++) {
            FileMetaData meta = footers.get(i).getFileMetaData();
            String name = new Path(inputs.get(i)).getName();
            if (meta.getEncryptionType() != FileMetaData.EncryptionType.UNENCRYPTED) throw new CannotMerge(name + " is encrypted");
            if (!meta.getSchema().equals(first.getSchema())) {
                throw new CannotMerge(name + " differs in its schema from " + new Path(inputs.get(0)).getName());
            }
            if (!meta.getKeyValueMetaData().equals(first.getKeyValueMetaData())) {
                throw new CannotMerge(name + " differs in its key-value metadata from " + new Path(inputs.get(0)).getName());
            }
            for (BlockMetaData b : footers.get(i).getBlocks()) {
                for (ColumnChunkMetaData c : b.getColumns()) {
                    if (c.getBloomFilterOffset() >= 0) throw new CannotMerge(name + " has bloom filters (" + c.getPath() + ")");
                    if (codec != null && c.getCodec() != codec) throw new CannotMerge("the files' column chunks use codecs " + codec + " and " + c.getCodec());
                    codec = c.getCodec();
                }
            }
        }
        return codec == null ? CompressionCodecName.UNCOMPRESSED : codec;
    }

}
