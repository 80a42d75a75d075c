// Small text files for the helper (HiveCompactionHelper.readText, writeLocal, linkLocal,
// replaceLocal): journals and manifests, read in one round trip, written to the local disk without
// Hadoop's chmod forks, and published there by link(2) or rename(2), each step one round trip.

import java.io.IOException;
import java.nio.charset.StandardCharsets;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

public class TextFiles {
    private final Configuration conf;

    public TextFiles(Configuration conf) { this.conf = conf; }

    /** A small file's text (UTF-8), or null when it does not exist. */
    public String read(String uri) throws IOException {
        Path p = new Path(uri);
        FSDataInputStream in;
        try {
            in = p.getFileSystem(conf).open(p);
        } catch (java.io.FileNotFoundException e) {
            return null;
        }
        try {
            return new String(org.apache.commons.io.IOUtils.toByteArray(in), StandardCharsets.UTF_8);
        } finally {
            in.close();
        }
    }

    /** Write a small file of the local file system (UTF-8 text), forced to disk before it returns,
     *  creating its folder if missing (a viewfs path is resolved to its mount's folder). Through
     *  java.io: without its native library, Hadoop's local file system sets each new file's mode,
     *  and its checksum file's, with a forked chmod (~5 ms a file, twice per journal written). No
     *  checksum file is made: the name it is published under (hard link, rename) has none either. */
    public void writeLocal(String uri, String text) throws IOException {
        Path p = new Path(uri);
        FileSystem fs = p.getFileSystem(conf);
        if (!fs.exists(p.getParent())) LocalDisk.makeFolders(fs, p.getParent(), conf);
        java.io.FileOutputStream out = new java.io.FileOutputStream(localFile(p));
        try {
            out.write(text.getBytes(StandardCharsets.UTF_8));
            out.getChannel().force(true);
        } finally {
            out.close();
        }
    }

    /** Publish the closed local file ``tmpUri`` under the name of ``uri`` (its folder) by a hard
     *  link; false, changing nothing, when something has that name: link(2) never replaces. */
    public boolean linkLocal(String tmpUri, String uri) throws IOException {
        java.io.File tmp = localFile(new Path(tmpUri));
        java.io.File target = new java.io.File(tmp.getParentFile(), new Path(uri).getName());
        try {
            java.nio.file.Files.createLink(target.toPath(), tmp.toPath());
        } catch (java.nio.file.FileAlreadyExistsException e) {
            return false;
        }
        return true;
    }

    /** Give the closed local file ``tmpUri`` the name of ``uri`` (its folder) in one step,
     *  replacing what has it (rename(2)); a checksum file of the old one goes first (it would not
     *  match the new text, which has none). */
    public void replaceLocal(String tmpUri, String uri) throws IOException {
        java.io.File tmp = localFile(new Path(tmpUri));
        java.io.File target = new java.io.File(tmp.getParentFile(), new Path(uri).getName());
        java.nio.file.Files.deleteIfExists(new java.io.File(tmp.getParentFile(), "." + target.getName() + ".crc").toPath());
        java.nio.file.Files.move(tmp.toPath(), target.toPath(),
            new java.nio.file.CopyOption[] { java.nio.file.StandardCopyOption.ATOMIC_MOVE });
    }

    /** The local file a path names, in its folder as resolved (through a viewfs mount; the
     *  folder must exist); IOException if it is not on the local file system. */
    private java.io.File localFile(Path p) throws IOException {
        Path folder = p.getFileSystem(conf).resolvePath(p.getParent());
        if (!"file".equals(folder.toUri().getScheme())) {
            throw new IOException("not on the local file system: " + p + " (" + folder + ")");
        }
        return new java.io.File(new java.io.File(folder.toUri().getPath()), p.getName());
    }
}
