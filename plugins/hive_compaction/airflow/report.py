"""The run report: per table and partition, what changed, what was skipped and why."""

from __future__ import annotations

from hive_compaction.model.results import BUCKETS, bucket_edges, statistics_were_stale


def _size(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def reader_gap_note(retries: int, retry_delay_seconds: float, lease_seconds: float) -> str:
    """How long readers of a partition miss rows, at most, when its merge job dies in the middle
    of an in-place commit (between the first input's move and the last output's): until the
    task's retry takes the dead job's lock, once silent for ``lease_seconds``, and finishes the
    commit. Airflow's exponential backoff waits up to twice the retry delay for the first retry."""
    if retries < 1:
        return (
            "if a merge job dies in the middle of an in-place commit, readers of that partition miss rows until "
            "the next run finishes the commit (retries: 0)"
        )
    wait = 2 * retry_delay_seconds
    return (
        f"if a merge job dies in the middle of an in-place commit, readers of that partition miss rows until its "
        f"retry finishes the commit: at most {wait + lease_seconds:.0f} s and the retry's start (the retry waits "
        f"up to {wait:.0f} s, retry_delay {retry_delay_seconds:.0f} s with exponential backoff, and takes the "
        f"dead job's lock once it has been silent {lease_seconds:.0f} s, its lease)"
    )


def stale_note(r: dict) -> str:
    """ "statistics said 1 file(s), the disk had 31" where the Metastore was wrong, else ""."""
    if not statistics_were_stale(r):
        return ""
    said = (
        "no statistics"
        if r.get("stats_files") is None
        else f"statistics said {r['stats_files']} file(s) ({_size(r.get('stats_bytes'))})"
    )
    return f"{said}, the disk had {r['files_before']} ({_size(r['bytes_before'])})"


def deferred_reason(d: dict) -> str:
    """Why a partition was not planned, and when it is looked at again (tasks.revisit_text)."""
    return f"fan-out limit reached; {d.get('again') or 'not looked at again automatically'}"


def summarize(results: list[dict], skipped: list[dict], deferred: list[dict]) -> dict:
    merged = [r for r in results if r["status"] == "merged"]
    return {
        "partitions_examined": len(results),
        "partitions_merged": len(merged),
        "files_before": sum(r["files_before"] for r in merged),
        "files_after": sum(r["files_after"] for r in merged),
        "bytes_before": sum(r["bytes_before"] for r in merged),
        "bytes_after": sum(r["bytes_after"] for r in merged),
        "rows_merged": sum(r.get("rows_merged") or 0 for r in merged),
        "skipped": len(skipped) + sum(1 for r in results if r["status"] == "skipped"),
        "deferred": len(deferred),
        "failed": sum(1 for r in results if r["status"] == "failed"),
        "listed": sum(1 for r in results if r.get("listed")),
        "stale_statistics": sum(1 for r in results if stale_note(r)),
        # the longest time a reader listing a merged partition could miss rows (in_place commits)
        "reader_window_ms_max": max((r.get("reader_window_ms") or 0 for r in merged), default=0),
        # committed without the Metastore's lock (require_locks: false)
        "unlocked": sum(1 for r in merged if r.get("unlocked")),
        # interrupted commits of earlier runs or attempts that this run's jobs finished
        "recovered": sum(1 for r in results if r.get("recovered")),
    }


def unlocked_note(summary: dict) -> str:
    n = summary.get("unlocked", 0)
    return (
        (
            f"{n} partition(s) committed WITHOUT the Metastore's lock (require_locks: false): a Hive writer "
            "could not be told to wait"
        )
        if n
        else ""
    )


def render(results: list[dict], skipped: list[dict], deferred: list[dict]) -> str:
    """A fixed-width table for the task log."""
    header = ("table", "partition", "status", "files", "bytes", "rows", "mode", "secs", "reason")
    rows = [header]
    for r in sorted(results, key=lambda r: (r["table"], r["partition"])):
        rows.append(
            (
                r["table"],
                r["partition"] or "-",
                r["status"],
                f"{r['files_before']} -> {r['files_after']}",
                f"{_size(r['bytes_before'])} -> {_size(r['bytes_after'])}",
                "-" if r.get("rows") is None else str(r["rows"]),
                r.get("mode") or "-",
                f"{r.get('seconds', 0):.1f}",
                "; ".join(x for x in (r.get("reason"), stale_note(r), r.get("again")) if x),
            )
        )
    for s in skipped:
        rows.append(
            (
                s["table"],
                s["partition"] or "-",
                "skipped",
                "",
                "",
                "",
                "",
                "",
                "; ".join(x for x in (s["reason"], s.get("again")) if x),
            )
        )
    for d in deferred:
        rows.append((d["table"], d["partition"] or "-", "deferred", "", "", "", "", "", deferred_reason(d)))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    s = summarize(results, skipped, deferred)
    lines.append("")
    lines.append(
        f"{s['partitions_merged']} of {s['partitions_examined']} partitions merged: "
        f"{s['files_before']} -> {s['files_after']} files, "
        f"{_size(s['bytes_before'])} -> {_size(s['bytes_after'])}, {s['rows_merged']} rows verified; "
        f"{s['skipped']} skipped, {s['deferred']} deferred, {s['failed']} failed; "
        f"{s['listed']} listed, {s['stale_statistics']} with statistics that disagreed with the disk"
    )
    if s["recovered"]:
        lines.append(
            f"{s['recovered']} interrupted commit(s) left by earlier runs or attempts finished (their "
            "partitions read every row again; see the rows above)"
        )
    unlocked = unlocked_note(s)
    if unlocked:
        lines.append(unlocked)
    return "\n".join(lines)


# --- file-size distribution -------------------------------------------------------------------
def bucket_labels(small_file_limit: int, target_file_size: int) -> list[str]:
    q, limit, target = (_size(x) for x in bucket_edges(small_file_limit, target_file_size))
    return [f"< {q}", f"{q} - {limit}", f"{limit} - {target}", f">= {target}"]


def _add(a: list[int] | None, b) -> list[int] | None:
    if a is None or not isinstance(b, (list, tuple)) or len(b) != BUCKETS:
        return None
    return [x + int(y) for x, y in zip(a, b)]


LITTLE_DATA = "too little small data left to fill a file of the small-file limit"


def _left_reason(r: dict, small: int | None = None) -> str:
    """Why a partition still holds small files. A merged partition whose only small files are
    its outputs had too little data for more; its notes (what was not copied, why auto rewrote)
    explain inputs left beside them."""
    if r["status"] == "merged" and small is not None and small <= (r.get("groups") or 0):
        reason = LITTLE_DATA
    else:
        reason = r.get("reason") or {
            "merged": LITTLE_DATA,
            "would_merge": "dry run",
            "nothing_to_do": "fewer small files than min_small_files",
        }.get(r["status"], r["status"])
    return "; ".join(x for x in (reason, r.get("again")) if x)


def _no_partitions_yet(policy: dict) -> dict:
    """A table's entry of ``distribution`` before its partitions are counted (``policy``: its limits)."""
    limit, target = policy.get("small_file_limit"), policy.get("target_file_size")
    known = limit is not None and target is not None
    return {
        "small_file_limit": limit,
        "target_file_size": target,
        "buckets": bucket_labels(limit, target) if known else None,  # type: ignore[arg-type]  # known: both set
        "before": [0] * BUCKETS if known else None,
        "after": [0] * BUCKETS if known else None,
        "partitions": 0,
        "files_before": 0,
        "files_after": 0,
        "merged_inputs": 0,
        "outputs": 0,
        "small_files_left": [],
    }


def distribution(
    results: list[dict], skipped: list[dict], deferred: list[dict], policies: dict[str, dict]
) -> dict[str, dict]:
    """Per table: the file-size buckets before and after (summed over the partitions listed), and
    the partitions where small files are left, with the reason. ``policies``: per table the
    ``small_file_limit`` and ``target_file_size`` the run used. Buckets are exact where the merge
    job recorded ``sizes_before`` / ``sizes_after``; otherwise they are None and the counts of
    merged inputs and outputs (``merged_inputs``, ``outputs``) are what is known."""
    tables: dict[str, dict] = {}

    def entry(name: str) -> dict:
        if name not in tables:
            tables[name] = _no_partitions_yet(policies.get(name) or {})
        return tables[name]

    for r in sorted(results, key=lambda r: (r["table"], r["partition"])):
        e = entry(r["table"])
        e["partitions"] += 1
        e["files_before"] += r["files_before"]
        e["files_after"] += r["files_after"]
        if r["status"] in ("merged", "would_merge"):
            e["merged_inputs"] += r.get("files_merged") or 0
            e["outputs"] += r.get("groups") or 0
        e["before"] = _add(e["before"], r.get("sizes_before"))
        after = r.get("sizes_after")
        e["after"] = _add(e["after"], after)
        if isinstance(after, (list, tuple)) and len(after) == BUCKETS:
            small = after[0] + after[1]
            if small:
                e["small_files_left"].append(
                    {"partition": r["partition"], "small_files": small, "reason": _left_reason(r, small)}
                )
        elif r["status"] != "merged" and r["files_after"] > 1:  # sizes unknown: they may be small
            e["small_files_left"].append({"partition": r["partition"], "small_files": None, "reason": _left_reason(r)})
    for s in skipped:
        entry(s["table"])["small_files_left"].append(
            {
                "partition": s["partition"],
                "small_files": None,
                "reason": "; ".join(x for x in (s["reason"], s.get("again")) if x),
            }
        )
    for d in deferred:
        entry(d["table"])["small_files_left"].append(
            {"partition": d["partition"], "small_files": None, "reason": deferred_reason(d)}
        )
    return tables


def render_distribution(tables: dict[str, dict]) -> str:
    """Per table, a few lines a person reads at a glance."""
    lines = []
    for name, e in sorted(tables.items()):
        lines.append(f"{name}: {e['partitions']} partition(s) listed, files {e['files_before']} -> {e['files_after']}")
        if e["buckets"] and e["before"] is not None and e["after"] is not None:
            width = max(len(b) for b in e["buckets"])
            lines.append(f"  {'file size'.ljust(width)}  before  after")
            for label, b, a in zip(e["buckets"], e["before"], e["after"]):
                lines.append(f"  {label.ljust(width)}  {b:>6}  {a:>5}")
        else:
            lines.append(
                f"  sizes per file not recorded by the merge job: {e['merged_inputs']} small file(s) "
                f"merged into {e['outputs']}"
            )
        for s in e["small_files_left"][:20]:
            count = "small files" if s["small_files"] is None else f"{s['small_files']} small file(s)"
            lines.append(f"  left: {s['partition'] or '(table)'}: {count}: {s['reason']}")
        if len(e["small_files_left"]) > 20:
            lines.append(f"  left: ... {len(e['small_files_left']) - 20} more partition(s)")
    return "\n".join(lines)


def note(results: list[dict], summary: dict, tables: dict[str, dict], dry_run: bool = False) -> str:
    """One line for the run: what was merged, what is left."""
    left = sum(len(e["small_files_left"]) for e in tables.values())
    verb = "dry run, would merge" if dry_run else "merged"
    merged = sum(1 for r in results if r["status"] == ("would_merge" if dry_run else "merged"))
    if dry_run:  # the summary's figures count merged partitions only
        would = [r for r in results if r["status"] == "would_merge"]
        summary = {
            **summary,
            **{k: sum(r[k] for r in would) for k in ("files_before", "files_after", "bytes_before", "bytes_after")},
        }
    unlocked = unlocked_note(summary)
    return (
        f"{verb} {merged} of {summary['partitions_examined']} partition(s) "
        f"in {len(tables)} table(s): {summary['files_before']} -> {summary['files_after']} files, "
        f"{_size(summary['bytes_before'])} -> {_size(summary['bytes_after'])}; "
        f"{left} partition(s) with small files left; "
        f"{summary['skipped']} skipped, {summary['deferred']} deferred, {summary['failed']} failed"
        + (f"; {unlocked}" if unlocked else "")
    )
