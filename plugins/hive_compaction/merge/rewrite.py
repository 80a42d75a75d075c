"""The rewrite engine: groups' rows read and written again, verified by content.

Groups the columnar engine takes (``columnar``: one footer schema, no SORTED BY) are merged by
it in executor tasks; the rest are rewritten by Spark SQL, as follows. Those groups of a batch
go through a few Spark jobs: a table's groups in jobs of up to ``GROUPS_PER_JOB`` groups
(``job_chunks``), each group one task streaming its files into one output (``coalesce(1)``, no
shuffle). The write tasks take each group's rows and order-independent
content checksum (``checksum``: sums of two 64-bit hashes of every row) as they write them
(``writer_checksums``; where they cannot, one scan of the inputs takes them), and one scan of
the outputs takes the same of what the files hold (one aggregate grouped by file); a group whose
output differs fails only its partition. Verified outputs move to their partition's staging
folder, where the commit protocol expects them.
"""
from __future__ import annotations

import functools
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote

from pyspark.sql import DataFrame, types as T

from hive_compaction.commit.record import StagedOutput
from hive_compaction.merge import parquet_layout, writer_checksums
from hive_compaction.merge.checksum import content, content_metrics
from hive_compaction.merge.columnar import ColumnarEngine
from hive_compaction.merge.copy import error_text, read_many
from hive_compaction.merge.grouping import Engine, Group, Work, staged_suffix
from hive_compaction.merge.job_spark import JobSpark
from hive_compaction.merge.parquet_layout import ParquetLayout
from hive_compaction.merge.step_times import StepTimes
from hive_compaction.storage.hadoop_fs import HadoopFS
from hive_compaction.storage.listing import MERGED_PREFIX

log = logging.getLogger(__name__)

# The file a write task makes: part-<task's partition index>-<job uuid>...
_TASK_FILE = re.compile(r"part-(\d{5})-")


