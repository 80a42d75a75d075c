"""Storage and Metastore access for the Spark side: the Hadoop FileSystem through py4j, the JVM
helper, per-scheme capabilities, location rules and partition listings, the Metastore client in
Spark's JVM. ``paths`` and ``capabilities`` are pure Python (the Airflow side uses them too)."""
