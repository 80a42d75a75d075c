"""The merge engine's jar, seen from the driver: groups merged as Spark tasks on the executors.

``hive-compaction-engine.jar`` (built from ``merge/engine/`` by ``make engine`` and the wheel's
build, shipped in ``jobs/`` beside the merge job, passed to spark-submit with ``--jars``) runs
each group as one task of a Spark job (``ExecutorMerges.run``: a ``JavaRDD`` over the groups, JVM
code only, no Python worker), each task streaming its files through the Hadoop FileSystem API
into one output in the partition's staging folder: no byte of data passes through the driver, so
a cluster merges as fast as its executors read and write. A group is *copied* (the JVM helper's
copy merge, whose classes the jar holds too) or merged by the *columnar* engine (ORC column
vectors, Parquet column triplets; ``merge.columnar``).

Every task ends with a result, never an exception: a group that fails fails its partition alone.
Without the jar on the classpath (an older wheel's job, a Spark that cannot load it) ``engine``
is None: copies then run in the driver and rewrites through Spark SQL, as before the jar.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

JAR_NAME = "hive-compaction-engine.jar"
_CLASS = "hivecompaction.engine.ExecutorMerges"
_engines: dict = {}  # id(py4j gateway client) -> (that client, the engine's JavaClass or None)
_lock = threading.Lock()


@dataclass(frozen=True)
class MergeRequest:
    """One group for one task: ``kind`` "copy" or "columnar", its files in order, its output."""

    kind: str
    format: str
    inputs: list[str]
    output: str


@dataclass(frozen=True)
class ColumnarResult:
    """What a columnar task reports (``Merged.toMap`` in the jar): its output, the rows and the
    content checksum (two 64-bit sums) of the inputs as written and of the output read back.
    ``fallback``: why the engine did not merge the group (nothing written); ``error``: the failure."""

    output: str = ""
    size: int = 0
    blocks: int = 0
    input_rows: int = 0
    input_checksum: tuple = (0, 0)
    output_rows: int = 0
    output_checksum: tuple = (0, 0)
    write_seconds: float = 0.0
    verify_seconds: float = 0.0
    fallback: str = ""
    error: str = ""

    @classmethod
    def parse(cls, doc: dict) -> ColumnarResult:
        if "fallback" in doc or "error" in doc:
            return cls(fallback=str(doc.get("fallback", "")), error=str(doc.get("error", "")))
        return cls(
            output=doc["output"],
            size=int(doc["size"]),
            blocks=int(doc["blocks"]),
            input_rows=int(doc["input_rows"]),
            input_checksum=tuple(int(x) for x in doc["input_checksum"]),
            output_rows=int(doc["output_rows"]),
            output_checksum=tuple(int(x) for x in doc["output_checksum"]),
            write_seconds=int(doc["write_nanos"]) / 1e9,
            verify_seconds=int(doc["verify_nanos"]) / 1e9,
        )


def engine(spark: Any) -> Any | None:
    """The jar's entry class in this application's driver, or None when it is not on the
    classpath or does not load (said once in the log)."""
    client = spark._jvm._gateway_client
    with _lock:
        known = _engines.get(id(client))
        if known is None or known[0] is not client:
            found = None
            try:
                from py4j.java_gateway import JavaClass

                candidate = JavaClass(_CLASS, client)
                candidate.version()  # loads and links the class: a missing jar fails here
                found = candidate
            except Exception as e:  # noqa: BLE001 - any failure means: no jar, the driver's engines
                log.warning(
                    "the merge engine's jar (%s) is not on this job's classpath (%s): copies run in the "
                    "driver and rewrites through Spark SQL",
                    JAR_NAME,
                    str(e).splitlines()[0][:200],
                )
            known = _engines[id(client)] = (client, found)
        return known[1]


def run(spark: Any, requests: list[MergeRequest], description: str) -> list[dict]:
    """The requests' groups as one Spark job, one task each; their results in order (a copy's
    under "copy", as the JVM helper's ``copyMerge`` returns it)."""
    jar = engine(spark)
    if jar is None:
        raise RuntimeError(f"the merge engine's jar ({JAR_NAME}) is not on the classpath")
    sent = json.dumps([r.__dict__ for r in requests])
    results = json.loads(jar.run(spark._jsc, sent, description))
    if len(results) != len(requests):
        raise RuntimeError(f"the merge engine answered {len(results)} of {len(requests)} groups")
    return results
