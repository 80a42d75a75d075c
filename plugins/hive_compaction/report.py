"""The run report: per table and partition, what changed, what was skipped and why."""
from __future__ import annotations

from .results import statistics_were_stale


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def stale_note(r: dict) -> str:
    """"statistics said 1 file(s), the disk had 31" where the Metastore was wrong, else ""."""
    if not statistics_were_stale(r):
        return ""
    said = "no statistics" if r.get("stats_files") is None else \
        f"statistics said {r['stats_files']} file(s) ({_size(r.get('stats_bytes'))})"
    return f"{said}, the disk had {r['files_before']} ({_size(r['bytes_before'])})"


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
    }


def render(results: list[dict], skipped: list[dict], deferred: list[dict]) -> str:
    """A fixed-width table for the task log."""
    header = ("table", "partition", "status", "files", "bytes", "rows", "mode", "secs", "reason")
    rows = [header]
    for r in sorted(results, key=lambda r: (r["table"], r["partition"])):
        rows.append((r["table"], r["partition"] or "-", r["status"],
                     f"{r['files_before']} -> {r['files_after']}",
                     f"{_size(r['bytes_before'])} -> {_size(r['bytes_after'])}",
                     "-" if r.get("rows") is None else str(r["rows"]),
                     r.get("mode") or "-", f"{r.get('seconds', 0):.1f}",
                     "; ".join(x for x in (r.get("reason"), stale_note(r)) if x)))
    for s in skipped:
        rows.append((s["table"], s["partition"] or "-", "skipped", "", "", "", "", "", s["reason"]))
    for d in deferred:
        rows.append((d["table"], d["partition"] or "-", "deferred", "", "", "", "", "",
                     "fan-out limit reached; planned again next run"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    s = summarize(results, skipped, deferred)
    lines.append("")
    lines.append(f"{s['partitions_merged']} of {s['partitions_examined']} partitions merged: "
                 f"{s['files_before']} -> {s['files_after']} files, "
                 f"{_size(s['bytes_before'])} -> {_size(s['bytes_after'])}, {s['rows_merged']} rows verified; "
                 f"{s['skipped']} skipped, {s['deferred']} deferred, {s['failed']} failed; "
                 f"{s['listed']} listed, {s['stale_statistics']} with statistics that disagreed with the disk")
    return "\n".join(lines)
