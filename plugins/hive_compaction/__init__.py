"""Hive small-file compaction: planning from the Metastore, safe merges, statistics refresh.

One module per concern:

- ``config``     the tables to maintain and their policy (the YAML file users edit)
- ``metastore``  reading partitions and writing statistics through the Hive Metastore
- ``sizing``     which files of a partition are merged together (Hudi's small-file rules)
- ``planning``   which partitions are candidates, packed into a bounded number of Spark jobs
- ``paths``      location checks that keep every change inside the partition it names
- ``hadoop_fs``  the Hadoop FileSystem API, reached from PySpark (HDFS, S3A, ABFS, file://)
- ``jvm_helper`` batched file and footer work in the driver's JVM (``jvm/*.java``, compiled by Janino)
- ``copy_merge`` ORC stripe / Parquet row-group copy merges and their verification
- ``commit``     the journaled commit protocol that never loses nor duplicates a row
- ``merge``      the Spark side: rewrite, verify, commit one batch of partitions
- ``rollback``   putting a run's partitions back from the trash
- ``report``     the run report
- ``jobs``       the Spark entry points (``jobs/compact_partitions.py``, ``jobs/rollback.py``)
"""

# The one place the version is written: pyproject.toml reads it (``[tool.setuptools.dynamic]``),
# the plan puts it in every batch and the merge job compares it with its own (``batch.check_version``).
__version__ = "0.2.0"