class RewriteEngine:
    def __init__(self, spark: JobSpark, fs: HadoopFS, run: str, threads: int, steps: StepTimes):
        self.spark, self.fs, self.run, self.threads, self.steps = spark, fs, run, threads, steps
        self.columnar = ColumnarEngine(spark, threads, steps, job_chunks)

    def stage(self, works: list[Work], done: Callable[[list[tuple[Work, Group]]], None] = lambda items: None) -> None:
        """Every rewrite group of the batch: the columnar engine's first, the rest in a few Spark SQL
        jobs: a table's groups in jobs of up to ``GROUPS_PER_JOB`` (``job_chunks``), each group one
        task streaming its files into one output, so every executor core is busy, with no shuffle.
        The jobs run side by side from driver threads; a failing group fails only its partition.
        ``done`` hears of each group once staged and verified, or failed (its Work's ``error``)."""
        items = [(w, g) for w in works for g in w.groups if g.engine is Engine.REWRITE]
        items = self.columnar.stage(items, done)  # the groups it does not take are left
        if not items:
            return
        try:
            self.spark.session()  # Spark SQL's, made since the first partition to rewrite was prepared
        except Exception as e:  # noqa: BLE001 - each partition to rewrite fails with it; the copies go on
            for w, _ in items:
                w.error = w.error or f"Spark SQL's session for the rewrites failed: {error_text(e)}"[:500]
            done(items)
            return
        began = time.monotonic()
        schemas = _read_schemas(self.spark, items)
        log.info("read the schema of %d table(s) in %.1fs", len({w.task.table_name for w, _ in items}),
                 time.monotonic() - began)
        jobs: dict[tuple, list[tuple[Work, Group]]] = {}
        unreadable = []
        for w, g in items:
            schema = schemas[id(w)]
            if isinstance(schema, Exception):
                w.error = w.error or f"cannot read the files to rewrite: {schema}"[:500]
                unreadable.append((w, g))
                continue
            # One job writes one format with one codec, one schema (a union needs one schema) and
            # one Parquet layout (the writer's settings are the job's).
            jobs.setdefault((w.task.work_dir, w.task.storage_format, w.codec, id(schema), _layout(w, g)),
                            []).append((w, g))
        if unreadable:
            done(unreadable)
        for job_items in jobs.values():
            # Biggest groups first: Spark starts tasks in order, so the long ones do not come last.
            job_items.sort(key=lambda item: -sum(f.size for f in item[1].files))
        chunks = job_chunks(list(jobs.values()))

        def rewrite(chunk: list[tuple[Work, Group]]) -> None:
            try:
                self._rewrite_or_isolate(chunk, schemas[id(chunk[0][0])])  # type: ignore[arg-type]  # not an error: those were not queued
            finally:
                done(chunk)

        with ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="rewrite") as pool:
            list(pool.map(rewrite, chunks))

    def _rewrite_or_isolate(self, chunk: list[tuple[Work, Group]], schema: T.StructType) -> None:
        """Run one rewrite job; if it fails (say a file whose footer reads fine but whose data does
        not), each of its groups in a job of its own, so the failure stays with its partition."""
        try:
            self._rewrite_job(chunk, schema)
            return
        except Exception as e:  # noqa: BLE001 - whatever failed: each group again in a job of its own
            if len(chunk) == 1:
                w = chunk[0][0]
                log.error("%s: rewrite failed: %s", w.task.label, error_text(e))
                w.error = w.error or f"rewrite failed: {error_text(e)}".splitlines()[0][:500]
                return
            log.warning("a rewrite job of %d group(s) failed (%s); rewriting each group on its own to find "
                        "the partition(s) at fault", len(chunk), error_text(e).splitlines()[0][:300])
        for item in chunk:
            if not item[0].error:
                self._rewrite_or_isolate([item], schema)

    def _rewrite_job(self, items: list[tuple[Work, Group]], schema: T.StructType) -> None:
        """Rewrite groups (of one table) in one Spark job, then verify and stage each output.

        Each group is one branch of a union: its files read with ``schema``, ``coalesce(1)`` (one
        task, no shuffle), sorted within the task if the table is SORTED BY. With
        ``spark.sql.unionOutputPartitioning`` off, the union's partitions are the branches' in
        order, so task i writes group i's single file ``part-0000i-...``. The write tasks take
        the rows and content checksums of what they write (else one scan of the inputs takes
        them), and one scan takes the outputs': a group whose output differs fails its
        partition. (Observing each branch during the write instead, with Spark's ``observe``,
        cost more than a second scan: 100 groups here, 32.5 s against 18.3 s + 6.8 s.
        ``benchmarks/checksum_cost.py`` compares the designs in one application.)"""
        first = items[0][0]
        fmt, codec, layout = first.task.storage_format, first.codec, _layout(*items[0])
        job_dir = f"{first.area.root}/staging/{self.run}/rewrite-{uuid.uuid4().hex[:12]}"
        planning = time.monotonic()
        branches = self._branches(items, schema)
        started = time.monotonic()
        log.info("%s: rewriting %d group(s) in one Spark job (plan built in %.1fs)", first.task.table_name,
                 len(items), started - planning)
        self.steps.first_merge("rewrite")
        try:
            union = functools.reduce(DataFrame.unionAll, branches)
            probe = self.spark.read.format(fmt).schema(schema).load([f.path for f in items[0][1].files])
            options = {"compression": codec, **(layout.writer_options() if layout else {})}
            by_file = writer_checksums.write(self.spark, union, fmt, options, job_dir, probe, schema)
            written = time.monotonic()
            outputs = self._task_outputs(job_dir)
            if by_file is None:
                wants = self._sums(fmt, schema, {f.path: id(g) for _, g in items for f in g.files})
                inputs = "the inputs' checksums by a scan"
            else:
                wants = _written_sums(items, outputs, by_file)
                inputs = "the inputs' checksums taken by the write tasks"
            _take_outputs(items, outputs, wants)
            summed = time.monotonic()
            self._verify_rewrites(items, schema)
            self._check_layouts(items, layout)
            log.info("%s: rewrote %d group(s) (%d files) in %.1fs, read back and verified in %.1fs (%s: %.1fs)",
                     first.task.table_name, len(items), sum(len(g.files) for _, g in items), written - started,
                     time.monotonic() - written, inputs, summed - written)
            self._move_to_staging(items)
        finally:
            self.fs.delete(job_dir, recursive=True)

    def _branches(self, items: list[tuple[Work, Group]], schema: T.StructType) -> list[DataFrame]:
        """One branch of the job's union per group: its files read with ``schema``, in one task
        (``coalesce(1)``), sorted within it if the table is SORTED BY."""
        fmt = items[0][0].task.storage_format
        branches = []
        for w, g in items:
            df = self.spark.read.format(fmt).schema(schema).load([f.path for f in g.files])
            branch = df.coalesce(1)
            sort = [c for c in w.task.sort_columns if c in df.columns]
            if sort:
                branch = branch.sortWithinPartitions(*sort)  # spills to disk when a group exceeds memory
            branches.append(branch)
        return branches

    def _task_outputs(self, job_dir: str) -> dict[int, list]:
        """The files the job wrote, by the index of the task (= the group) that wrote them."""
        outputs: dict[int, list] = {}
        for e in self.fs.list(job_dir):
            m = _TASK_FILE.match(e.name)
            if m and not e.is_dir:
                outputs.setdefault(int(m.group(1)), []).append(e)
        return outputs

    def _move_to_staging(self, items: list[tuple[Work, Group]]) -> None:
        """Each verified output moves to its partition's staging folder, where the commit
        protocol (and recovery, and cleanup) expects it."""
        moves = []
        for w, g in items:
            if w.error:
                continue
            tag = uuid.uuid4().hex[:12]
            staged = []
            for k, o in enumerate(g.staged):
                target = f"{w.staging}/rewrite-{tag}-{k}{staged_suffix(o.name)}"
                moves.append((o.staged, target))
                staged.append(StagedOutput(target, f"{MERGED_PREFIX}{tag}-{k:05d}{staged_suffix(o.name)}", o.size))
            g.staged = staged
        self.fs.move_all(moves)

    def _sums(self, fmt: str, schema: T.StructType, group_of: dict[str, int]) -> dict[int, tuple[int, int, int]]:
        """Rows and content checksums per group, from one scan of all the files ``group_of``
        maps to their group: one aggregate grouped by the file each row came from (the checksum
        is a sum over rows, so files' sums add up to their group's). The scan packs small files
        into a few tasks. A row from a file no group names fails the whole job."""
        by_path = {_path_of(p): key for p, key in group_of.items()}
        df = self.spark.read.format(fmt).schema(schema).load(list(group_of))
        path = _metadata_column(df).getField("file_path")
        out: dict[int, tuple[int, int, int]] = {}
        for r in df.groupBy(path.alias("file")).agg(*content_metrics(schema)).collect():
            key = by_path.get(_path_of(unquote(r["file"])))
            if key is None:
                raise RuntimeError(f"rows read from {r['file']}, a file of no group being checked")
            out[key] = tuple(a + b for a, b in zip(out.get(key, (0, 0, 0)), content(r)))  # type: ignore[assignment]  # 3 + 3
        return out

    def _check_layouts(self, items: list[tuple[Work, Group]], layout: ParquetLayout | None) -> None:
        """Each staged Parquet output's footer keeps the layout its inputs show (a Spark that let
        the session's settings win over the write's options would not): else its partition fails."""
        if layout is None or not layout.writer_options():
            return
        staged = [(w, o.staged) for w, g in items if not w.error for o in g.staged]
        for (w, _path), read in zip(staged, read_many(self.spark, "parquet", [p for _, p in staged])):
            written = None if isinstance(read, Exception) else parquet_layout.of_schema(read.footer.schema)
            if written is None or not layout.kept_by(written):
                w.error = w.error or (f"the rewrite's output does not keep its inputs' Parquet layout ({layout}): "
                                      f"{read if written is None else written}; nothing was committed")
                log.error("%s: %s", w.task.label, w.error)

    def _verify_rewrites(self, items: list[tuple[Work, Group]], schema: T.StructType) -> None:
        """Read the staged outputs of many groups back in one scan (``_sums``) and compare each
        group's rows and content checksum with its inputs'. One scan over all outputs costs a
        fraction of one read per group (100 groups of 20,000 rows here: 6 s against 23 s)."""
        written = [(w, g) for w, g in items if g.staged and not w.error]
        got = self._sums(written[0][0].task.storage_format, schema,
                         {o.staged: id(g) for _, g in written for o in g.staged}) if written else {}
        for w, g in items:
            if w.error:
                continue
            have = got.get(id(g), (0, 0, 0))
            if have != g.want:
                w.error = (f"verification failed: inputs had {g.want[0]} rows (checksum {g.want[1]}/{g.want[2]}), "
                           f"the staged output has {have[0]} (checksum {have[1]}/{have[2]}); nothing was committed")
                log.error("%s: %s", w.task.label, w.error)


