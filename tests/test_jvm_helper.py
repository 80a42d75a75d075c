"""The JVM helper: shipped as source inside the package (also zipped, as --py-files ships it),
compiled in the driver, and the file operations the commit protocol relies on."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hive_compaction.storage.hadoop_fs import FolderGone, HadoopFS

ROOT = Path(__file__).resolve().parents[1]


def test_the_helper_source_is_read_from_a_zipped_package(tmp_path):
    """Cluster mode ships the package as a zip (py_files): the Java source must come along."""
    archive = tmp_path / "hive_compaction.zip"
    package = ROOT / "plugins" / "hive_compaction"
    with zipfile.ZipFile(archive, "w") as z:
        for f in package.rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts:
                z.write(f, f.relative_to(package.parent))
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); from hive_compaction.storage import jvm_helper; "
        "print(jvm_helper.__file__); print(json.dumps({k: len(v) for k, v in jvm_helper._sources().items()}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(archive)],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ["PATH"]},
    ).stdout.splitlines()
    assert out[0].startswith(str(archive))  # really imported from the zip
    # Every source file of the folder, and only those, is compiled (jvm_helper.SOURCES).
    folder = package / "storage" / "jvm"
    assert json.loads(out[1]) == {f.name: len(f.read_text(encoding="utf-8")) for f in folder.glob("*.java")}


@pytest.mark.integration
def test_moves_skip_missing_sources_and_never_overwrite(spark, tmp_path):
    fs = HadoopFS(spark)
    src, dst = tmp_path / "src", tmp_path / "deep" / "er" / "dst"
    src.mkdir()
    for name in ("a", "b", "c"):
        (src / name).write_text(name)
    (tmp_path / "taken").write_text("keep me")
    uri = lambda p: p.as_uri()

    # Missing sources are skipped (a replayed journal), folders are created, order is kept.
    assert (
        fs.move_all(
            [(uri(src / "a"), uri(dst / "a")), (uri(src / "gone"), uri(dst / "gone")), (uri(src / "b"), uri(dst / "b"))]
        )
        == 2
    )
    assert sorted(p.name for p in dst.iterdir()) == ["a", "b"] and (dst / "a").read_text() == "a"
    assert fs.move_all([(uri(src / "a"), uri(dst / "a"))]) == 0  # already moved: nothing to do

    # An existing target stops the moves there: nothing is overwritten, later pairs are not moved.
    with pytest.raises(Exception, match="will not overwrite"):
        fs.move_all([(uri(src / "c"), uri(tmp_path / "taken")), (uri(dst / "a"), uri(src / "a"))])
    assert (tmp_path / "taken").read_text() == "keep me" and (src / "c").read_text() == "c"
    assert (dst / "a").exists() and not (src / "a").exists()

    entries = fs.list(uri(dst))
    assert [(e.name, e.size, e.is_dir) for e in entries] == [("a", 1, False), ("b", 1, False)]
    assert fs.list(uri(tmp_path / "nowhere")) == []
    statuses = fs.statuses([uri(dst / "b"), uri(dst / "nope"), uri(dst)])
    assert statuses[0].size == 1 and statuses[1] is None and statuses[2].is_dir


@pytest.mark.integration
def test_the_local_disks_files_and_folders_get_the_modes_hadoop_would_give_them(spark, tmp_path):
    """The folders a move, a journal, a manifest or a copy needs, and a copied ORC output with its
    checksum file, are made on the local disk without a chmod process each (``LocalDisk``), with Hadoop's
    modes: its defaults less the configured umask, whatever the process's umask. Compared with
    Hadoop's own file system under the same settings."""
    spark.range(0, 20, 1, 2).write.orc(str(tmp_path / "orc"))
    inputs = sorted(p.as_uri() for p in (tmp_path / "orc").glob("part-*.orc"))
    conf = spark._jsc.hadoopConfiguration()
    old = conf.get("fs.permissions.umask-mode")
    conf.set("fs.permissions.umask-mode", "027")
    try:
        fs = HadoopFS(spark)
        (tmp_path / "src").mkdir()
        (tmp_path / "src" / "a").write_text("a")
        assert fs.move_all([((tmp_path / "src" / "a").as_uri(), (tmp_path / "ours" / "x" / "a").as_uri())]) == 1
        fs._call("writeLocal", (tmp_path / "notes" / "y" / "m.json").as_uri(), "{}")
        fs.write_text_atomic((tmp_path / "manifests" / "w" / "m.json").as_uri(), "{}")
        copied = fs._call("copyMerge", "orc", inputs, (tmp_path / "staged" / "z" / "out.orc").as_uri())
        assert "error" not in copied and copied["output"]["rows"] == 20, copied
        # A FileSystem of its own: a cached one keeps the settings it was made with.
        hadoop = fs.java_class("org.apache.hadoop.fs.FileSystem").newInstance(
            fs.java_class("java.net.URI")("file:///"), conf
        )
        hadoop.mkdirs(fs.path((tmp_path / "hadoops" / "x").as_uri()))
        hadoop.create(fs.path((tmp_path / "hadoops" / "x" / "f").as_uri())).close()
        hadoop.close()
        mode = lambda p: oct(p.stat().st_mode & 0o7777)
        folders = {
            p: mode(tmp_path / p)
            for p in (
                "ours",
                "ours/x",
                "notes",
                "notes/y",
                "manifests",
                "manifests/w",
                "staged",
                "staged/z",
                "hadoops",
                "hadoops/x",
            )
        }
        files = {
            p: mode(tmp_path / p)
            for p in ("staged/z/out.orc", "staged/z/.out.orc.crc", "hadoops/x/f", "hadoops/x/.f.crc")
        }
        assert set(folders.values()) == {"0o750"} and set(files.values()) == {"0o640"}, (folders, files)
        assert (tmp_path / "ours" / "x" / "a").read_text() == "a" and (tmp_path / "notes" / "y" / "m.json").exists()
    finally:
        conf.unset("fs.permissions.umask-mode") if old is None else conf.set("fs.permissions.umask-mode", old)


