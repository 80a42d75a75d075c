"""Other actors for the commit protocol's adversarial tests, run at a commit step by the test
fault hook (``fault_hooks``: ``HIVE_COMPACTION_TEST_HOOK_CMD="python scripts/adversaries.py"``).

Which actor acts on which partition comes from the file ``HIVE_COMPACTION_ADVERSARIES`` names: a
JSON mapping of partition folder (local path) to ``{"action": ..., ...}``; the hook passes the partition's
folder in ``HIVE_COMPACTION_PARTITION_DIR``. Actions:

- ``add``: a writer drops one more file into the partition (``source`` -> the first of ``names``
  that is free, as Hive's ``INSERT INTO`` takes ``000000_0`` or else ``000000_0_copy_1``);
- ``overwrite``: a writer replaces the partition's content: every file removed, ``sources``
  copied to ``names`` (the inputs' names, as Hive's ``INSERT OVERWRITE`` reuses ``000000_0``, or
  new ones, as Spark's ``part-<uuid>``);
- ``steal``: every lock this package holds on the partition (``db``, ``table``, ``partition``) is
  released through the Metastore, as a job taking it for a dead one's would; then a pause longer
  than the holder's heartbeat interval, so that it finds its lock gone;
- ``drop``: ``ALTER TABLE ... DROP PARTITION`` through the Metastore (``db``, ``table``,
  ``partition``; the Metastore deletes the folder of a managed table);
- ``read``: a reader lists the partition's folder as the Metastore names it now (``db``,
  ``table``, ``partition``) and writes the files it found to ``out``; the test reads them after
  the job is done (a query that listed before and reads after);
- ``metastore``: a fault of the Metastore as the paused job sees it, through the proxy it talks
  to (``scripts/metastore_proxy.py``, ``control``: its control port): ``"fault": "hang"`` stops
  every byte between them (its calls and lock heartbeats hang) while ``argv`` runs (the same run's
  retry, which finds the lock silent and takes the partition over), then lets them through again;
  ``"fault": "restart"`` cuts every connection and refuses new ones for ``seconds``;
- ``command``: any other actor as an argument list (a second committer's spark-submit, a
  rollback, a purge by another run); its exit code is recorded, not enforced.

Each action appends a line to ``HIVE_COMPACTION_ADVERSARY_LOG`` (when set) so the test can prove
it ran.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def act(folder: str, spec: dict) -> str:
    action = spec["action"]
    where = Path(folder)
    if action == "add":
        name = next(n for n in spec["names"] if not (where / n).exists())
        shutil.copy(spec["source"], where / name)
        return f"added {name}"
    if action == "overwrite":
        for f in where.iterdir():
            if f.is_file():
                f.unlink()
        for source, name in zip(spec["sources"], spec["names"]):
            shutil.copy(source, where / name)
        return f"overwrote with {len(spec['names'])} file(s): {spec['names'][:2]}"
    if action == "steal":
        from hmsclient import hmsclient
        from hmsclient.genthrift.hive_metastore import ttypes

        with hmsclient.HMSClient(host="127.0.0.1", port=int(os.environ["HIVE_METASTORE_PORT"])) as c:
            request = ttypes.ShowLocksRequest(dbname=spec["db"], tablename=spec["table"], partname=spec["partition"])
            ours = [
                lock.lockid
                for lock in c.show_locks(request).locks or []
                if (lock.agentInfo or "").startswith("hive_compaction")
            ]
            for lock_id in ours:
                c.unlock(ttypes.UnlockRequest(lockid=lock_id))
        time.sleep(5)
        return f"released {len(ours)} lock(s)"
    if action == "drop":
        from hmsclient import hmsclient

        with hmsclient.HMSClient(host="127.0.0.1", port=int(os.environ["HIVE_METASTORE_PORT"])) as c:
            c.drop_partition_by_name(spec["db"], spec["table"], spec["partition"], True)
        return f"dropped {spec['partition']}"
    if action == "read":
        from hmsclient import hmsclient

        with hmsclient.HMSClient(host="127.0.0.1", port=int(os.environ["HIVE_METASTORE_PORT"])) as c:
            location = c.get_partition_by_name(spec["db"], spec["table"], spec["partition"]).sd.location
        listed = Path(location.split(":", 1)[-1])
        files = sorted(str(f) for f in listed.iterdir() if f.is_file() and not f.name.startswith((".", "_")))
        Path(spec["out"]).write_text(json.dumps(files))
        return f"listed {len(files)} file(s) in {listed}"
    if action == "metastore":
        from metastore_proxy import inject

        if spec["fault"] == "restart":
            inject(spec["control"], "restart", spec["seconds"])
            return f"restarted the Metastore ({spec['seconds']} s down)"
        inject(spec["control"], "hang")
        try:
            return f"hung the Metastore while the job's retry ran ({_run(spec)})"
        finally:
            inject(spec["control"], "resume")
    if action == "command":
        return f"ran {spec.get('label', spec['argv'][0])}: {_run(spec)}"
    raise ValueError(f"unknown action {action!r}")


def _run(spec: dict) -> str:
    """Run ``spec["argv"]`` without the test's fault variables; its exit code (not enforced)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVE_COMPACTION_TEST_")}
    p = subprocess.run(spec["argv"], env=env, capture_output=True, text=True, timeout=600)
    return f"exit {p.returncode}"


def main() -> int:
    folder = os.environ["HIVE_COMPACTION_PARTITION_DIR"].rstrip("/")
    with open(os.environ["HIVE_COMPACTION_ADVERSARIES"]) as f:
        plan = json.load(f)
    spec = plan.get(folder)
    if spec is None:
        return 0
    done = act(folder, spec)
    log = os.environ.get("HIVE_COMPACTION_ADVERSARY_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"folder": folder, "action": spec["action"], "done": done}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
