"""The Spark entry points, shipped inside the package (and so inside the wheel and the zip):
``compact_partitions.py`` (the merge job the DAG submits; config key ``merge_job``) and
``rollback.py``. Each is run as a script by spark-submit and imports only the package."""

from pathlib import Path

MERGE_JOB = Path(__file__).resolve().parent / "compact_partitions.py"
ROLLBACK_JOB = Path(__file__).resolve().parent / "rollback.py"