def _layout(w: Work, g: Group) -> ParquetLayout | None:
    """The Parquet layout a group's files show, which its output keeps (``grouping.rewrite_layouts``
    never puts files of differing layouts in one group); None for ORC."""
    if w.task.storage_format != "parquet":
        return None
    return parquet_layout.common(parquet_layout.of_schema(w.footers[f.path].schema) for f in g.files)


def _written_sums(items: list[tuple[Work, Group]], outputs: dict[int, list],
                  by_file: dict[str, tuple[int, int, int]]) -> dict[int, tuple[int, int, int]]:
    """Each group's rows and checksums as its write task took them, from its files'. A sum
    for a file the job did not leave, or a file left without one, fails the whole job (the
    job is then retried group by group)."""
    listed = {e.name for files in outputs.values() for e in files}
    if set(by_file) != listed:
        raise RuntimeError(f"the write tasks' checksums name {sorted(set(by_file) - listed)[:3]} and not "
                           f"{sorted(listed - set(by_file))[:3]} of the files written")
    out: dict[int, tuple[int, int, int]] = {}
    for i, (_, g) in enumerate(items):
        for e in outputs.get(i, []):
            out[id(g)] = tuple(a + b for a, b in zip(out.get(id(g), (0, 0, 0)), by_file[e.name]))  # type: ignore[assignment]  # 3 + 3
    return out


