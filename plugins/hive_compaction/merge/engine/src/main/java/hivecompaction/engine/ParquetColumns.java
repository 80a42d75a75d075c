package hivecompaction.engine;

import java.util.Arrays;

import org.apache.parquet.column.ColumnDescriptor;
import org.apache.parquet.column.ColumnReader;
import org.apache.parquet.io.api.Binary;
import org.apache.parquet.io.api.Converter;
import org.apache.parquet.io.api.GroupConverter;
import org.apache.parquet.io.api.PrimitiveConverter;
import org.apache.parquet.schema.MessageType;
import org.apache.parquet.schema.Type;

/** Parquet columns read as triplets, without records: their hashing and one column's schema. */
final class ParquetColumns {
    private ParquetColumns() {}

    /** Hashes one column of a row group exactly as Block.copy does for the input. */
    static void hash(int c, ColumnReader read, ContentHash h) {
        int maxD = read.getDescriptor().getMaxDefinitionLevel();
        long n = read.getTotalValueCount();
        for (long i = 0; i < n; i++) {
            int rep = read.getCurrentRepetitionLevel();
            int def = read.getCurrentDefinitionLevel();
            long shape = (long) rep << 16 | def;
            if (def < maxD) {
                h.add(c, shape, 0);
            } else {
                switch (read.getDescriptor().getPrimitiveType().getPrimitiveTypeName()) {
                    case BOOLEAN -> h.add(c, shape, read.getBoolean() ? 1 : 0);
                    case INT32 -> h.add(c, shape, read.getInteger());
                    case INT64 -> h.add(c, shape, read.getLong());
                    case FLOAT -> h.add(c, shape, Float.floatToRawIntBits(read.getFloat()));
                    case DOUBLE -> h.add(c, shape, Double.doubleToRawLongBits(read.getDouble()));
                    default -> h.add(c, shape, bytes(read.getBinary()));
                }
            }
            read.consume();
        }
    }

    static long bytes(Binary v) {
        byte[] b = v.getBytesUnsafe();
        return ContentHash.bytes(b, 0, b.length);
    }

    /** The schema of one column alone: its path's groups (their repetition and annotations kept)
     *  down to it. */
    static MessageType only(MessageType schema, ColumnDescriptor column) {
        String[] path = column.getPath();
        Type t = schema.getType(path);
        for (int i = path.length - 1; i > 0; i--) {
            t = schema.getType(Arrays.copyOf(path, i)).asGroupType().withNewFields(t);
        }
        return new MessageType(schema.getName(), t);
    }

    /** Converters the column readers ask for and never call: no record is assembled. */
    static final class NoRecords extends GroupConverter {
        @Override
        public Converter getConverter(int fieldIndex) {
            return new NoValue();
        }

        @Override
        public void start() {}

        @Override
        public void end() {}
    }

    private static final class NoValue extends PrimitiveConverter {
        @Override
        public GroupConverter asGroupConverter() {
            return new NoRecords();
        }
    }
}
