"""Kept for scripts that name this path: runs ``hive_compaction/jobs/rollback.py``, the one copy
(shipped inside the package, so inside its wheel and zip). Prefer that file."""

import sys

from hive_compaction.jobs.rollback import main

if __name__ == "__main__":
    sys.exit(main())
