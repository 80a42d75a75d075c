"""Location checks that keep every change inside the partition it names, and the work-area layout."""

from __future__ import annotations

import hashlib
import re
from urllib.parse import urlsplit

# Under a table's folder: the folders location_switch builds partitions in. Starting with "_",
# it is skipped by Hive's and Spark's MSCK REPAIR; partitions located under it are still read.
VERSIONS_FOLDER = "_compacted"


def versions_folder(table_location: str, partition: str = "") -> str:
    """The table's VERSIONS_FOLDER, or with ``partition`` the folder of that partition's new
    folders (one per switch) in it."""
    folder = f"{table_location.rstrip('/')}/{VERSIONS_FOLDER}"
    return f"{folder}/{partition}" if partition else folder


def split_uri(uri: str) -> tuple[str, str, str]:
    """(scheme, authority, normalised absolute path); ``file:/a`` and ``file:///a/`` are equal."""
    parts = urlsplit(uri)
    scheme = (parts.scheme or "file").lower()
    path = re.sub(r"/+", "/", parts.path or "/")
    if path != "/":
        path = path.rstrip("/")
    return scheme, parts.netloc, path


def file_system(uri: str) -> str:
    """The ``scheme://authority`` part: which file system (cluster, nameservice, bucket) it names."""
    scheme, authority, _ = split_uri(uri)
    return f"{scheme}://{authority}"


def canonical(uri: str) -> str:
    scheme, authority, path = split_uri(uri)
    return f"{scheme}://{authority}{path}"


def is_within(child: str, parent: str) -> bool:
    """True when ``child`` lies strictly below ``parent`` (same file system)."""
    c, p = split_uri(child), split_uri(parent)
    if c[:2] != p[:2]:
        return False
    return c[2] != p[2] and c[2].startswith(p[2].rstrip("/") + "/")


def location_problem(location: str, table_location: str, partitioned: bool) -> str | None:
    """Why compacting ``location`` would touch more than one partition's files, or None."""
    if not location:
        return "has no location in the Metastore"
    _, _, path = split_uri(location)
    if ".." in path.split("/"):
        return f"location {location} contains '..'"
    if "." in path.split("/"):
        return f"location {location} contains a '.' segment"
    if path == "/":
        return f"location {location} is the file system root"
    if not partitioned:
        return None
    if split_uri(location) == split_uri(table_location):
        return f"location {location} is the table root"
    if split_uri(location)[:2] != split_uri(table_location)[:2]:
        return (
            f"location {location} is on another file system ({file_system(location)}) than its table "
            f"({file_system(table_location)}): a commit moves the partition's files to and from the "
            "table's work area by renames, which cannot cross file systems (locations are compared as "
            "written: a NameNode's own address for its nameservice is another file system here)"
        )
    if not is_within(location, table_location):
        return f"location {location} is outside the table location {table_location}"
    return None


def default_work_dir(table_location: str, database: str, table: str, work_root: str | None) -> str:
    """Where staging, journal, trash and results live: beside the table, never inside it.

    The default is a hidden folder in the table's parent (its database folder), on the same
    file system as the data so that moving files in and out is a rename, not a copy.
    """
    if work_root:
        return f"{canonical(work_root)}/{database}.{table}"
    scheme, authority, path = split_uri(table_location)
    parent = path.rsplit("/", 1)[0] or ""
    return f"{scheme}://{authority}{parent}/.hive_compaction/{table}"


def partition_id(table: str, partition: str) -> str:
    """A short file-name-safe id for a partition (its name may hold any character)."""
    digest = hashlib.sha256(f"{table}/{partition}".encode()).hexdigest()[:16]
    label = re.sub(r"[^A-Za-z0-9_.-]+", "_", partition)[:60].strip("_") or "table"
    return f"{label}.{digest}"


def run_tag(run_id: str) -> str:
    """An Airflow run id made safe for a path segment (run ids hold ':' and '+')."""
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_id).strip("-")[:120]
    return tag if tag not in ("", ".", "..") else "run"
