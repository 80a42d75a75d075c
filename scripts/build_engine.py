"""Build the merge engine's jar (``plugins/hive_compaction/merge/engine/``, ``mvn package``) into the
package, where the wheel ships it: ``plugins/hive_compaction/jobs/hive-compaction-engine.jar``.

Run by ``make engine`` (and so by ``make test`` and ``make demo``) and by the wheel's build
(``setup.py``), so ``pip wheel .`` on a fresh clone builds it too. Maven fetches the pinned Spark,
Hadoop, ORC and Parquet jars it compiles against once (``~/.m2``, outside the test budget, like
pip's downloads). Nothing is built when the jar is newer than every source it is made of.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POM = ROOT / "plugins" / "hive_compaction" / "merge" / "engine" / "pom.xml"
HELPER_SOURCES = ROOT / "plugins" / "hive_compaction" / "storage" / "jvm"
JAR = ROOT / "plugins" / "hive_compaction" / "jobs" / "hive-compaction-engine.jar"
BUILT = ROOT / "build" / "engine" / "hive-compaction-engine.jar"  # the pom's build directory


def sources() -> list[Path]:
    return [POM, *sorted(POM.parent.rglob("*.java")), *sorted(HELPER_SOURCES.glob("*.java"))]


def up_to_date() -> bool:
    return JAR.exists() and JAR.stat().st_mtime >= max(p.stat().st_mtime for p in sources())


def build() -> Path:
    """The jar, built if any of its sources changed since; SystemExit saying what is missing."""
    if up_to_date():
        return JAR
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SystemExit(
            "error: mvn not found: the merge engine's jar is built with Maven (Debian: apt-get install maven)"
        )
    if shutil.which("javac") is None:
        raise SystemExit(
            "error: javac not found: the merge engine's jar needs a JDK 17 (Debian: openjdk-17-jdk-headless)"
        )
    done = subprocess.run([mvn, "-q", "-B", "-f", str(POM), "package"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(
            "error: the merge engine's jar did not build (is Maven Central reachable?):\n"
            + done.stdout[-3000:]
            + done.stderr[-2000:]
        )
    part = JAR.with_name(f".{JAR.name}.{os.getpid()}")
    shutil.copyfile(BUILT, part)
    os.replace(part, JAR)
    return JAR


if __name__ == "__main__":
    print(build())
    sys.exit(0)