@pytest.mark.integration
def test_moves_into_a_partition_never_create_its_folder(spark, tmp_path):
    """A partition dropped between a commit's check and its moves must stay dropped (MSCK REPAIR
    would register a re-created folder): a move that may not create folders fails, moving
    nothing; into an existing folder it moves the file and its checksum file."""
    fs = HadoopFS(spark)
    src, gone = tmp_path / "staging", tmp_path / "table" / "dt=1"
    uri = lambda p: f"file://{p}"  # as_uri() would quote the "="
    src.mkdir()
    for name in ("a", "b"):
        fs._write(uri(src / name), name)  # through Hadoop: with its .crc side file
    assert (src / ".a.crc").exists()

    with pytest.raises(FolderGone, match="no such folder to move into"):
        fs.move_all([(uri(src / "a"), uri(gone / "a"))], create_folders=False)
    assert not gone.exists() and not gone.parent.exists()
    assert (src / "a").read_text() == "a" and (src / ".a.crc").exists()
    with pytest.raises(FolderGone):
        fs.rename(uri(src / "b"), uri(gone / "b"), create_folders=False)
    assert not gone.parent.exists() and (src / "b").read_text() == "b"

    gone.mkdir(parents=True)  # into a folder that exists: moved, with its checksum file
    assert (
        fs.move_all(
            [(uri(src / "a"), uri(gone / "a")), (uri(src / "missing"), uri(gone / "missing"))], create_folders=False
        )
        == 1
    )
    assert (gone / "a").read_text() == "a" and (gone / ".a.crc").exists() and not (src / ".a.crc").exists()
    assert spark.read.text(uri(gone / "a")).collect()[0][0] == "a"  # the checksum still matches
    with pytest.raises(Exception, match="will not overwrite"):
        fs.move_all([(uri(src / "b"), uri(gone / "a"))], create_folders=False)
    assert (src / "b").read_text() == "b" and (gone / "a").read_text() == "a"


