"""The merge job's JVM helper (``jvm/*.java``, reached through ``HiveCompactionHelper``), compiled in
the driver at run time.

Work on many files (listing, footers, byte-range digests, renames, copy merges) goes through
py4j, where every call on a JVM object is a socket round trip of 0.1-0.5 ms. Done call by call,
those round trips were most of a copy merge's time. The helper does each batch of such work in
one call, passing JSON both ways.

It is compiled by Janino, the compiler Spark itself uses for generated code, so it needs no jar
to build, ship or put on a classpath: it works wherever PySpark runs a driver. The helper is one
class per concern (see the head of ``HiveCompactionHelper.java``): Janino's ``Compiler`` compiles
the files together, and one class loader under Spark's loads them.

Compiling takes about 0.9 s of a driver's start (mostly Janino's own classes loading); loading the
class files compiled before takes 0.03 s. So the driver keeps them in a cache folder of its
user's (``$XDG_CACHE_HOME`` or ``~/.cache``, then ``hive-compaction/jvm-helper/<key>``), keyed by
the sources and the Spark, Java and Hadoop versions and jars they were compiled against. The
folders are the user's own (``0700``), each class file checked against the SHA-256 recorded
beside it, every class loaded at once; anything else (no home, another owner, a mismatch, a
class that will not load) falls back to compiling, and the job runs the same either way.
Deleting the folder is always safe.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pkgutil
import shutil
import stat
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Any

_CLASS = "HiveCompactionHelper"
# Every source file of the helper (jvm/<name>.java): named here because a zipped package cannot be
# listed through pkgutil. tests/test_jvm_helper.py checks this against the folder.
SOURCES = (
    "HiveCompactionHelper",
    "FileStatuses",
    "FileMoves",
    "LocalDisk",
    "TextFiles",
    "Footers",
    "OrcFooters",
    "ParquetFooters",
    "Digests",
    "CopyKey",
    "CopyMerge",
    "OrcCopy",
    "ParquetCopy",
)
_lock = threading.Lock()
_thread = threading.local()  # .clients: the py4j clients whose connection for this thread has no Nagle delay
_helpers: dict[int, tuple[object, object]] = {}  # id(py4j gateway client) -> (that client, helper)
_MANIFEST = "classes.json"  # in a cache entry: class file name -> its SHA-256
_UNUSED_DAYS = 30  # a cache entry no driver loaded for this long is removed when another is stored
log = logging.getLogger(__name__)


# Not __package__: a module imported from a zip (--py-files) runs with it None before Python 3.10.
_PACKAGE = __name__.rpartition(".")[0]


def _sources(names: tuple[str, ...] = SOURCES, package: str = _PACKAGE) -> dict[str, str]:
    """File name -> Java source text of each class of ``names`` (``package``'s ``jvm/`` folder;
    by default every helper class)."""
    # pkgutil reads package data from a zip too (the package shipped with --py-files).
    return {
        f"{name}.java": pkgutil.get_data(package, f"jvm/{name}.java").decode("utf-8")  # type: ignore[union-attr]  # the package's own file
        for name in names
    }


def _compile(spark: Any, parent: Any, sources: dict[str, str]) -> Any:
    """The helper's class files (``sources``: ``_sources()``), compiled together: a Java map of
    "Name.class" (and "Outer$Inner.class") to their bytes, in the JVM.

    Janino's SimpleCompiler cooks one compilation unit; its Compiler takes several, resolving
    their references to each other (and to Spark's classes through ``parent``), and hands the
    class files to a resource creator."""
    from py4j.java_gateway import JavaClass

    client = spark._jvm._gateway_client

    def new(name: Any, *args: Any) -> Any:
        return JavaClass(name, client)(*args)

    compiler = new("org.codehaus.janino.Compiler")
    compiler.setIClassLoader(new("org.codehaus.janino.ClassLoaderIClassLoader", parent))
    compiler.setDebugLines(True)  # line numbers in stack traces, as SimpleCompiler gives them
    compiler.setDebugSource(True)
    classes = new("org.codehaus.commons.compiler.util.resource.MapResourceCreator")
    compiler.setClassFileCreator(classes)
    resource = JavaClass("org.codehaus.commons.compiler.util.resource.Resource", client)
    units = spark.sparkContext._gateway.new_array(resource, len(sources))
    for i, (name, text) in enumerate(sources.items()):
        units[i] = new("org.codehaus.commons.compiler.util.resource.StringResource", name, text)
    compiler.compile(units)
    return classes.getMap()


def _cache_key(spark: Any, sources: dict[str, str]) -> str:
    """What the class files depend on: the sources, and the classes they were compiled against."""
    jvm, conf = spark._jvm, spark.sparkContext.getConf()
    digest = hashlib.sha256()
    for name, text in sorted(sources.items()):
        digest.update(f"{name}\0{text}\0".encode())
    for part in (
        spark.version,
        jvm.java.lang.System.getProperty("java.version"),
        jvm.org.apache.hadoop.util.VersionInfo.getVersion(),
        conf.get("spark.jars", ""),
        conf.get("spark.jars.packages", ""),
        conf.get("spark.driver.extraClassPath", ""),
    ):
        digest.update(f"{part}\0".encode())
    return digest.hexdigest()[:32]


def _cache_root() -> Path | None:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "hive-compaction", "jvm-helper") if os.path.isabs(base) else None


def _private(path: Path, folder: bool) -> bool:
    """Ours alone: owned by this user, writable by no one else (a class file from this folder
    runs with the job's credentials)."""
    st = path.lstat()
    kind = stat.S_ISDIR(st.st_mode) if folder else stat.S_ISREG(st.st_mode)
    return kind and st.st_uid == os.getuid() and not st.st_mode & (0o077 if folder else 0o022)


def _cached(entry: Path) -> list[str] | None:
    """The class names of a complete cache entry, None if there is none. PermissionError when a
    folder or file of it is not this user's alone; ValueError when the entry is, but its files are
    not the ones compiled there (a partial deletion, a damaged disk)."""
    if not entry.is_dir():
        return None
    if not (entry / _MANIFEST).is_file():
        raise ValueError(f"{entry} has no {_MANIFEST}")
    for path, folder in ((entry.parent.parent, True), (entry.parent, True), (entry, True), (entry / _MANIFEST, False)):
        if not _private(path, folder):
            raise PermissionError(f"{path} is not this user's alone")
    manifest = json.loads((entry / _MANIFEST).read_text(encoding="utf-8"))
    for name, sha in manifest.items():
        f = entry / name
        if not _private(f, False) or hashlib.sha256(f.read_bytes()).hexdigest() != sha:
            raise ValueError(f"{f} is not the file compiled there")
    return [name[: -len(".class")] for name in manifest]


def _load_cached(spark: Any, parent: Any, entry: Path) -> Any:
    """A class loader over a cache entry with every class loaded (a later deletion of the folder
    cannot break this job), or None."""
    names = _cached(entry)
    if names is None:
        return None
    from py4j.java_gateway import JavaClass

    client = spark._jvm._gateway_client
    urls = spark.sparkContext._gateway.new_array(JavaClass("java.net.URL", client), 1)
    urls[0] = JavaClass("java.io.File", client)(str(entry)).toURI().toURL()
    loader = JavaClass("java.net.URLClassLoader", client)(urls, parent)
    for name in names:
        loader.loadClass(name)
    os.utime(entry)  # in use: not pruned
    return loader


def _store(entry: Path, compiled: Any) -> None:
    """Write the cache entry ``entry`` of ``compiled`` (``_compile``'s map): into a private folder
    of its own, renamed into place when complete (drivers starting together each write theirs;
    the first rename wins)."""
    root, key = entry.parent, entry.name
    classes = {str(name): bytes(compiled.get(name)) for name in list(compiled.keySet())}
    for folder in (root.parent, root):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(folder, True):
            raise PermissionError(f"{folder} is not this user's alone (chmod 700 it to use it)")
    building = root / f".{key}-{uuid.uuid4().hex[:8]}"
    building.mkdir(mode=0o700)
    try:
        manifest = {name: hashlib.sha256(data).hexdigest() for name, data in classes.items()}
        for name, data in [*classes.items(), (_MANIFEST, json.dumps(manifest).encode("utf-8"))]:
            # 0600 whatever the umask: _cached refuses a file others may write
            with os.fdopen(os.open(building / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(data)
        os.rename(building, entry)
    except OSError:
        shutil.rmtree(building, ignore_errors=True)
        if not entry.is_dir():
            raise
    unused = time.time() - _UNUSED_DAYS * 86400  # entries of other versions, a crashed driver's half-written one
    for old in root.iterdir():
        try:
            stale = old.name != key and old.stat().st_mtime < unused
        except FileNotFoundError:  # removed by another driver meanwhile
            continue
        if stale:
            shutil.rmtree(old, ignore_errors=True)


def _class_loader(
    spark: Any, sources: dict[str, str] | None = None, class_files: dict[str, bytes] | None = None
) -> Any:
    """A class loader holding the helper's classes (or those of ``sources``): from the cache, or
    compiled (and cached). ``class_files``, if given, receives their class files' bytes by name."""
    from py4j.java_gateway import JavaClass

    client = spark._jvm._gateway_client
    parent = JavaClass("org.apache.spark.util.Utils", client).getContextOrSparkClassLoader()
    began = time.monotonic()
    sources = sources or _sources()
    root = _cache_root()
    entry = None if root is None else root / _cache_key(spark, sources)
    if entry is not None:
        try:
            loader = _load_cached(spark, parent, entry)
            if loader is not None:
                log.info("JVM helper: loaded from %s in %.2fs", entry, time.monotonic() - began)
                if class_files is not None:  # checked against their SHA-256 by _cached
                    class_files.update({f.name: f.read_bytes() for f in entry.glob("*.class")})
                return loader
        except ValueError as e:
            log.info("JVM helper: %s: removing it and compiling", e)
            shutil.rmtree(entry, ignore_errors=True)
        except Exception as e:  # noqa: BLE001 - a cache is never a reason to fail: compile instead
            log.info("JVM helper: not loaded from the cache %s (%s): compiling it", entry, e)
    compiled = _compile(spark, parent, sources)
    if class_files is not None:
        class_files.update({str(name): bytes(compiled.get(name)) for name in list(compiled.keySet())})
    kept = "not kept: no cache folder"
    if entry is not None:
        try:
            _store(entry, compiled)
            kept = f"kept in {entry} for the next drivers"
        except OSError as e:
            kept = f"not kept ({e})"
    log.info("JVM helper: compiled in %.2fs, %s", time.monotonic() - began, kept)
    # The class files stay in the JVM: the loader finds them there.
    finder = JavaClass("org.codehaus.commons.compiler.util.resource.MapResourceFinder", client)(compiled)
    return JavaClass("org.codehaus.commons.compiler.util.ResourceFinderClassLoader", client)(finder, parent)


def load_classes(spark: Any, names: tuple[str, ...], package: str) -> tuple[object, dict[str, bytes]]:
    """A class loader holding the classes ``names`` of ``package``'s ``jvm/`` folder, compiled
    apart from the helper (or from the cache), and their class files' bytes by file name."""
    files: dict[str, bytes] = {}
    return _class_loader(spark, _sources(names, package), files), files


def _from_engine_jar(spark: Any) -> Any:
    """The helper's class compiled into the merge engine's jar (``merge.executor_merges``, the same
    sources by javac), when that jar is on the driver's classpath: nothing to compile or load."""
    from py4j.java_gateway import JavaClass

    loader = JavaClass("org.apache.spark.util.Utils", spark._jvm._gateway_client).getContextOrSparkClassLoader()
    try:
        found = loader.loadClass(_CLASS)
    except Exception:  # noqa: BLE001 - not there (ClassNotFoundException): Janino's, as without the jar
        return None
    log.info("JVM helper: the merge engine jar's")
    return found


def helper(spark: Any) -> Any:
    """The helper instance of this Spark application's JVM (compiled on first use)."""
    client = spark._jvm._gateway_client
    key = id(client)
    with _lock:
        # Compared by identity too: a stopped application's client may leave its id to a new one.
        if key not in _helpers or _helpers[key][0] is not client:
            instance = (_from_engine_jar(spark) or _class_loader(spark).loadClass(_CLASS)).newInstance()
            instance.setConf(spark._jsc.hadoopConfiguration())
            _helpers[key] = (client, instance)
        return _helpers[key][1]


def java_list(items: Any) -> list[Any]:
    """A Java List's items, read by index. Iterated through py4j, a list ends with a Java
    exception (its iterator's NoSuchElementException), which PySpark's handler, installed once a
    SparkSession exists, converts into a Python one, far dearer than the reads themselves; a commit
    chunk's state read iterates a list per partition, so lists are read by index instead."""
    return [items.get(i) for i in range(items.size())]


def call(spark: Any, method: str, *args: Any) -> Any:
    """``helper.method(*args)`` with list / dict arguments sent as JSON; the JSON result parsed."""
    sent = [json.dumps(a) if isinstance(a, (list, dict)) else a for a in args]
    instance = helper(spark)
    clients = getattr(_thread, "clients", None)
    if clients is None:
        # Held weakly and compared by identity: a stopped application's client must not stand
        # in for a new one (as in helper()).
        clients = _thread.clients = weakref.WeakSet()
    client = spark._jvm._gateway_client
    if client not in clients:
        # Each Python thread has its own py4j connection: without this, every reply over 8 KB
        # (a listing, a batch of footers) waits ~40 ms on Nagle's algorithm (see noDelay).
        instance.noDelay()
        clients.add(client)
    result = getattr(instance, method)(*sent)
    return json.loads(result) if isinstance(result, str) else result
