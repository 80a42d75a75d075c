package hivecompaction.engine;

import java.util.List;

import org.apache.hadoop.hive.ql.exec.vector.BytesColumnVector;
import org.apache.hadoop.hive.ql.exec.vector.ColumnVector;
import org.apache.hadoop.hive.ql.exec.vector.DecimalColumnVector;
import org.apache.hadoop.hive.ql.exec.vector.DoubleColumnVector;
import org.apache.hadoop.hive.ql.exec.vector.ListColumnVector;
import org.apache.hadoop.hive.ql.exec.vector.LongColumnVector;
import org.apache.hadoop.hive.ql.exec.vector.MapColumnVector;
import org.apache.hadoop.hive.ql.exec.vector.StructColumnVector;
import org.apache.hadoop.hive.ql.exec.vector.TimestampColumnVector;
import org.apache.hadoop.hive.ql.exec.vector.VectorizedRowBatch;
import org.apache.hadoop.hive.serde2.io.HiveDecimalWritable;
import org.apache.orc.TypeDescription;

/** ORC row batches hashed value by value (ContentHash): each column's values at their positions,
 *  nested values in the order a reader yields them, a repeated vector as its one value each row. */
final class OrcColumns {
    private OrcColumns() {}

    static void hash(ContentHash h, TypeDescription schema, VectorizedRowBatch batch) {
        List<TypeDescription> fields = schema.getChildren();
        for (int c = 0; c < fields.size(); c++) hashColumn(h, fields.get(c), batch.cols[c], 0, batch.size);
    }

    /** Elements [start, end) of a column vector, each hashed at its position in its column. */
    private static void hashColumn(ContentHash h, TypeDescription t, ColumnVector v, int start, int end) {
        int id = t.getId();
        for (int j = start; j < end; j++) {
            int k = v.isRepeating ? 0 : j;
            if (!v.noNulls && v.isNull[k]) {
                h.add(id, 1, 0);
                continue;
            }
            switch (t.getCategory()) {
                case BOOLEAN, BYTE, SHORT, INT, LONG, DATE -> h.add(id, 0, ((LongColumnVector) v).vector[k]);
                case FLOAT, DOUBLE -> h.add(id, 0, Double.doubleToRawLongBits(((DoubleColumnVector) v).vector[k]));
                case STRING, VARCHAR, CHAR, BINARY -> {
                    BytesColumnVector b = (BytesColumnVector) v;
                    h.add(id, 0, ContentHash.bytes(b.vector[k], b.start[k], b.length[k]));
                }
                case DECIMAL -> {
                    // HiveDecimal is kept normalized (no trailing zeros): its unscaled bytes and scale
                    HiveDecimalWritable d = ((DecimalColumnVector) v).vector[k];
                    int length = d.bigIntegerBytesInternalScratch();
                    h.add(id, 0, ContentHash.bytes(d.bigIntegerBytesInternalScratchBuffer(), 0, length) ^ d.scale());
                }
                case TIMESTAMP, TIMESTAMP_INSTANT -> {
                    TimestampColumnVector ts = (TimestampColumnVector) v;
                    h.add(id, 0, ContentHash.mix(ts.time[k]) ^ ts.nanos[k]);
                }
                case STRUCT -> h.add(id, 0, 0);
                case LIST -> {
                    ListColumnVector l = (ListColumnVector) v;
                    h.add(id, 0, l.lengths[k]);
                    int from = (int) l.offsets[k];
                    hashColumn(h, t.getChildren().get(0), l.child, from, from + (int) l.lengths[k]);
                }
                case MAP -> {
                    MapColumnVector m = (MapColumnVector) v;
                    h.add(id, 0, m.lengths[k]);
                    int from = (int) m.offsets[k];
                    hashColumn(h, t.getChildren().get(0), m.keys, from, from + (int) m.lengths[k]);
                    hashColumn(h, t.getChildren().get(1), m.values, from, from + (int) m.lengths[k]);
                }
                default -> throw new IllegalArgumentException("no hash for ORC type " + t);
            }
        }
        if (t.getCategory() == TypeDescription.Category.STRUCT) {
            StructColumnVector s = (StructColumnVector) v;
            for (int c = 0; c < s.fields.length; c++) hashColumn(h, t.getChildren().get(c), s.fields[c], start, end);
        }
    }
}
