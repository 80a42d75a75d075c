"""Hive small-file compaction: the merge DAG (plan from the Metastore -> mapped Spark merges ->
statistics refresh -> one asset event per compacted table) and its rollback DAG, both defined by
the config beside this file (``hive_compaction.yaml``, or the file ``$HIVE_COMPACTION_CONFIG``
names). The logic lives in the ``hive_compaction`` package (installed as a wheel, or ``plugins/``
of the checkout): ``hive_compaction.airflow.dag_factory``.

A second instance in the same Airflow (another team, another Metastore): a copy of this file
under another name whose ``CONFIG`` names its own YAML beside it
(``config.dag_config_path(__file__, "team_b.yaml")``), that YAML's ``dag:`` section giving it its own
``dag_id`` (docs/configuration.md#several-instances).
"""

from __future__ import annotations

from hive_compaction.airflow import config
from hive_compaction.airflow.dag_factory import compaction_dags

CONFIG = config.dag_config_path(__file__)  # a second instance: the path of its own YAML
dag, rollback = compaction_dags(CONFIG)
