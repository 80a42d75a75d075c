"""The rewrite's checksums taken by its write tasks, as they write each row (``jvm/*.java``).

A rewrite used to read its inputs twice: once to write them, once more to checksum them. Here the
write task hashes each row as it hands it to the file writer, with the same Catalyst expressions
as the scans' (``checksum.row_hashes``), so the inputs are read and decoded once. What the files
hold is still read back and checksummed (``RewriteEngine._verify_rewrites``), and Spark's row
count of the inputs is still checked against their footers.

The classes are compiled by Janino in the driver (``jvm_helper``), and reach the executors in a
jar written from the same class files and added with ``SparkContext.addJar``. The driver's Spark
finds the format class through the thread's context class loader, set for the write call only
(``HiveCompactionChecksums.save``, one JVM call).
Anything that keeps this from working (a Spark whose internal writer API differs, a jar that
cannot be added) makes the rewrite fall back to scanning its inputs, and says so once.
"""

from __future__ import annotations

import logging
import threading
import zipfile
from pathlib import Path

from pyspark.sql import DataFrame, types as T

from hive_compaction.merge.checksum import row_hashes
from hive_compaction.storage import jvm_helper

log = logging.getLogger(__name__)

SOURCES = (
    "HiveCompactionChecksums",
    "HiveCompactionChecksumOrc",
    "HiveCompactionChecksumParquet",
    "HiveCompactionChecksumWriterFactory",
    "HiveCompactionChecksumWriter",
)
JAR = "hive-compaction-checksums.jar"
FORMATS = {"orc": "HiveCompactionChecksumOrc", "parquet": "HiveCompactionChecksumParquet"}
_lock = threading.Lock()
_loaders: dict[int, tuple[object, object]] = {}  # id(py4j gateway client) -> (that client, loader or None)


def _loader(spark):
    """The class loader holding the classes in this application's driver, after their jar was
    added for the executors; None if they cannot be had here (said once)."""
    client = spark._jvm._gateway_client
    key = id(client)
    with _lock:
        if key not in _loaders or _loaders[key][0] is not client:
            try:
                loader, files = jvm_helper.load_classes(spark, SOURCES, __package__)
                # In the application's own temporary folder (SparkFiles'), which Spark removes
                # when the driver stops: the jar must outlive every executor's fetch of it.
                jar = Path(str(spark._jvm.org.apache.spark.SparkFiles.getRootDirectory())) / JAR
                with zipfile.ZipFile(jar, "w") as z:
                    for name, data in sorted(files.items()):
                        z.writestr(name, data)
                spark.sparkContext._jsc.sc().addJar(str(jar))
            except Exception as e:  # noqa: BLE001 - the rewrite then checksums its inputs by a scan
                log.warning(
                    "the write tasks cannot take the rewrite's checksums here (%s): the inputs are "
                    "checksummed by a second scan instead",
                    str(e).splitlines()[0][:300],
                )
                loader = None
            _loaders[key] = (client, loader)
        return _loaders[key][1]


def write(
    spark, df: DataFrame, fmt: str, options: dict[str, str], path: str, probe: DataFrame, schema: T.StructType
) -> dict[str, tuple[int, int, int]] | None:
    """Write ``df`` as ``fmt`` to ``path``; the rows and content checksums (``checksum.content``)
    of each file written, by file name, taken by the write tasks. ``probe`` is a read of files
    with ``schema``, the written columns (only its plan is used). None when the write tasks could
    not take them: the files were then written without."""
    loader = _loader(spark) if fmt in FORMATS else None
    if loader is None:
        df.write.format(fmt).options(**options).save(path)
        return None
    first, second = row_hashes(schema)
    plan = probe.select(first.alias("checksum"), second.alias("checksum2"))._jdf.queryExecution().optimizedPlan()
    sums = spark.sparkContext._jsc.sc().collectionAccumulator("hive-compaction rewrite checksums")
    checksums = loader.loadClass("HiveCompactionChecksums").newInstance()
    reg = checksums.register(plan, sums)
    if reg is None:
        log.warning(
            "the write tasks cannot take the checksums of this plan: the inputs are checksummed by a "
            "second scan instead"
        )
        df.write.format(fmt).options(**options).save(path)
        return None
    writer = df.write.format(FORMATS[fmt]).options(**options)  # found by the class loader save() sets
    taken = checksums.save(writer._jwrite, reg, path)
    if not taken:
        return None
    out: dict[str, tuple[int, int, int]] = {}
    for line in jvm_helper.java_list(sums.value()):
        name, rows, high, low, high2, low2 = str(line).split("\t")
        got = (int(rows), (int(high) << 32) + int(low), (int(high2) << 32) + int(low2))
        out[name] = tuple(a + b for a, b in zip(out.get(name, (0, 0, 0)), got))  # type: ignore[assignment]  # 3 + 3
    return out
