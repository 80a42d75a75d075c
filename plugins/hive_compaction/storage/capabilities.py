"""What the commit needs from a storage scheme, known per scheme, never assumed.

The in-place commit renames files in and out of a partition and holds a partition with a
journal that only one committer can publish. Both must be atomic: a rename that is a copy plus
a delete (S3A, GCS, Azure blob without a hierarchical namespace) can leave a file in both places
when a job dies, and a "create unless it exists" that checks and then writes lets two committers
both win. So a scheme is used only where we know how to publish a file exclusively:

- ``hdfs``: the NameNode renames atomically and a plain rename never replaces an existing file;
- ``file`` (the tests' stand-in and single-machine set-ups): a hard link, which the kernel
  refuses when the name exists (a rename would silently replace it);
- ``s3a``: S3's conditional write, a PutObject with ``If-None-Match: *`` that the store refuses
  (412) when the key exists (hadoop-aws 3.4.2+: ``fs.option.create.conditional.overwrite``); the
  job checks that hadoop-aws offers it and that the endpoint honours it before it relies on it, and
  where it does not, publishes only while it holds the partition's Metastore lock (``small_files``).
  Renames there are copies, so only ``commit_mode: location_switch`` is allowed: it never
  renames inside a partition that readers read, and its commit point is one Metastore call;
- ``viewfs``: whatever its mount resolves to (``HadoopFS.resolved_scheme``).

Anything else is refused with the reason, before a byte is staged.
"""

from __future__ import annotations

from urllib.parse import urlsplit

RENAME_NO_REPLACE = "rename"  # the file system's rename fails when the target exists
HARD_LINK = "link"  # java.nio Files.createLink: link(2) fails when the target exists
CONDITIONAL_PUT = "if-none-match"  # S3 PutObject with If-None-Match: *, refused (412) when the key exists

EXCLUSIVE_PUBLISH = {"hdfs": RENAME_NO_REPLACE, "file": HARD_LINK, "s3a": CONDITIONAL_PUT}
# Object stores: a rename is a copy then a delete, a folder is a key prefix (no time of its own:
# S3A reports the time of the call), an object's time is that of its last write.
OBJECT_STORES = ("s3a",)
# hadoop-aws's createFile option that sends If-None-Match: * (HADOOP-19256).
CONDITIONAL_CREATE_OPTION = "fs.option.create.conditional.overwrite"
# The hidden temporary name a journal or manifest is written under before it is published: a
# job killed in between leaves it behind (``work_area.purge_expired`` removes old ones).
TEMP_SUFFIX = ".tmp"
# Schemes that are only a view over others: resolved by the job's Hadoop configuration.
MOUNT_SCHEMES = ("viewfs",)
IN_PLACE, LOCATION_SWITCH = "in_place", "location_switch"  # the commit modes (config's commit_mode)


def scheme(uri: str) -> str:
    return (urlsplit(uri).scheme or "file").lower()


def is_object_store(resolved_scheme: str) -> bool:
    return resolved_scheme in OBJECT_STORES


def commit_refusal(resolved_scheme: str, commit_mode: str = IN_PLACE, mounted: bool = False) -> str | None:
    """Why files on ``resolved_scheme`` cannot be committed in ``commit_mode``, or None.
    ``mounted``: the location is a viewfs path that resolves there."""
    if resolved_scheme in OBJECT_STORES and mounted:
        return (
            f"storage scheme '{resolved_scheme}' behind a viewfs mount: the conditional writes its journals "
            "need are not asked through a mount, so a commit there could duplicate or lose rows; it is "
            f"refused (point the Metastore's locations at {resolved_scheme}:// directly)"
        )
    if resolved_scheme in OBJECT_STORES and commit_mode != LOCATION_SWITCH:
        return (
            f"storage scheme '{resolved_scheme}' is an object store: a rename there is a copy then a delete, "
            "so the in-place commit, which moves files in and out of the partition, could duplicate or lose "
            "rows if a job died midway; it is refused (set commit_mode: location_switch for this table: it "
            "builds a new folder and switches the Metastore's location in one call)"
        )
    if resolved_scheme in EXCLUSIVE_PUBLISH:
        return None
    return (
        f"storage scheme '{resolved_scheme}' is not known to rename atomically or to create a file "
        "exclusively (GCS and blob stores copy on rename); a commit there could duplicate or lose rows, "
        f"so it is refused (supported: {', '.join(sorted(set(EXCLUSIVE_PUBLISH) - set(OBJECT_STORES)))}, "
        "s3a with commit_mode location_switch, and viewfs mounts over them)"
    )


def plan_refusal(location: str, commit_mode: str = IN_PLACE) -> str | None:
    """The same check where the Metastore's location is all that is known (the plan task):
    mounts are resolved later, by the merge job."""
    s = scheme(location)
    return None if s in MOUNT_SCHEMES else commit_refusal(s, commit_mode)


# How each scheme publishes a file exclusively, as the supported-stores table says it.
_HOW = {
    RENAME_NO_REPLACE: "the file system's rename, which never replaces a file",
    HARD_LINK: "a hard link (`link(2)` fails when the name exists)",
    CONDITIONAL_PUT: "S3's conditional PUT (`If-None-Match: *`), probed first; where the endpoint does not "
    "honour it, only while the job holds the partition's Metastore lock",
}
OTHER_SCHEMES = ("gs", "abfs", "abfss", "wasb", "oss")  # examples of what the last row refuses


def supported_stores_table() -> str:
    """The supported-stores table docs/deploy.md quotes (tests/test_supported_stores.py keeps them equal)."""

    def mode(s: str, m: str) -> str:
        return "yes" if commit_refusal(s, m) is None else "refused"

    rows = ["| scheme | `in_place` | `location_switch` | a journal is published by |", "|---|---|---|---|"]
    for s, how in EXCLUSIVE_PUBLISH.items():
        rows.append(f"| `{s}` | {mode(s, IN_PLACE)} | {mode(s, LOCATION_SWITCH)} | {_HOW[how]} |")
    for s in MOUNT_SCHEMES:
        rows.append(
            f"| `{s}` | as its mount's scheme | as its mount's scheme (an object store behind a mount: "
            "refused) | its mount's scheme |"
        )
    other = OTHER_SCHEMES[0]
    rows.append(
        f"| anything else ({', '.join(f'`{x}`' for x in OTHER_SCHEMES)}, ...) | {mode(other, IN_PLACE)} "
        f"| {mode(other, LOCATION_SWITCH)} | nothing known to be exclusive: refused before a byte is staged |"
    )
    return "\n".join(rows) + "\n"
