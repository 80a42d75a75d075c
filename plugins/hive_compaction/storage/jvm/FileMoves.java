// Guarded renames for the helper (HiveCompactionHelper.moveAll): a file moves only if it is still
// the one named, never over another, and never into a partition folder that is gone.

import java.io.IOException;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

public class FileMoves {
    /** The message a move into a folder that does not exist fails with (hadoop_fs.FolderGone). */
    public static final String MISSING_FOLDER = "no such folder to move into: ";

    private final Configuration conf;
    private final FileStatuses statuses;

    public FileMoves(Configuration conf, FileStatuses statuses) {
        this.conf = conf;
        this.statuses = statuses;
    }

    /** Move files: [[src, dst], ...]. A missing src is skipped (a replay after a crash); an
     *  existing dst is an error (never overwrite). Stops at the first failure. Returns moves done.
     *  ``createFolders`` false (moves into a partition): a dst folder that does not exist is
     *  never created (a partition dropped meanwhile would be re-created, and MSCK REPAIR would
     *  register it again): FileNotFoundException starting with MISSING_FOLDER. */
    public int moveAll(List pairs, boolean createFolders) throws IOException {
        int moved = 0;
        for (int i = 0; i < pairs.size(); i++) {
            List pair = (List) pairs.get(i);
            Path src = new Path((String) pair.get(0));
            Path dst = new Path((String) pair.get(1));
            FileSystem fs = src.getFileSystem(conf);
            if (!isTheFileNamed(fs, src, pair)) continue;
            if (fs.exists(dst)) throw new IOException("will not overwrite " + dst + " (moving " + src + ")");
            Path parent = dst.getParent();
            if (createFolders) {
                if (!fs.exists(parent)) LocalDisk.makeFolders(fs, parent, conf);
                if (!fs.rename(src, dst)) throw new IOException("rename " + src + " -> " + dst + " failed");
            } else if (!renameIntoExisting(fs, src, dst)) {
                if (!fs.exists(parent)) throw new java.io.FileNotFoundException(MISSING_FOLDER + parent);
                throw new IOException("rename " + src + " -> " + dst + " failed");
            }
            moved++;
        }
        return moved;
    }

    /** Whether src exists and, when the pair names its size, time (and version), is that file:
     *  never one a writer put under its name since (an INSERT OVERWRITE reusing 000000_0). */
    private boolean isTheFileNamed(FileSystem fs, Path src, List pair) throws IOException {
        Path where;
        FileStatus st;
        try {
            where = statuses.stored(fs, src);
            st = statuses.stat(where);
        } catch (java.io.FileNotFoundException e) {
            return false;
        }
        if (st == null) return false;
        if (pair.size() > 3 && (st.getLen() != ((Number) pair.get(2)).longValue()
                || st.getModificationTime() != ((Number) pair.get(3)).longValue())) return false;
        if (pair.size() > 4 && pair.get(4) != null && !pair.get(4).equals(statuses.version(where, st))) return false;
        return true;
    }

    /** Renames without creating dst's folder; false if it failed (the folder does not exist?).
     *  HDFS's rename fails when the folder is missing. The local file system's falls back to a
     *  copy when rename(2) fails, and that copy creates the folder: there the file (and its
     *  checksum file) moves by java.nio's move, a rename(2) that never creates a folder. */
    private boolean renameIntoExisting(FileSystem fs, Path src, Path dst) throws IOException {
        Path parent;
        try {
            parent = fs.resolvePath(dst.getParent());  // through a viewfs mount
        } catch (java.io.FileNotFoundException e) {
            return false;
        }
        FileSystem target = parent.getFileSystem(conf);
        if (!(target instanceof org.apache.hadoop.fs.LocalFileSystem)) return fs.rename(src, dst);
        org.apache.hadoop.fs.LocalFileSystem local = (org.apache.hadoop.fs.LocalFileSystem) target;
        Path from = fs.resolvePath(src);
        Path to = new Path(parent, dst.getName());
        if (!nioMove(local, from, to)) return false;
        Path crc = local.getChecksumFile(from);
        if (local.exists(crc)) nioMove(local, crc, local.getChecksumFile(to));  // without it the file still reads
        return true;
    }

    private static boolean nioMove(org.apache.hadoop.fs.LocalFileSystem local, Path from, Path to) throws IOException {
        try {
            // No REPLACE_EXISTING: an existing target fails too.
            java.nio.file.Files.move(local.pathToFile(from).toPath(), local.pathToFile(to).toPath(),
                                     new java.nio.file.CopyOption[0]);
            return true;
        } catch (java.nio.file.NoSuchFileException e) {
            return false;
        }
    }
}
