"""The tests' object-store stand-in: ``tests/jvm/S3LikeFileSystem.java`` (scheme ``s3like``, a
rename that copies then deletes, a create that checks then writes) built into a jar.

No javac needed (CI may have only a Java runtime): Janino, in the pyspark wheel for Spark's code
generation, compiles it in a JVM started through py4j (also in the wheel), and Python's zipfile
makes the jar. The jar goes on the classpath of every JVM that must reach ``s3like://`` paths (the
Metastore's, the merge jobs' drivers); ``hadoop_conf`` is the configuration that maps the scheme
and mounts it under ``viewfs://<mount>/objects``.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from suite_budget import started

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "jvm" / "S3LikeFileSystem.java"
CLASS = "hctest.S3LikeFileSystem"
SCHEME = "s3like"
MOUNT_LINK = "/objects"


def spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def build_jar(dest: Path) -> Path:
    """Compile the file system with Janino into ``dest/s3like-fs.jar``; returns the jar."""
    with started("s3like file system jar (Janino)"):
        return _build_jar(dest)


def _build_jar(dest: Path) -> Path:
    from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
    from py4j.protocol import Py4JJavaError

    jars = spark_jars()
    py4j_jar = next(jars.glob("py4j-*.jar"))
    compiler_jars = [str(next(jars.glob(f"{name}-*.jar"))) for name in ("janino", "commons-compiler")]
    classes = dest / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    port = launch_gateway(
        jarpath=str(py4j_jar), classpath=":".join(compiler_jars), die_on_exit=True, javaopts=["-Xmx256m"]
    )
    gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, auto_convert=True))
    try:
        jvm = gateway.jvm
        compiler = jvm.org.codehaus.janino.CompilerFactory().newCompiler()
        # Every jar of the wheel: Hadoop's signatures name its shaded classes, slf4j, ...
        wheel = sorted(jars.glob("*.jar"))
        classpath = gateway.new_array(jvm.java.io.File, len(wheel))
        for i, jar in enumerate(wheel):
            classpath[i] = jvm.java.io.File(str(jar))
        compiler.setClassPath(classpath)
        compiler.setDestinationDirectory(jvm.java.io.File(str(classes)), False)
        sources = gateway.new_array(jvm.java.io.File, 1)
        sources[0] = jvm.java.io.File(str(SOURCE))
        try:
            compiler.compile(sources)
        except Py4JJavaError as e:  # its text needs the gateway, shut down below
            cause, chain = e.java_exception, []
            while cause is not None:
                chain.append(str(cause.toString()))
                cause = cause.getCause()
            raise RuntimeError(f"Janino could not compile {SOURCE}: " + " <- ".join(chain)) from None
    finally:
        gateway.shutdown()
    jar = dest / "s3like-fs.jar"
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
        for f in sorted(classes.rglob("*.class")):
            z.write(f, f.relative_to(classes).as_posix())
    if not any(n.endswith("S3LikeFileSystem.class") for n in zipfile.ZipFile(jar).namelist()):
        raise RuntimeError(f"Janino wrote no class for {SOURCE} into {classes}")
    return jar


def hadoop_conf(root: Path, viewfs_mount: str) -> dict[str, str]:
    """Hadoop settings: the scheme's class, the local folder behind ``s3like:///``, and the mount
    ``viewfs://<viewfs_mount>/objects`` -> ``s3like:///objects``."""
    return {
        f"fs.{SCHEME}.impl": CLASS,
        f"fs.{SCHEME}.root": str(root),
        f"fs.viewfs.mounttable.{viewfs_mount}.link.{MOUNT_LINK}": f"{SCHEME}://{MOUNT_LINK}",
    }
