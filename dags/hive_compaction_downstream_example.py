"""Example: a DAG that runs once per date of a table that ``hive_compaction`` compacted.

``hive_compaction`` emits, for each table it merged partitions of, an asset event on the table's
asset (``hive_compaction.airflow.assets.table_asset``: ``hive://<db>/<table>``, or
``hive://<host>:<port>/<db>.<table>`` with the config's ``dag: asset_namespace``) carrying the merged
partitions' names ("dt=2026-09-10") as partition keys and the figures before and after in its extra.
This DAG listens to one table with a ``PartitionedAssetTimetable``; ``StartOfDayMapper`` reads each
key as the table's date column (``dt=%Y-%m-%d``) and maps it to the day, so the DAG gets one run per
compacted date, keyed
"2026-09-10", whichever run (scheduled, backfill, the form) compacted it. Copy it, name your
table, and put your own work in the task (refresh a cache, recompute a table's statistics in
another engine, ...).

The table: ``TABLE`` below (db.table), else the config's first table. For a
table partitioned by more columns than its date, give the mapper the whole name's format
(``dt=%Y-%m-%d/hr=%H``) or use ``IdentityMapper`` for one run per partition.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, PartitionedAssetTimetable, StartOfDayMapper, task

from hive_compaction.airflow import config
from hive_compaction.airflow.assets import table_asset

SETTINGS, _ = config.load_lenient(config.dag_config_path(__file__))  # the YAML beside this file
TABLE: str | None = None  # your table ("db.table"); None: the config's first table
TABLE = TABLE or (SETTINGS.tables[0].name if SETTINGS.tables else None)
POLICY = next((t.policy for t in SETTINGS.tables if t.name == TABLE), config.TablePolicy())

if TABLE:
    ASSET = table_asset(TABLE, SETTINGS.dag.asset_namespace)
    SCHEDULE = PartitionedAssetTimetable(
        assets=ASSET,
        partition_mapper_config={ASSET: StartOfDayMapper(input_format=f"{POLICY.date_column}={POLICY.date_format}")},
    )
else:  # no table configured: nothing to listen to
    SCHEDULE = None

with DAG(
    dag_id="hive_compaction_downstream_example",
    description=f"Runs once per date of {TABLE or '(no table configured)'} that hive_compaction compacted",
    schedule=SCHEDULE,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["example", "hive"],
    doc_md=__doc__,
):

    @task
    def use_compacted_date(partition_key=None, triggering_asset_events=None) -> dict:
        """What this run is about: its date (the run's key) and, from the events that triggered
        it, the compacted partitions of that date with their figures."""
        partitions = {}
        for events in (triggering_asset_events or {}).values():
            for e in events:
                figures = (e.extra or {}).get("partitions", {}).get(e.partition_key)
                partitions[e.partition_key] = figures
                print(f"{partition_key}: {e.partition_key} compacted by run {(e.extra or {}).get('run')}: {figures}")
        return {"date": partition_key, "table": TABLE, "partitions": partitions}

    use_compacted_date()
