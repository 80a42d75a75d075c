package hivecompaction.engine;

import java.util.LinkedHashMap;
import java.util.Map;

/** What a columnar merge did: its output, the rows and checksums of its inputs as they were
 *  written and of the output as it reads back. */
record Merged(String output, long size, long inputRows, ContentHash written, long outputRows, ContentHash readBack,
              int blocks, long writeNanos, long verifyNanos) {

    Map<String, Object> toMap() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("output", output);
        m.put("size", size);
        m.put("blocks", blocks);
        m.put("input_rows", inputRows);
        m.put("input_checksum", new String[] {Long.toString(written.first()), Long.toString(written.second())});
        m.put("output_rows", outputRows);
        m.put("output_checksum", new String[] {Long.toString(readBack.first()), Long.toString(readBack.second())});
        m.put("write_nanos", writeNanos);
        m.put("verify_nanos", verifyNanos);
        return m;
    }
}
