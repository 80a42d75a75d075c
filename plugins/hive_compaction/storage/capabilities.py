"""What the commit needs from a storage scheme, known per scheme, never assumed.

The in-place commit renames files in and out of a partition and holds a partition with a
journal that only one committer can publish. Both must be atomic: a rename that is a copy plus
a delete (S3A, GCS, Azure blob without a hierarchical namespace) can leave a file in both places
when a job dies, and a "create unless it exists" that checks and then writes lets two committers
both win. So a scheme is used only where we know how to publish a file exclusively:

- ``hdfs``: the NameNode renames atomically and a plain rename never replaces an existing file;
- ``file`` (the tests' stand-in and single-machine set-ups): a hard link, which the kernel
  refuses when the name exists (a rename would silently replace it);
- ``viewfs``: whatever its mount resolves to (``HadoopFS.resolved_scheme``).

Anything else is refused with the reason, before a byte is staged.
"""
from __future__ import annotations

from urllib.parse import urlsplit

RENAME_NO_REPLACE = "rename"  # the file system's rename fails when the target exists
HARD_LINK = "link"            # java.nio Files.createLink: link(2) fails when the target exists

EXCLUSIVE_PUBLISH = {"hdfs": RENAME_NO_REPLACE, "file": HARD_LINK}
# The hidden temporary name a journal or manifest is written under before it is published: a
# job killed in between leaves it behind (``work_area.purge_expired`` removes old ones).
TEMP_SUFFIX = ".tmp"
# Schemes that are only a view over others: resolved by the job's Hadoop configuration.
MOUNT_SCHEMES = ("viewfs",)


def scheme(uri: str) -> str:
    return (urlsplit(uri).scheme or "file").lower()


def commit_refusal(resolved_scheme: str) -> str | None:
    """Why files on ``resolved_scheme`` cannot be committed in place, or None."""
    if resolved_scheme in EXCLUSIVE_PUBLISH:
        return None
    return (f"storage scheme '{resolved_scheme}' is not known to rename atomically or to create a file "
            "exclusively (S3A, GCS and blob stores copy on rename); an in-place commit there could "
            f"duplicate or lose rows, so it is refused (supported: {', '.join(sorted(EXCLUSIVE_PUBLISH))}, "
            "and viewfs mounts over them)")


def plan_refusal(location: str) -> str | None:
    """The same check where the Metastore's location is all that is known (the plan task):
    mounts are resolved later, by the merge job."""
    s = scheme(location)
    return None if s in MOUNT_SCHEMES else commit_refusal(s)