def _take_outputs(items: list[tuple[Work, Group]], outputs: dict[int, list],
                  wants: dict[int, tuple[int, int, int]]) -> None:
    """Each group's inputs' rows and checksums (``want``) and its written files (``staged``);
    inputs Spark read a different number of rows from than their footers hold fail the partition."""
    for i, (w, g) in enumerate(items):
        g.want = wants.get(id(g), (0, 0, 0))
        in_footers = sum(w.footers[f.path].rows for f in g.files)
        if g.want[0] != in_footers and not w.error:
            w.error = (f"verification failed: Spark read {g.want[0]} rows from inputs whose footers hold "
                       f"{in_footers}; nothing was committed")
        g.rows = g.want[0]
        g.staged = [StagedOutput(e.path, e.name, e.size) for e in outputs.get(i, [])]


# A union of this many file scans still plans in seconds; each group is one task of the job.
GROUPS_PER_JOB = 100
# The first job of a table is this small, the next four times larger, and so on: its plan is built
# in a fraction of a second, so the first bytes are written while the larger jobs' plans are built
# (~40 ms a group in a fresh driver: 100 groups' plan took 5.3 s before the first write, 2026-11-28).
FIRST_JOB_GROUPS = 8


def job_chunks(jobs: list[list], per_job: int = GROUPS_PER_JOB, first: int = FIRST_JOB_GROUPS) -> list[list]:
    """The Spark jobs that rewrite ``jobs`` (each a list of groups one job may hold): each cut
    into jobs of ``first``, ``4 * first``, ... up to ``per_job`` groups, in order; every list's
    first job before any list's second, and so on."""
    chunks: list[tuple[int, list]] = []
    for items in jobs:
        k, size, n = 0, first, 0
        while k < len(items):
            size = min(size, per_job)
            chunks.append((n, items[k:k + size]))
            k, size, n = k + size, size * 4, n + 1
    return [chunk for _, chunk in sorted(chunks, key=lambda c: c[0])]


