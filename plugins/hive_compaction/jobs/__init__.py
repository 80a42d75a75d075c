"""The Spark entry points, shipped inside the package (and so inside the wheel and the zip):
``compact_partitions.py`` (the merge job the DAG submits; config key ``merge_job``) and
``rollback.py``. Each is run as a script by spark-submit and imports only the package. Beside
them, the merge engine's jar (``hive-compaction-engine.jar``, built by the wheel's build), which
the merge tasks pass to spark-submit with ``--jars``."""

from pathlib import Path

MERGE_JOB = Path(__file__).resolve().parent / "compact_partitions.py"
ROLLBACK_JOB = Path(__file__).resolve().parent / "rollback.py"
ENGINE_JAR_NAME = "hive-compaction-engine.jar"
