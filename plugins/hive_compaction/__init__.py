"""Hive small-file compaction: planning from the Metastore, safe merges, statistics refresh.

One sub-package per side and concern (docs/architecture.md has every module; pyproject.toml's
``[tool.importlinter]`` contracts check who may import whom):

- ``airflow``  the Airflow side: config, run form, planning, backlog, task bodies, report,
               alerts, assets, the Metastore hook (Thrift) and the results table reader
- ``jobs``     the Spark entry points (``jobs/compact_partitions.py``, ``jobs/rollback.py``)
- ``merge``    the merge job's library: grouping, sizing, rewrite, copy merge, checksum, runner
- ``commit``   the commit protocol: in place, location switch, recovery, rollback, work area
- ``storage``  the Hadoop FileSystem, the JVM helper (``storage/jvm/*.java``), per-scheme
               capabilities, paths, listings, the Metastore client in Spark's JVM
- ``model``    shared by both sides: results, the batch payload, the results table's names

Layers: ``airflow`` and ``jobs`` on top (side by side), then ``merge``, ``commit``, ``storage``,
``model``; ``airflow`` uses only ``model`` and the pure ``storage.paths`` / ``storage.capabilities``.
"""

# The one place the version is written: pyproject.toml reads it (``[tool.setuptools.dynamic]``),
# the plan puts it in every batch and the merge job compares it with its own (``batch.check_version``).
__version__ = "0.2.0"