def _read_schemas(spark: JobSpark, items: list[tuple[Work, Group]]) -> dict[int, T.StructType | Exception]:
    """The schema every rewrite of a partition reads and writes, per Work: the union of the
    schemas of the table's files being rewritten in this batch (files written before a column
    was added are read into the newest schema). Where the table's files share one footer schema,
    that file's footer converted in the driver (``footer_schema``); else one Spark read per
    table merging one file per distinct footer schema. Never a schema inference per group.
    Should the union fail for the table (incompatible types), each partition is tried on its own."""
    per_work: dict[int, dict[str, str]] = {}  # id(work) -> footer schema -> one file with it
    tables: dict[str, dict[int, Work]] = {}
    for w, g in items:
        reps = per_work.setdefault(id(w), {})
        for f in g.files:
            reps.setdefault(w.footers[f.path].schema, f.path)
        tables.setdefault(w.task.table_name, {})[id(w)] = w

    def union(fmt: str, reps: dict[str, str]):
        files = sorted(set(reps.values()))
        if len(files) == 1:
            return footer_schema(spark, fmt, files[0])
        # Schemas to merge: Spark's own merge (a Spark job, ~1-2 s in a fresh application).
        return spark.read.format(fmt).option("mergeSchema", "true").load(files).schema

    out: dict[int, T.StructType | Exception] = {}
    for table, table_works in tables.items():
        reps = {}
        for key in table_works:
            for k, v in per_work[key].items():
                reps.setdefault(k, v)
        try:
            schema = union(next(iter(table_works.values())).task.storage_format, reps)
            for key in table_works:
                out[key] = schema
        except Exception as e:  # noqa: BLE001 - no common schema: each partition on its own
            log.warning("%s: the files to rewrite have no common schema (%s); trying each partition "
                        "on its own", table, error_text(e))
            for key, w in table_works.items():
                try:
                    out[key] = union(w.task.storage_format, per_work[key])
                except Exception as e2:  # noqa: BLE001 - that partition fails with it, the others go on
                    out[key] = RuntimeError(error_text(e2))
    return out


def footer_schema(spark: JobSpark, fmt: str, path: str) -> T.StructType:
    """The schema ``spark.read`` infers for the one file ``path``, converted from its footer in the
    driver by Spark's own converters, as Spark's ORC and Parquet sources do before they make every
    field nullable. A Spark read costs more: 1.1-1.7 s in a fresh session here (2026-11-28), and
    for Parquet a Spark job even for one file. Where the footer gives nothing (those internal
    APIs differ in this Spark, or an ORC file without columns, which Spark's read skips), Spark
    reads the schema itself."""
    session = spark.session()
    try:
        schema = _converted_footer_schema(session, fmt, path)
    except Exception as e:  # noqa: BLE001 - Spark's read below then works, or says what is wrong
        log.warning("the schema of %s comes from a Spark read (its footer's conversion failed: %s)", path,
                    str(e).splitlines()[0][:200])
        schema = None
    if schema is None or not schema.fields:
        return session.read.format(fmt).load(path).schema
    return schema


def _converted_footer_schema(session, fmt: str, path: str) -> T.StructType | None:
    jvm, conf = session._jvm, session._jsc.hadoopConfiguration()
    file = jvm.org.apache.hadoop.fs.Path(path)
    if fmt == "orc":
        reader = jvm.org.apache.orc.OrcFile.createReader(file, jvm.org.apache.orc.OrcFile.readerOptions(conf))
        try:
            schema = jvm.org.apache.spark.sql.execution.datasources.orc.OrcUtils.toCatalystSchema(reader.getSchema())
        finally:
            reader.close()
    elif fmt == "parquet":
        parquet = jvm.org.apache.spark.sql.execution.datasources.parquet
        metadata = jvm.org.apache.parquet.hadoop.ParquetFileReader.readFooter(
            conf, file, jvm.org.apache.parquet.format.converter.ParquetMetadataConverter.NO_FILTER)
        schema = parquet.ParquetFileFormat.readSchemaFromFooter(
            jvm.org.apache.parquet.hadoop.Footer(file, metadata),
            parquet.ParquetToSparkSchemaConverter(session._jsparkSession.sessionState().conf()))
    else:
        return None
    return T.StructType.fromJson(json.loads(schema.asNullable().json()))


def _metadata_column(df: DataFrame):
    """The scan's hidden ``_metadata`` column, never a column of the table's own (which may be
    named so). PySpark has ``DataFrame.metadataColumn`` from 4.0; Spark 3.5 has it on the JVM's
    Dataset only."""
    if hasattr(df, "metadataColumn"):
        return df.metadataColumn("_metadata")
    from pyspark.sql.column import Column
    return Column(df._jdf.metadataColumn("_metadata"))


def _path_of(uri: str) -> str:
    """A file's path without its scheme and authority (``file:/a``, ``file:///a`` and
    ``hdfs://nn:8020/a`` give ``/a``): Spark's and Hadoop's spellings of one file compare equal.
    Not ``paths.split_uri``: a Hadoop path is not URL-encoded, and urlsplit would cut a file name
    at a ``#`` or ``?``."""
    m = re.match(r"[A-Za-z][A-Za-z0-9+.-]*:(//[^/]*)?", uri)
    return uri[m.end():] if m else uri
