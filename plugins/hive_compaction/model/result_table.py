"""The package's results table in the Hive Metastore: how merge jobs hand their results to Airflow.

One partition ``run=<run>/batch=<n>`` per merge job, holding the job's results as partition
parameters (``results.encode_results``); no data file is ever written to it. The plan task
creates the table if it is missing, each merge job records its batch at the end (through the
Metastore client in Spark's own JVM, so it authenticates as Spark does: Kerberos, delegation
tokens), and the refresh task reads the batches; the plan task drops batches older than ``KEEP_DAYS``.

This module holds what both sides share: the table's layout and names. The Airflow side reads and
prunes it (``airflow.results_reader``, Thrift), the merge job writes it (``merge.results_writer``,
the JVM client); pure Python.
"""

from __future__ import annotations

PARTITION_KEYS = ("run", "batch")
# A plain text table's storage classes: the table never holds data, but the Metastore wants some.
TEXT_INPUT = "org.apache.hadoop.mapred.TextInputFormat"
TEXT_OUTPUT = "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat"
TEXT_SERDE = "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe"


def split_name(name: str) -> tuple[str, str]:
    db, _, table = name.partition(".")
    return db, table


def partition_name(run: str, batch: int | str) -> str:
    return f"run={run}/batch={batch}"  # run tags are path-safe (paths.run_tag): nothing to escape


# Recorded runs are kept this long: the history of what each run found and did.
KEEP_DAYS = 30
