"""The merge job's Spark: its SparkContext from the start, Spark SQL's session only when a
rewrite needs one.

Listing, footers, copies, commits, the Metastore lock and the results table use only the
SparkContext's JVM and Hadoop configuration. Making the SparkSession costs a driver another
~2-3 s (Spark SQL's classes loading, docs/performance.md#the-fixed-start), so a job that only
copies never makes one, and a job that rewrites starts making it, on a thread of its own, as soon
as its first partition to rewrite is prepared.
"""

from __future__ import annotations

import logging
import platform
import threading
import time

from pyspark import SparkContext
from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def runtime(spark) -> str:
    """What the job runs on, for its log: "Spark 3.5.9, Scala 2.12.18, Java 17.0.15, Python 3.8.18"
    (``spark``: a SparkSession, a JobSpark or anything with ``sparkContext``)."""
    jvm = spark.sparkContext._jvm
    return (
        f"Spark {spark.sparkContext.version}, Scala {jvm.scala.util.Properties.versionNumberString()}, "
        f"Java {jvm.java.lang.System.getProperty('java.version')}, Python {platform.python_version()}"
    )


class JobSpark:
    """What the job's modules take as ``spark``: ``sparkContext``, ``_jvm``, ``_jsc`` and
    ``version`` at once; ``read`` and ``session()`` make the SparkSession on first use (or wait for
    ``make_session_soon``'s), with the settings the rewrites rely on (``configure``)."""

    def __init__(self, sc: SparkContext):
        self.sparkContext = sc
        self._jvm = sc._jvm
        self._jsc = sc._jsc
        self.version = sc.version
        self._session: SparkSession | None = None
        self._making = threading.Lock()  # rewrite threads may ask for it together
        self._early: threading.Thread | None = None  # make_session_soon's
        self._soon = threading.Lock()

    def session(self) -> SparkSession:
        with self._making:
            if self._session is None:
                began = time.monotonic()
                session = SparkSession.builder.getOrCreate()
                configure(session)
                self._session = session
                log.info("Spark SQL session made for the rewrites in %.1fs", time.monotonic() - began)
            return self._session

    def make_session_soon(self) -> None:
        """Start making the session on a thread of its own (a rewrite is coming): the job goes on
        preparing its other partitions meanwhile, and ``session()`` waits for it."""
        with self._soon:
            if self._session is not None or self._early is not None:
                return
            self._early = threading.Thread(target=self._make_early, daemon=True, name="spark-sql-session")
            self._early.start()

    def _make_early(self) -> None:
        try:
            self.session()
        except Exception as e:  # noqa: BLE001 - the rewrite's own call tries again and reports it
            log.warning("could not make Spark SQL's session ahead of the rewrites: %s", e)

    @property
    def read(self):
        return self.session().read

    def stop(self) -> None:
        if self._early is not None:
            self._early.join()
        if self._session is not None:
            self._session.stop()
        else:
            self.sparkContext.stop()


def configure(spark: SparkSession) -> None:
    """The Spark SQL settings a merge job's reads and writes rely on."""
    # A file Spark cannot read must fail the job, never be skipped silently in both the write
    # and the verification pass (a cluster's defaults may turn skipping on).
    spark.conf.set("spark.sql.files.ignoreCorruptFiles", "false")
    spark.conf.set("spark.sql.files.ignoreMissingFiles", "false")
    # Every read below names its files, already listed by us: without this, Spark starts a
    # listing job for each read of more than 32 paths (~0.3 s each, per rewrite group).
    spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", "1000000")
    # What Spark counts a file as when it packs files into a scan's tasks (4 MB by default): on
    # small files that makes a task per 32 files, and the checksum scans of the rewrites read
    # thousands of them. Counted this small, files pack into about one task per core (Spark
    # still splits a scan into at least as many tasks as cores): 1,000 ORC files of 2,000 rows
    # were checksummed in 3.0 s against 4.0 s here. Each rewrite group is one task anyway.
    # A value set for the application (spark_conf, spark-defaults) is kept.
    if not spark.sparkContext.getConf().contains("spark.sql.files.openCostInBytes"):
        spark.conf.set("spark.sql.files.openCostInBytes", str(64 * 1024))
    # A union of single-partition branches keeps one partition per branch (Spark 4 would
    # otherwise zip them into one task): see rewrite.RewriteEngine._rewrite_job.
    spark.conf.set("spark.sql.unionOutputPartitioning", "false")
    # Each branch of that union (one per group) is a whole-stage code stage of its own, and with
    # the stage's id in its class name the same code is compiled (Janino, then the JIT) once per
    # branch: 30 groups made 60 classes. Without the id Spark's code cache gives every branch
    # the one class (2 classes for 30 groups), as a loop of one group per query gets.
    spark.conf.set("spark.sql.codegen.useIdInClassName", "false")
