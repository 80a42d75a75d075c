"""Shared by both sides, importing nothing of the package but ``hive_compaction.__version__``: the
results a merge job reports, the batch payload the plan sends, the results table's names."""
