"""A rollback's record in the results table (``model.result_table``): what the rollback job moved
back, for the rollback DAG's report, and which partitions of a run are no longer committed (the
form's list of runs leaves them out).

One partition ``run=rollback.<rollback run>/batch=0`` per rollback, its parameters: the run it
rolled back, the table, whether it was a dry run, the error that stopped it (if one did), and one
key per partition (JSON, short enough for the Metastore's parameter column). Recorded by the
rollback job through Spark's Metastore client, read by the Airflow side over Thrift.

Pure logic: no Spark, no Thrift.
"""

from __future__ import annotations

import json
from typing import Any

from hive_compaction.model.results import MAX_PARAM_CHARS

ROLLBACK_OF = "rollback.of"  # the key that tells a rollback's record from a merge batch's
TABLE, DRY_RUN, ERROR, COUNT = "rollback.table", "rollback.dry_run", "rollback.error", "rollback.count"
PARTITION_PREFIX = "rollback.partition."
ERROR_CHARS = 1500


def record_run(rollback_run: str) -> str:
    """The results table's ``run`` value of a rollback (a run tag: path-safe); the prefix keeps it
    apart from the merge runs' tags in listings."""
    return f"rollback.{rollback_run}"


def encode(
    of_run: str, table: str, dry_run: bool, partitions: list[dict[str, Any]], error: str | None = None
) -> dict[str, str]:
    """``partitions``: one dict per partition the rollback handled (or would, in a dry run)."""
    params = {ROLLBACK_OF: of_run, TABLE: table, DRY_RUN: "true" if dry_run else "false", COUNT: str(len(partitions))}
    if error:
        params[ERROR] = error[:ERROR_CHARS]
    for i, p in enumerate(partitions):
        text = json.dumps(p, separators=(",", ":"))
        if len(text) > MAX_PARAM_CHARS:  # long paths or file names: keep the partition and the figures
            text = json.dumps(
                {k: v for k, v in p.items() if k not in ("location", "names_back")}, separators=(",", ":")
            )
        params[f"{PARTITION_PREFIX}{i:05d}"] = text
    return params


def decode(params: dict[str, str]) -> dict[str, Any] | None:
    """The record's content, or None when ``params`` is not a rollback's (a merge batch's)."""
    if ROLLBACK_OF not in params:
        return None
    keys = sorted(k for k in params if k.startswith(PARTITION_PREFIX))
    return {
        "of_run": params[ROLLBACK_OF],
        "table": params.get(TABLE, ""),
        "dry_run": params.get(DRY_RUN) == "true",
        "error": params.get(ERROR),
        "complete": params.get(COUNT) == str(len(keys)),
        "partitions": [json.loads(params[k]) for k in keys],
    }
