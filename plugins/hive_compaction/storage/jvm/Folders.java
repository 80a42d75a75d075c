// Folders for the helper (FileMoves, TextFiles, CopyMerge): made on the local file system without
// a process per folder.

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;

public class Folders {
    /** Create ``dir`` and its missing parents, as fs.mkdirs does. Without Hadoop's native library
     *  (the pyspark wheel has none), the local file system sets each new folder's mode with a
     *  forked chmod: ~4 ms a folder, five folders per committed partition (its trash, staging and
     *  manifest folders; 2026-11-27). There each folder is made by java.nio and given the same
     *  mode by chmod(2): Hadoop's default for folders less the configured umask. */
    public static void make(FileSystem fs, Path dir, Configuration conf) throws IOException {
        if (!"file".equals(fs.getUri().getScheme()) || org.apache.hadoop.io.nativeio.NativeIO.isAvailable()) {
            if (!fs.mkdirs(dir)) throw new IOException("could not create folder " + dir);
            return;
        }
        String mode = FsPermission.getDirDefault().applyUMask(FsPermission.getUMask(conf)).toString();
        Set permissions = java.nio.file.attribute.PosixFilePermissions.fromString(mode.substring(0, 9));
        List missing = new ArrayList();
        for (java.io.File f = new java.io.File(dir.toUri().getPath()); f != null && !f.isDirectory(); f = f.getParentFile()) {
            missing.add(0, f.toPath());
        }
        for (int i = 0; i < missing.size(); i++) {
            java.nio.file.Path p = (java.nio.file.Path) missing.get(i);
            try {
                java.nio.file.Files.createDirectory(p, new java.nio.file.attribute.FileAttribute[0]);
            } catch (java.nio.file.FileAlreadyExistsException e) {
                if (!java.nio.file.Files.isDirectory(p, new java.nio.file.LinkOption[0])) throw e;
                continue;  // made meanwhile by another thread or job
            }
            java.nio.file.Files.setPosixFilePermissions(p, permissions);
        }
    }
}