@pytest.mark.integration
def test_each_python_threads_py4j_connection_gets_no_nagle_delay(spark):
    """The helper reaches the py4j connection serving the calling thread (Spark's JVM opens
    java.lang to reflection) and turns Nagle's algorithm off on it; each Python thread has its
    own connection, so each thread is handled once. If Spark or py4j changed this, every reply
    over 8 KB would silently cost ~40 ms again."""
    import threading

    from hive_compaction.storage import jvm_helper

    got = []

    def in_a_thread():
        got.append(jvm_helper.helper(spark).noDelay())
        jvm_helper.call(spark, "list", "file:///nonexistent-folder")
        got.append(spark._jvm._gateway_client in jvm_helper._thread.clients)

    t = threading.Thread(target=in_a_thread)
    t.start()
    t.join()
    assert got == [True, True]


# Runs in a process (and JVM) of its own: py4j caches methods by class name, so two helper classes
# from two loaders must not be called in one JVM (the suite's own helper lives in the tests' JVM).
_DRIVER = """
import json, sys
from pyspark.sql import SparkSession
from hive_compaction.storage.hadoop_fs import HadoopFS
spark = SparkSession.builder.master("local[1]").getOrCreate()
print(json.dumps([e.name for e in HadoopFS(spark).list(sys.argv[1])]))
"""


@pytest.mark.integration
def test_the_next_driver_loads_the_helper_compiled_by_the_first(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "f").write_text("x")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    runs = [
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import logging; logging.basicConfig(level=logging.INFO)\n" + _DRIVER,
                data.as_uri(),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        for _ in range(2)
    ]
    entry = next((tmp_path / "cache" / "hive-compaction" / "jvm-helper").iterdir())
    assert "JVM helper: compiled in" in runs[0].stderr and f"kept in {entry}" in runs[0].stderr, runs[0].stderr
    assert f"JVM helper: loaded from {entry}" in runs[1].stderr and "compiled in" not in runs[1].stderr
    assert [r.stdout.splitlines()[-1] for r in runs] == ['["f"]', '["f"]']
    for folder in (entry.parent.parent, entry.parent, entry):
        assert folder.stat().st_mode & 0o777 == 0o700
    assert {f.stat().st_mode & 0o777 for f in entry.iterdir()} == {0o600}  # whatever the umask


@pytest.mark.integration
def test_a_damaged_cache_entry_is_compiled_again_and_replaced(spark, tmp_path, monkeypatch, caplog):
    from hive_compaction.storage import jvm_helper

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    caplog.set_level("INFO", logger=jvm_helper.__name__)
    jvm_helper._class_loader(spark)  # compiled, then kept (no helper method is called here: see _DRIVER)
    entry = next((tmp_path / "cache" / "hive-compaction" / "jvm-helper").iterdir())
    manifest = json.loads((entry / "classes.json").read_text())
    assert {f"{name}.class" for name in jvm_helper.SOURCES} <= set(manifest)
    assert jvm_helper._class_loader(spark).getClass().getName() == "java.net.URLClassLoader"

    damaged = entry / "FileMoves.class"  # a partial write, a damaged disk
    damaged.write_bytes(damaged.read_bytes()[:-1])
    caplog.clear()
    loader = jvm_helper._class_loader(spark)
    assert f"{damaged} is not the file compiled there: removing it and compiling" in caplog.text
    assert "compiled in" in caplog.text and loader.getClass().getName() != "java.net.URLClassLoader"
    assert hashlib.sha256(damaged.read_bytes()).hexdigest() == manifest["FileMoves.class"]  # replaced
    assert jvm_helper._class_loader(spark).getClass().getName() == "java.net.URLClassLoader"


@pytest.mark.integration
def test_a_cache_folder_others_may_write_is_not_used(spark, tmp_path, monkeypatch, caplog):
    """A class file from the cache runs with the job's credentials: a folder another user could
    write to is neither read nor written, and the job compiles the helper as without a cache."""
    from hive_compaction.storage import jvm_helper

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    caplog.set_level("INFO", logger=jvm_helper.__name__)
    jvm_helper._class_loader(spark)
    root = tmp_path / "cache" / "hive-compaction" / "jvm-helper"
    root.chmod(0o777)
    caplog.clear()
    loader = jvm_helper._class_loader(spark)
    assert f"{root} is not this user's alone" in caplog.text and "compiled in" in caplog.text
    assert f"not kept ({root} is not this user's alone" in caplog.text
    assert loader.getClass().getName() != "java.net.URLClassLoader"
