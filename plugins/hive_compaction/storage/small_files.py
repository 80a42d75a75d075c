"""Publishing the small files that decide a commit (journals, replay claims, manifests): written
whole under a hidden temporary name, made durable, then given their name in one step, either
only if nothing has it (``create_exclusive``) or replacing it (``write_text_atomic``).

Mixed into ``hadoop_fs.HadoopFS``, whose ``path``, ``fs``, ``_call``, ``resolved_scheme`` and JVM handles it uses; each
step (write, publish, delete the temporary name, make the folder) is a method of its own, so the
job's storage traffic can be traced or wrapped step by step.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from py4j.protocol import Py4JJavaError

from hive_compaction.storage import capabilities as storage
from hive_compaction.storage.metastore_lock import holding_lock

log = logging.getLogger(__name__)


class SmallFiles:
    """Exclusive and atomic publication of small text files (see the module's text)."""

    if TYPE_CHECKING:  # what HadoopFS, which mixes this in, has
        _spark: Any
        _conf: Any
        _path_class: Any
        _publish: dict[str, str]

        def _call(self, method: str, *args: Any) -> Any: ...
        def java_class(self, name: str) -> Any: ...
        def path(self, uri: str) -> Any: ...
        def fs(self, uri: str) -> Any: ...
        def resolved_scheme(self, uri: str) -> str: ...
        def existing_ancestor(self, fs: Any, uri: str) -> Any: ...

    def create_exclusive(self, uri: str, text: str) -> bool:
        """Publish a small file only if nothing has its name; False if something did.

        The text is written and closed under a hidden temporary name first, then published by
        the storage's no-replace primitive (``storage.EXCLUSIVE_PUBLISH``): a reader never sees
        it half written, and of two publishers exactly one wins. Hadoop's ``create(overwrite=
        false)`` is not used: on the local file system (and S3A) it checks, then writes."""
        folder, name = uri.rsplit("/", 1)
        how = self._publish_primitive(folder)
        if how == storage.CONDITIONAL_PUT:  # one PUT, whole or nothing: no temporary name needed
            fs, p = self.fs(uri), self.path(uri)
            missing = self._publish.get(f"checked:{fs.getUri()}")
            return self._put_under_lock(uri, text, missing) if missing else self._put_if_absent(fs, p, text)
        # (The temporary file's write makes the folder when it is missing.)
        tmp = f"{folder}/.{name}.{uuid.uuid4().hex[:12]}{storage.TEMP_SUFFIX}"
        self._write(tmp, text, how)
        try:
            return self._publish_new(tmp, uri, how)
        finally:
            self._delete_temporary(tmp)

    def _publish_new(self, tmp: str, uri: str, how: str) -> bool:
        """Give the closed temporary file ``tmp`` the name ``uri`` (same folder) unless something has it."""
        if how == storage.HARD_LINK:
            return bool(self._call("linkLocal", tmp, uri))
        # HDFS: false when the target exists, atomically
        return bool(self.fs(uri).rename(self.path(tmp), self.path(uri)))

    def _delete_temporary(self, tmp: str) -> None:
        """Delete a temporary file (and the local file system's checksum file beside it): a step
        of its own, not ``delete``, so that tracing the job's storage calls counts it once."""
        self._call("delete", tmp, False)

    def _publish_primitive(self, folder: str) -> str:
        """How the storage of ``folder`` publishes exclusively (``storage.EXCLUSIVE_PUBLISH``), or
        OSError with the reason. Asked before the folder is created: on a refused storage nothing
        may be written, not even a folder (``resolved_scheme``: a mount's folder that does not
        exist yet is judged by its nearest existing ancestor)."""
        if folder not in self._publish:  # a folder's storage does not change while a job runs
            resolved = self.resolved_scheme(folder)
            if storage.EXCLUSIVE_PUBLISH.get(resolved) == storage.CONDITIONAL_PUT:
                self._check_conditional_writes(folder)
            self._publish[folder] = resolved
        resolved = self._publish[folder]
        how = storage.EXCLUSIVE_PUBLISH.get(resolved)
        if how is None:
            raise OSError(storage.commit_refusal(resolved))
        return how

    def _check_conditional_writes(self, folder: str) -> None:
        """Once per bucket and job: probe whether its conditional writes can be relied on."""
        fs = self.fs(folder)
        bucket = f"checked:{fs.getUri()}"
        if bucket in self._publish:
            return
        missing = self._conditional_writes_missing(fs, self.existing_ancestor(fs, folder))
        if missing:
            log.warning(
                "%s: journals there are published under the partition's Metastore lock only "
                "(the purge of expired runs, which holds none, cannot run there)",
                missing,
            )
        self._publish[bucket] = missing or ""

    def _put_if_absent(self, fs: Any, p: Any, text: str) -> bool:
        """S3: PutObject with If-None-Match: * (hadoop-aws's conditional create); False when the
        store refused it because the key exists (412, RemoteFileChangedException) or hadoop-aws
        saw it first (FileAlreadyExistsException). The object appears whole when the PUT ends."""
        try:
            out = fs.createFile(p).must(storage.CONDITIONAL_CREATE_OPTION, True).create().build()
            try:
                out.write(bytearray(text.encode("utf-8")))
            finally:
                out.close()  # the PUT happens here
        except Py4JJavaError as e:
            if _caused_by(e, ("RemoteFileChangedException", "FileAlreadyExistsException")):
                return False
            raise
        return True

    def _conditional_writes_missing(self, fs: Any, folder: Any) -> str | None:
        """Before the first exclusive publish on an S3 bucket: why conditional writes cannot be
        relied on there, or None. hadoop-aws must offer them (3.4.2+,
        ``fs.s3a.create.conditional.enabled``) and the endpoint must honour them (some
        S3-compatible stores ignore If-None-Match): a probe object is put twice under ``folder``,
        the second must be refused; then it is deleted."""
        where = f"{fs.getUri()} (folder {folder.toString()})"
        if not fs.hasPathCapability(folder, storage.CONDITIONAL_CREATE_OPTION):
            return (
                f"the S3A connector does not offer conditional writes on {where} (hadoop-aws 3.4.2 or newer, "
                "fs.s3a.create.conditional.enabled true)"
            )
        probe = self._path_class(folder, f".hive_compaction-conditional-write-probe-{uuid.uuid4().hex[:12]}")
        try:
            honoured = self._put_if_absent(fs, probe, "1") and not self._put_if_absent(fs, probe, "2")
        finally:
            fs.delete(probe, False)
        return (
            None
            if honoured
            else (
                f"the S3 endpoint of {where} ignores conditional writes (a PutObject with "
                "If-None-Match: * replaced an existing object)"
            )
        )

    def _put_under_lock(self, uri: str, text: str, missing: str) -> bool:
        """Without conditional writes the partition's Metastore lock is the lease: every other
        publisher of a partition's journal or claim (a commit, a replay, a rollback) holds it
        first, so a look then a PUT cannot race. Without the lock (``require_locks: false`` on a
        Metastore that serves none, or the purge, which holds none): OSError with the reason."""
        if not holding_lock():
            raise OSError(
                f"{missing}, and this job holds no Metastore lock on the partition: {uri} could "
                "not be published exclusively, so nothing is committed or purged there"
            )
        if self.fs(uri).exists(self.path(uri)):
            return False
        self._write(uri, text, storage.CONDITIONAL_PUT)
        return True

    def _write(self, uri: str, text: str, how: str | None = None) -> None:
        """Write a small file, durable before it returns (``how``: the storage's publishing
        primitive; the local file system's files are written by the JVM helper directly)."""
        if how == storage.HARD_LINK:
            self._call("writeLocal", uri, text)
            return
        out = self.fs(uri).create(self.path(uri), True)
        try:
            out.write(bytearray(text.encode("utf-8")))
            if how != storage.CONDITIONAL_PUT:  # an S3 object is durable once close() has put it
                out.hsync()
        finally:
            out.close()

    def write_text_atomic(self, uri: str, text: str) -> None:
        """Write to a hidden temporary name, close (durable), then rename it over the old file in
        one step: the name never stops existing. A journal taken over by a replay is rewritten
        here; deleted first, a rival's ``create_exclusive`` could publish its own in the gap and
        two jobs would act on one partition. HDFS: FileContext's rename with OVERWRITE (one
        NameNode operation); the local file system: rename(2) through java.nio, which replaces
        atomically (the file gets no checksum file, as ``create_exclusive``'s link does not)."""
        folder, name = uri.rsplit("/", 1)
        how = self._publish_primitive(folder)
        if how == storage.CONDITIONAL_PUT:
            # A PutObject replaces the object whole, in one step: readers see the old text or the
            # new, and the name never stops existing (a rename there would be a copy and a delete).
            self._write(uri, text, how)
            return
        self._make_folder(folder)
        tmp = f"{folder}/.{name}.{uuid.uuid4().hex[:12]}{storage.TEMP_SUFFIX}"
        self._write(tmp, text, how)
        try:
            self._replace(tmp, uri, how)
        finally:
            self._delete_temporary(tmp)

    def _make_folder(self, folder: str) -> None:
        """Create the folder and its missing parents, if missing (on the local disk without a
        chmod process)."""
        self._call("makeFolders", folder)

    def _replace(self, tmp: str, uri: str, how: str) -> None:
        """Rename the closed temporary file ``tmp`` to ``uri`` (same folder) in one step, replacing it."""
        if how == storage.HARD_LINK:
            self._call("replaceLocal", tmp, uri)
            return
        # Through a viewfs mount to the storage it resolves to: the rename is that storage's.
        parent = self.fs(uri).resolvePath(self.path(uri).getParent())
        target = parent.getFileSystem(self._conf)
        rename = self.java_class("org.apache.hadoop.fs.Options$Rename")
        options = self._spark.sparkContext._gateway.new_array(rename, 1)
        options[0] = rename.OVERWRITE
        self.java_class("org.apache.hadoop.fs.FileContext").getFileContext(target.getUri(), self._conf).rename(
            self._path_class(parent, tmp.rsplit("/", 1)[1]), self._path_class(parent, uri.rsplit("/", 1)[1]), options
        )


def _caused_by(e: Py4JJavaError, names: tuple[str, ...]) -> bool:
    """Whether the Java exception or one of its causes has one of these simple class names."""
    java = e.java_exception
    for _ in range(8):
        if java is None:
            return False
        if str(java.getClass().getSimpleName()) in names:
            return True
        java = java.getCause()
    return False
