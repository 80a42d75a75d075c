"""The commit protocol (Spark driver): in place or by location switch, recovery of interrupted
commits, rollback, and the work area (journals, manifests, trash, staging)."""
