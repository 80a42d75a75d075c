// Whether files may be copy-merged into one: every input must allow a copy (``no_copy`` empty)
// and all must agree on schema, codec, version and extra facts (copy_merge.FileFooter.copy_key).

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

public class CopyKey {
    /** Inputs that cannot share one footer: nothing was written. */
    public static class Refused extends IOException {
        public Refused(String message) { super(message); }
    }

    /** What a copy must agree on: schema, codec, version, extra (see copy_merge.FileFooter.copy_key). */
    private static List of(Map facts) {
        return Arrays.asList(new Object[] {facts.get("schema"), facts.get("compression"), facts.get("version"),
                                           facts.get("extra")});
    }

    private static Map extraMap(Map facts) {
        Map m = new TreeMap();
        List extra = (List) facts.get("extra");
        for (int i = 0; i < extra.size(); i++) {
            List kv = (List) extra.get(i);
            m.put(kv.get(0), kv.get(1));
        }
        return m;
    }

    private static String shortValue(Object v) {
        String s = String.valueOf(v);
        if (s.isEmpty()) return "\"\"";
        return s.length() > 60 ? s.substring(0, 57) + "..." : s;
    }

    /** What two footers disagree on, e.g. "calendar (proleptic vs hybrid)". */
    private static List differences(Map a, Map b) {
        List out = new ArrayList();
        String[] fields = {"schema", "compression", "version"};
        for (int i = 0; i < fields.length; i++) {
            Object x = a.get(fields[i]), y = b.get(fields[i]);
            if (!String.valueOf(x).equals(String.valueOf(y))) {
                out.add(fields[i] + " (" + shortValue(x) + " vs " + shortValue(y) + ")");
            }
        }
        Map ea = extraMap(a), eb = extraMap(b);
        TreeMap keys = new TreeMap(ea);
        keys.putAll(eb);
        Object[] names = keys.keySet().toArray();
        for (int i = 0; i < names.length; i++) {
            Object x = ea.get(names[i]), y = eb.get(names[i]);
            if (x == null ? y != null : !x.equals(y)) {
                out.add(names[i] + " (" + (x == null ? "absent" : shortValue(x)) + " vs "
                        + (y == null ? "absent" : shortValue(y)) + ")");
            }
        }
        return out;
    }

    /** Refuses inputs that must not be copied (``no_copy``) or that disagree on their footer. */
    public static void check(List inputs, List facts) throws Refused {
        for (int i = 0; i < facts.size(); i++) {
            String noCopy = (String) ((Map) facts.get(i)).get("no_copy");
            if (noCopy != null && noCopy.length() > 0) {
                throw new Refused("input " + inputs.get(i) + " cannot be copy-merged: " + noCopy);
            }
        }
        StringBuilder why = new StringBuilder();
        for (int i = 1; i < facts.size(); i++) {
            if (!of((Map) facts.get(i)).equals(of((Map) facts.get(0)))) {
                why.append(why.length() == 0 ? "" : "; ").append(inputs.get(i)).append(" differs in ")
                   .append(differences((Map) facts.get(0), (Map) facts.get(i)));
            }
        }
        if (why.length() > 0) {
            throw new Refused("inputs cannot be copy-merged together: from " + inputs.get(0) + ", " + why);
        }
    }
}
