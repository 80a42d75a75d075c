"""The merge job's library (Spark driver): list, group, rewrite or copy-merge, verify, then commit
through ``commit``; its results go to the results table (``results_writer``)."""
