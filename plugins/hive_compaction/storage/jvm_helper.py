"""The merge job's JVM helper (``jvm/*.java``, reached through ``HiveCompactionHelper``), compiled in
the driver at run time.

Work on many files (listing, footers, byte-range digests, renames, copy merges) goes through
py4j, where every call on a JVM object is a socket round trip of 0.1-0.5 ms. Done call by call,
those round trips were most of a copy merge's time. The helper does each batch of such work in
one call, passing JSON both ways.

It is compiled by Janino, the compiler Spark itself uses for generated code, so it needs no jar
to build, ship or put on a classpath: it works wherever PySpark runs a driver. Compilation costs
a fraction of a second once per Spark application. The helper is one class per concern (see the
head of ``HiveCompactionHelper.java``): Janino's ``Compiler`` compiles the files together, and one
class loader under Spark's loads them.
"""
from __future__ import annotations

import json
import pkgutil
import threading
import weakref

_CLASS = "HiveCompactionHelper"
# Every source file of the helper (jvm/<name>.java): named here because a zipped package cannot be
# listed through pkgutil. tests/test_jvm_helper.py checks this against the folder.
SOURCES = ("HiveCompactionHelper", "FileStatuses", "FileMoves", "TextFiles", "Footers", "OrcFooters",
           "ParquetFooters", "Digests", "CopyKey", "CopyMerge", "OrcCopy", "ParquetCopy")
_lock = threading.Lock()
_thread = threading.local()  # .clients: the py4j clients whose connection for this thread has no Nagle delay
_helpers: dict[int, tuple[object, object]] = {}  # id(py4j gateway client) -> (that client, helper)


def _sources() -> dict[str, str]:
    """File name -> Java source text of every helper class."""
    # pkgutil reads package data from a zip too (the package shipped with --py-files).
    return {f"{name}.java": pkgutil.get_data(__package__, f"jvm/{name}.java").decode("utf-8") for name in SOURCES}


def _compile(spark):
    """A class loader holding the helper's classes, compiled together from their sources.

    Janino's SimpleCompiler cooks one compilation unit; its Compiler takes several, resolving
    their references to each other, and hands the class files to a resource creator, from
    which a class loader under Spark's loads them."""
    from py4j.java_gateway import JavaClass
    client = spark._jvm._gateway_client

    def new(name, *args):
        return JavaClass(name, client)(*args)

    parent = JavaClass("org.apache.spark.util.Utils", client).getContextOrSparkClassLoader()
    compiler = new("org.codehaus.janino.Compiler")
    compiler.setIClassLoader(new("org.codehaus.janino.ClassLoaderIClassLoader", parent))
    compiler.setDebugLines(True)  # line numbers in stack traces, as SimpleCompiler gives them
    compiler.setDebugSource(True)
    classes = new("org.codehaus.commons.compiler.util.resource.MapResourceCreator")
    compiler.setClassFileCreator(classes)
    sources = _sources()
    resource = JavaClass("org.codehaus.commons.compiler.util.resource.Resource", client)
    units = spark.sparkContext._gateway.new_array(resource, len(sources))
    for i, (name, text) in enumerate(sources.items()):
        units[i] = new("org.codehaus.commons.compiler.util.resource.StringResource", name, text)
    compiler.compile(units)
    # The class files ("Name.class", "Outer$Inner.class") stay in the JVM: the loader finds them there.
    found = new("org.codehaus.commons.compiler.util.resource.MapResourceFinder", classes.getMap())
    return new("org.codehaus.commons.compiler.util.ResourceFinderClassLoader", found, parent)


def helper(spark):
    """The helper instance of this Spark application's JVM (compiled on first use)."""
    client = spark._jvm._gateway_client
    key = id(client)
    with _lock:
        # Compared by identity too: a stopped application's client may leave its id to a new one.
        if key not in _helpers or _helpers[key][0] is not client:
            instance = _compile(spark).loadClass(_CLASS).newInstance()
            instance.setConf(spark._jsc.hadoopConfiguration())
            _helpers[key] = (client, instance)
        return _helpers[key][1]


def call(spark, method: str, *args):
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
