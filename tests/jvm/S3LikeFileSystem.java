// A test-only Hadoop FileSystem with an object store's semantics, over a local folder.
//
// Scheme s3like: s3like:///a/b is the file <fs.s3like.root>/a/b. Like S3A (without S3Guard or
// conditional writes) it has:
// - a rename that copies the bytes, then deletes the source (a folder: file by file), so a
//   reader or a crash in between sees the data in both places or half moved;
// - a create(overwrite=false) that checks whether the name exists, then writes, the object
//   appearing when the stream closes: two creators that both check before either closes both
//   succeed, the last to close replacing the other;
// - no append and no checksum (.crc) files.
// The merge job must refuse tables on it (storage.py); tests/s3like.py compiles this file with
// Janino (no javac needed) into a jar for the Metastore's and the jobs' classpaths.
//
// Janino compiles a subset of Java: no lambdas, no try-with-resources, type arguments ignored.
package hctest;

import java.io.File;
import java.io.FileInputStream;
import java.io.FileNotFoundException;
import java.io.FileOutputStream;
import java.io.FilterOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.URI;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.util.Progressable;

public class S3LikeFileSystem extends FileSystem {
    public static final String SCHEME = "s3like";
    public static final String ROOT_KEY = "fs.s3like.root";

    private final URI uri = URI.create(SCHEME + ":///");
    private File root;
    // Reads go through the local file system's own streams (seekable, positioned reads).
    private final RawLocalFileSystem local = new RawLocalFileSystem();
    private Path workingDirectory = new Path(SCHEME + ":///");

    public S3LikeFileSystem() {}

    public void initialize(URI name, Configuration conf) throws IOException {
        super.initialize(name, conf);
        setConf(conf);
        String folder = conf.get(ROOT_KEY);
        if (folder == null || folder.length() == 0) {
            throw new IOException(ROOT_KEY + " is not set: the local folder that s3like:/// stands for");
        }
        root = new File(folder).getAbsoluteFile();
        local.initialize(URI.create("file:///"), conf);
    }

    public String getScheme() { return SCHEME; }

    public URI getUri() { return uri; }

    public Path getWorkingDirectory() { return workingDirectory; }

    public void setWorkingDirectory(Path dir) { workingDirectory = makeQualified(dir); }

    /** The local file behind an s3like path. */
    private File file(Path p) {
        Path q = makeQualified(p);
        return new File(root, q.toUri().getPath());
    }

    /** The s3like path of a local file under the root. */
    private Path pathOf(File f) {
        String rel = f.getAbsolutePath().substring(root.getPath().length());
        return new Path(SCHEME + "://" + (rel.length() == 0 ? "/" : rel));
    }

    private FileStatus status(File f) {
        // An object store has no owners or permissions worth reading: fixed ones, as S3A reports.
        return new FileStatus(f.isDirectory() ? 0L : f.length(), f.isDirectory(), 1, 32L * 1024 * 1024,
                              f.lastModified(), f.lastModified(), new FsPermission((short) 0777), "s3like", "s3like",
                              pathOf(f));
    }

    public FileStatus getFileStatus(Path p) throws IOException {
        File f = file(p);
        if (!f.exists()) throw new FileNotFoundException("s3like: no such object: " + p);
        return status(f);
    }

    public FileStatus[] listStatus(Path p) throws IOException {
        File f = file(p);
        if (!f.exists()) throw new FileNotFoundException("s3like: no such object: " + p);
        if (!f.isDirectory()) return new FileStatus[] {status(f)};
        String[] names = f.list();
        java.util.Arrays.sort(names);
        FileStatus[] out = new FileStatus[names.length];
        for (int i = 0; i < names.length; i++) out[i] = status(new File(f, names[i]));
        return out;
    }

    public boolean mkdirs(Path p, FsPermission permission) throws IOException {
        File f = file(p);
        if (f.isFile()) throw new FileAlreadyExistsException("s3like: an object has that name: " + p);
        return f.isDirectory() || f.mkdirs();
    }

    public FSDataInputStream open(Path p, int bufferSize) throws IOException {
        File f = file(p);
        if (!f.isFile()) throw new FileNotFoundException("s3like: no such object: " + p);
        return local.open(new Path(f.toURI()), bufferSize);
    }

    /** Check, then write: not exclusive. As in S3 the object appears only when the stream is
     *  closed (the bytes wait in an upload file beside the root), replacing whatever has the name
     *  by then: two creators with overwrite=false that both checked before either closed both
     *  succeed. */
    public FSDataOutputStream create(Path p, FsPermission permission, boolean overwrite, int bufferSize,
                                     short replication, long blockSize, Progressable progress) throws IOException {
        final File f = file(p);
        if (f.isDirectory()) throw new FileAlreadyExistsException("s3like: a folder has that name: " + p);
        if (f.exists() && !overwrite) throw new FileAlreadyExistsException("s3like: object exists: " + p);
        File uploads = new File(root.getParentFile(), "s3like-uploads");  // beside the root, not in it
        uploads.mkdirs();
        final File upload = File.createTempFile("upload-", ".part", uploads);
        return new FSDataOutputStream(new FilterOutputStream(new FileOutputStream(upload)) {
            private boolean closed;
            public void write(byte[] b, int off, int len) throws IOException { out.write(b, off, len); }
            public void close() throws IOException {
                if (closed) return;
                closed = true;
                super.close();
                f.getParentFile().mkdirs();
                java.nio.file.Files.move(upload.toPath(), f.toPath(),
                    new java.nio.file.CopyOption[] {java.nio.file.StandardCopyOption.REPLACE_EXISTING});
            }
        }, statistics);
    }

    public FSDataOutputStream append(Path p, int bufferSize, Progressable progress) throws IOException {
        throw new UnsupportedOperationException("s3like: objects cannot be appended to: " + p);
    }

    /** Copy, then delete: a rename that is not atomic. Never replaces an existing file. */
    public boolean rename(Path src, Path dst) throws IOException {
        File from = file(src);
        File to = file(dst);
        if (!from.exists()) return false;
        if (to.isDirectory()) to = new File(to, from.getName());
        if (to.exists()) return false;
        if (from.getAbsolutePath().equals(to.getAbsolutePath())) return true;
        copy(from, to);
        delete(from);
        return true;
    }

    private static void copy(File from, File to) throws IOException {
        if (from.isDirectory()) {
            to.mkdirs();
            String[] names = from.list();
            for (int i = 0; i < names.length; i++) copy(new File(from, names[i]), new File(to, names[i]));
            return;
        }
        to.getParentFile().mkdirs();
        InputStream in = new FileInputStream(from);
        try {
            OutputStream out = new FileOutputStream(to);
            try {
                byte[] buffer = new byte[65536];
                int n;
                while ((n = in.read(buffer)) > 0) out.write(buffer, 0, n);
            } finally {
                out.close();
            }
        } finally {
            in.close();
        }
    }

    private static boolean delete(File f) {
        if (f.isDirectory()) {
            String[] names = f.list();
            for (int i = 0; i < names.length; i++) delete(new File(f, names[i]));
        }
        return f.delete();
    }

    public boolean delete(Path p, boolean recursive) throws IOException {
        File f = file(p);
        if (!f.exists()) return false;
        if (f.isDirectory() && !recursive && f.list().length > 0) {
            throw new IOException("s3like: folder not empty: " + p);
        }
        return delete(f);
    }
}
