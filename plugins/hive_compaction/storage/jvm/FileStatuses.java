// Listings and statuses for the helper (HiveCompactionHelper.list, statuses): each entry names
// the path asked for and carries the file's version where the storage has one.

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

public class FileStatuses {
    private static final Map INTERFACES = new java.util.concurrent.ConcurrentHashMap();

    private final Configuration conf;

    public FileStatuses(Configuration conf) { this.conf = conf; }

    private FileSystem fs(Path p) throws IOException { return p.getFileSystem(conf); }

    private static Map entry(FileStatus st, Path path, String version) {
        Map m = new LinkedHashMap();
        m.put("path", path.toString());
        m.put("name", path.getName());
        m.put("size", Long.valueOf(st.getLen()));
        m.put("mtime", Long.valueOf(st.getModificationTime()));
        m.put("dir", Boolean.valueOf(st.isDirectory()));
        if (version != null) m.put("version", version);
        return m;
    }

    /** Where a path's bytes are: through a viewfs mount, the target's path (whose file system's
     *  statuses carry the file id a viewfs status hides); else the path itself. */
    public Path stored(FileSystem fs, Path p) throws IOException {
        return fs instanceof org.apache.hadoop.fs.viewfs.ViewFileSystem ? fs.resolvePath(p) : p;
    }

    /** The status of a path as its storage has it, or null when it does not exist. */
    public FileStatus stat(Path stored) throws IOException {
        try {
            return fs(stored).getFileStatus(stored);
        } catch (java.io.FileNotFoundException e) {
            return null;
        }
    }

    /** What tells a file apart from another of the same name, size and time written since, where
     *  the storage has it: the etag of S3A and ABFS statuses (Hadoop's EtagSource), the file id
     *  (inode number) of HDFS's, the inode of a local file (the tests' stand-in for HDFS). Each
     *  survives a rename within the file system; null where there is none. By reflection, so the
     *  helper compiles against any Hadoop. */
    public String version(Path stored, FileStatus st) {
        if (st.isDirectory()) return null;
        Object etag = property(st, "org.apache.hadoop.fs.EtagSource", "getEtag");
        if (etag != null) return "etag:" + etag;
        Object id = property(st, "org.apache.hadoop.hdfs.protocol.HdfsFileStatus", "getFileId");
        if (id != null) return "id:" + id;
        try {
            FileSystem fs = fs(stored);
            if (fs instanceof org.apache.hadoop.fs.LocalFileSystem) {
                return "ino:" + java.nio.file.Files.getAttribute(
                    ((org.apache.hadoop.fs.LocalFileSystem) fs).pathToFile(stored).toPath(), "unix:ino",
                    new java.nio.file.LinkOption[0]);
            }
        } catch (Exception e) {
            // not a unix file system
        }
        return null;
    }

    /** ``o.method()`` if ``o`` implements the interface (called through it: the implementing
     *  class may not be public, as ABFS's is not); null if the interface is absent or not implemented. */
    private static Object property(Object o, String iface, String method) {
        try {
            Object known = INTERFACES.get(iface);
            if (known == null) {
                try {
                    known = Class.forName(iface, false, FileStatus.class.getClassLoader());
                } catch (ClassNotFoundException e) {
                    known = Boolean.FALSE;  // this Hadoop has no such interface
                }
                INTERFACES.put(iface, known);
            }
            if (!(known instanceof Class) || !((Class) known).isInstance(o)) return null;
            return ((Class) known).getMethod(method, new Class[0]).invoke(o, new Object[0]);
        } catch (Exception e) {
            return null;
        }
    }

    /** The direct children of a folder, sorted by name; [] when it does not exist. */
    public List list(String dir) throws IOException {
        Path p = new Path(dir);
        FileSystem fs = fs(p);
        List out = new ArrayList();
        Path folder;
        try {
            folder = stored(fs, p);
        } catch (java.io.FileNotFoundException e) {
            return out;
        }
        FileStatus[] children;
        try {
            children = fs(folder).listStatus(folder);
        } catch (java.io.FileNotFoundException e) {
            return out;
        }
        Arrays.sort(children, new Comparator() {
            public int compare(Object a, Object b) {
                return ((FileStatus) a).getPath().getName().compareTo(((FileStatus) b).getPath().getName());
            }
        });
        for (int i = 0; i < children.length; i++) {
            // Named by the path asked for (a viewfs path stays one), the status as stored.
            Path child = fs.makeQualified(new Path(p, children[i].getPath().getName()));
            out.add(entry(children[i], child, version(children[i].getPath(), children[i])));
        }
        return out;
    }

    /** [status or null] for a list of paths. */
    public List statuses(List paths) throws IOException {
        List out = new ArrayList();
        for (int i = 0; i < paths.size(); i++) {
            Path p = new Path((String) paths.get(i));
            FileStatus st;
            Path where;
            try {
                where = stored(fs(p), p);
                st = stat(where);
            } catch (java.io.FileNotFoundException e) {
                st = null;
                where = p;
            }
            out.add(st == null ? null : entry(st, fs(p).makeQualified(p), version(where, st)));
        }
        return out;
    }
}
