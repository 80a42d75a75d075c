"""Build the zip a merge job ships with ``--py-files`` when its driver runs on a cluster node.

    python plugins/hive_compaction/package.py [dist/hive_compaction.zip]   (or: make dist)

In cluster deploy mode (YARN, Kubernetes) the driver starts far from the Airflow worker and only
has what spark-submit sends it: the job file and this zip (set ``py_files`` in the config). The
modules the job imports need only the standard library and pyspark; the JVM helper's Java
source travels inside the zip and is read with ``pkgutil``.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def build_zip(dest: str | Path) -> Path:
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(PACKAGE.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix in (".py", ".java"):
                z.write(f, f"{PACKAGE.name}/{f.relative_to(PACKAGE)}")
    tmp.replace(dest)
    return dest


if __name__ == "__main__":
    print(build_zip(sys.argv[1] if len(sys.argv) > 1 else "dist/hive_compaction.zip"))
