// The local disk without a process per new file or folder: the helper's folders (FileMoves,
// TextFiles, CopyMerge) and the copied ORC output (OrcCopy) are made through it.

import java.io.IOException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

public class LocalDisk extends RawLocalFileSystem {
    /** The mode Hadoop chose for a new file or folder, set by chmod(2) through java.nio instead of
     *  a chmod process (the sticky bit, which java.nio cannot set, still goes the old way). */
    public void setPermission(Path p, FsPermission permission) throws IOException {
        if (permission.getStickyBit()) {
            super.setPermission(p, permission);
            return;
        }
        java.nio.file.Files.setPosixFilePermissions(pathToFile(p).toPath(),
            java.nio.file.attribute.PosixFilePermissions.fromString(permission.toString().substring(0, 9)));
    }

    /** ``fs``, or, where ``fs`` is the local disk and Hadoop's native library is missing (the
     *  pyspark wheel has none), Hadoop's checksummed local file system over LocalDisk: Hadoop's
     *  own sets the mode of every file and folder it makes by running chmod, ~4 ms each, seven
     *  per copied partition (its trash, staging and manifest folders, the output and its checksum
     *  file; 2026-11-27). The same files, checksum files and modes. */
    public static FileSystem withoutForks(FileSystem fs, Configuration conf) throws IOException {
        if (!"file".equals(fs.getUri().getScheme()) || org.apache.hadoop.io.nativeio.NativeIO.isAvailable()) return fs;
        LocalFileSystem local = new LocalFileSystem(new LocalDisk());
        local.initialize(java.net.URI.create("file:///"), conf);
        return local;
    }

    /** Create ``dir`` and its missing parents, as fs.mkdirs does (through withoutForks). */
    public static void makeFolders(FileSystem fs, Path dir, Configuration conf) throws IOException {
        if (!withoutForks(fs, conf).mkdirs(dir)) throw new IOException("could not create folder " + dir);
    }
}
