"""Undo committed compactions from their manifests: outputs out, original files back, statistics back.

The reverse of the commit, with the same rules: only the files named in the manifest move; the
merged outputs leave the partition before the originals return (never both visible at once);
every step is idempotent, so an interrupted rollback is finished by running it again.
"""
from __future__ import annotations

import json
import logging
import time

from .work_area import WorkArea
from .hadoop_fs import HadoopFS

log = logging.getLogger(__name__)


class RollbackError(RuntimeError):
    pass


def manifests(fs: HadoopFS, area: WorkArea, run: str) -> list[dict]:
    return [json.loads(fs.read_text(e.path)) for e in fs.list(area.manifests(run))
            if e.name.endswith(".json") and not e.name.startswith(".")]


def rollback_partition(fs: HadoopFS, area: WorkArea, manifest: dict) -> dict:
    if manifest.get("rolled_back_at"):
        return manifest
    location = manifest["location"].rstrip("/")
    trash = manifest["trash"]
    gone_inputs = [f["name"] for f in manifest["inputs"]
                   if not fs.exists(f"{trash}/{f['name']}") and not fs.exists(f"{location}/{f['name']}")]
    if gone_inputs:
        raise RollbackError(f"{manifest['table']} {manifest['partition']}: original file(s) {gone_inputs[:3]} "
                            "are no longer in the trash (purged after the retention?); nothing was changed")
    replaced = [o["name"] for o in manifest["outputs"]
                if not fs.exists(f"{location}/{o['name']}") and not fs.exists(f"{trash}/rolled-back/{o['name']}")]
    if replaced:
        raise RollbackError(f"{manifest['table']} {manifest['partition']}: merged file(s) {replaced[:3]} are gone "
                            "from the partition (a later compaction replaced them? roll that run back first); "
                            "nothing was changed")
    for o in manifest["outputs"]:
        if fs.exists(f"{location}/{o['name']}"):
            fs.rename(f"{location}/{o['name']}", f"{trash}/rolled-back/{o['name']}")
    for f in manifest["inputs"]:
        if fs.exists(f"{trash}/{f['name']}"):
            fs.rename(f"{trash}/{f['name']}", f"{location}/{f['name']}")
    done = {**manifest, "rolled_back_at": time.time()}
    fs.write_text_atomic(area.manifest(manifest["run"], manifest["pid"]), json.dumps(done, indent=1))
    log.info("rolled back %s %s: %d file(s) restored, %d merged file(s) moved to %s/rolled-back",
             manifest["table"], manifest["partition"], len(manifest["inputs"]), len(manifest["outputs"]), trash)
    return done


def rollback_run(fs: HadoopFS, area: WorkArea, run: str, partitions: list[str] | None = None) -> list[dict]:
    found = manifests(fs, area, run)
    if partitions:
        missing = set(partitions) - {m["partition"] for m in found}
        if missing:
            raise RollbackError(f"run {run} committed no compaction of {sorted(missing)} in {area.root}")
        found = [m for m in found if m["partition"] in partitions]
    if not found:
        raise RollbackError(f"run {run} has no committed compaction in {area.root}")
    return [rollback_partition(fs, area, m) for m in found]
