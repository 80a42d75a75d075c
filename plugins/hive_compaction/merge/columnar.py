"""The columnar engine: rewrite groups merged through column vectors, in executor tasks.

A group to rewrite whose files share one footer schema, of a table that is not SORTED BY, is
merged by the engine's jar (``executor_merges``): ORC row batches handed from the inputs' readers
to one writer, Parquet column chunks decoded into their triplets and encoded again column by
column, never a row of Spark SQL. The output keeps what the inputs' footers say (schema and
physical types, codec, ORC stripe and index settings and calendar, Parquet page version and
key-value metadata; merge/engine's classes say exactly what), so every reader reads it as it read
the inputs. A group the engine does not merge (footers that disagree, a type it does not know,
bloom filters it would not keep) goes to the Spark SQL rewrite, the reason in its partition's.

Verification: each task takes the content checksum of every value at its position as it writes
(the engine keeps the rows' order, so the output's values must be the inputs', one after the
other), reads its output back the same columnar way and takes it again. The driver accepts a
group only when both checksums and row counts agree and the rows are the inputs' footers'.
"""

from __future__ import annotations

import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Tuple

from hive_compaction.commit.record import StagedOutput
from hive_compaction.merge import executor_merges
from hive_compaction.merge.copy import error_text
from hive_compaction.merge.executor_merges import ColumnarResult, MergeRequest
from hive_compaction.merge.grouping import Group, Work, staged_suffix
from hive_compaction.merge.step_times import StepTimes
from hive_compaction.storage.hadoop_fs import HadoopFS
from hive_compaction.storage.listing import MERGED_PREFIX

log = logging.getLogger(__name__)

Item = Tuple[Work, Group]


def why_not(w: Work, g: Group) -> str | None:
    """Why the columnar engine does not take this group, from what the driver knows; else None
    (the task may still find a reason in the files' footers)."""
    if w.task.rewrite_engine == "spark_sql":
        return "the table's rewrite_engine is spark_sql"
    if w.task.storage_format not in ("orc", "parquet"):
        return f"the columnar engine merges ORC and Parquet, not {w.task.storage_format}"
    if w.task.sort_columns:
        return "the table is SORTED BY, which only the Spark SQL rewrite keeps"
    if len({w.footers[f.path].schema for f in g.files}) > 1:
        return "its files' footer schemas differ (the Spark SQL rewrite reads them into one)"
    return None


class ColumnarEngine:
    def __init__(self, spark, threads: int, steps: StepTimes, jobs: Callable[[list[list[Item]]], list[list[Item]]]):
        self.spark, self.threads, self.steps, self._jobs = spark, threads, steps, jobs

    def stage(self, items: list[Item], done: Callable[[list[Item]], None]) -> list[Item]:
        """Merge what the engine takes of ``items`` (a table's groups in the rewrite's job sizes,
        ``jobs``), telling ``done`` of each job's groups once verified and staged or failed; the
        groups left for the Spark SQL rewrite are returned, each partition's reason saying why."""
        if executor_merges.engine(self.spark) is None:
            return items
        left: list[Item] = []
        taken: dict = {}
        for w, g in items:
            why = why_not(w, g)
            if why is None:
                taken.setdefault(w.task.table_name, []).append((w, g))
            else:
                _note(w, why)
                left.append((w, g))
        if not taken:
            return left
        for table_items in taken.values():
            table_items.sort(key=lambda item: -sum(f.size for f in item[1].files))  # long tasks first

        def merge(chunk: list[Item]) -> list[Item]:
            fallen: list[Item] = []
            try:
                fallen = self._job(chunk)
                return fallen
            finally:  # each group is reported once: by this engine, or by the Spark SQL rewrite
                left_over = {id(g) for _, g in fallen}
                done([item for item in chunk if id(item[1]) not in left_over])

        with ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="columnar") as pool:
            for fallen in pool.map(merge, self._jobs(list(taken.values()))):
                left += fallen
        return left

    def _job(self, chunk: list[Item]) -> list[Item]:
        """One Spark job over ``chunk``'s groups; returns those the engine turned down."""
        first = chunk[0][0]
        requests = []
        for w, g in chunk:
            name = f"{MERGED_PREFIX}{uuid.uuid4().hex[:12]}-v0000{staged_suffix(g.files[0].name)}"
            requests.append(
                MergeRequest("columnar", w.task.storage_format, [f.path for f in g.files], f"{w.staging}/{name}")
            )
        self.steps.first_merge("columnar")
        began = time.monotonic()
        try:
            results = executor_merges.run(
                self.spark,
                requests,
                f"hive-compaction: columnar merge of {len(chunk)} group(s) of {first.task.table_name}",
            )
        except Exception as e:  # noqa: BLE001 - the job itself failed: these partitions fail, the others go on
            for w, _ in chunk:
                w.error = w.error or f"the columnar merge job failed: {error_text(e)}"[:500]
            return []
        fallen: list[Item] = []
        writing = verifying = 0.0
        for (w, g), request, doc in zip(chunk, requests, results):
            result = ColumnarResult.parse(doc)
            if result.fallback:
                _note(w, result.fallback)
                fallen.append((w, g))
            elif result.error:
                w.error = w.error or f"columnar merge failed: {result.error}"[:500]
            else:
                writing, verifying = writing + result.write_seconds, verifying + result.verify_seconds
                _accept(w, g, request, result)
                if not g.staged:  # not verified: never left where a commit or a person could take it
                    HadoopFS(self.spark).delete(request.output)
        log.info(
            "%s: merged %d group(s) (%d files) with the columnar engine in %.1fs (its tasks: %.1fs writing, "
            "%.1fs reading back); %d left to Spark SQL",
            first.task.table_name,
            len(chunk) - len(fallen),
            sum(len(g.files) for w, g in chunk),
            time.monotonic() - began,
            writing,
            verifying,
            len(fallen),
        )
        return fallen


def _accept(w: Work, g: Group, request: MergeRequest, r: ColumnarResult) -> None:
    """The group's output staged if it is verified: the rows its inputs' footers hold, written and
    read back with equal content checksums; else its partition fails (nothing was committed)."""
    footer_rows = sum(w.footers[f.path].rows for f in g.files)
    if not (r.input_rows == r.output_rows == footer_rows and r.input_checksum == r.output_checksum):
        w.error = w.error or (
            f"verification failed: inputs' footers hold {footer_rows} rows, the columnar merge wrote {r.input_rows} "
            f"(checksum {r.input_checksum[0]}/{r.input_checksum[1]}) and read back {r.output_rows} "
            f"(checksum {r.output_checksum[0]}/{r.output_checksum[1]}); nothing was committed"
        )
        log.error("%s: %s", w.task.label, w.error)
        return
    g.rows = r.input_rows
    g.want = (r.input_rows, *r.input_checksum)
    g.staged = [StagedOutput(request.output, request.output.rsplit("/", 1)[1], r.size)]


def _note(w: Work, why: str) -> None:
    """A partition's reason says why Spark SQL rewrote (some of) its files."""
    note = f"rewritten by Spark SQL: {why}"
    if note not in (w.result.reason or ""):
        w.result.reason = ". ".join(n for n in (w.result.reason, note) if n)
